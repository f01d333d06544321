"""References of the vision tasks, and the normal form in which their results are compared.

>>> embedding_items({"embedding": [3.0, 4.0]})[0][0]
((2,),)

fp32: transformers 4.57.6 pipelines (and models, where the pipeline has no such output) on the
fixture's PyTorch weights, the images read from the same files. The rows of parity/tasks.py pick,
per task, one reference and one normal form from here (and from parity/text_reference.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .text_reference import Items, Reference

__all__ = [
    "classification", "embedding_items", "image_classification", "image_embeddings", "transformers_pipeline",
    "zero_shot", "zero_shot_image_classification",
]


def embedding_items(result: dict) -> Items:
    """An image embedding: its shape must agree, every element is compared."""
    vector = np.asarray(result["embedding"], dtype=np.float32)
    return [((tuple(vector.shape),), vector)]


def _pipeline(task: str, folder: Path) -> Any:
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers.pipeline(task, model=str(folder), device="cpu")


def transformers_pipeline(convert: Callable[[Any, Any, dict], dict], hf_task: str | None = None) -> Reference:
    """The reference that runs transformers' pipeline of the task (``hf_task`` when transformers names it
    otherwise) on each input and gives ``convert(pipe, input, options)``, our result."""

    def run(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
        pipe = _pipeline(hf_task or task, folder)
        return [convert(pipe, x, options) for x in inputs]

    return run


def classification(pipe: Any, image: Any, options: dict) -> dict:
    top_k = options.get("top_k", 5)
    extra = {k: options[k] for k in ("function_to_apply",) if k in options}
    out = pipe(image, top_k=pipe.model.config.num_labels if top_k is None else top_k, **extra)
    return {"predictions": [{"label": p["label"], "score": float(p["score"])} for p in out]}


def zero_shot(pipe: Any, image: Any, options: dict) -> dict:
    extra = {k: options[k] for k in ("hypothesis_template",) if k in options}
    out = pipe(image, candidate_labels=options["labels"], **extra)
    return {"predictions": [{"label": p["label"], "score": float(p["score"])} for p in out]}


def image_embeddings(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """CLIP and SigLIP: ``get_image_features`` (what vision_model.onnx's ``image_embeds`` is); other models:
    ``pooler_output`` (the image-feature-extraction pipeline's ``pool=True``), else the first token of
    ``last_hidden_state`` (its first row without it)."""
    import torch
    from transformers.image_utils import load_image

    pipe = _pipeline("image-feature-extraction", folder)
    results = []
    for image in inputs:
        pixels = pipe.image_processor(images=load_image(image), return_tensors="pt")
        with torch.no_grad():
            if hasattr(pipe.model, "get_image_features"):
                vector = pipe.model.get_image_features(**pixels)[0]
            else:
                out = pipe.model(**pixels)
                pooled = getattr(out, "pooler_output", None)
                vector = pooled[0] if pooled is not None else out.last_hidden_state[0, 0]
        vector = vector.numpy().astype(np.float32)
        if options.get("embedding_processor") == "l2_norm":
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        results.append({"embedding": vector})
    return results


def zero_shot_image_classification(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' zero-shot-image-classification pipeline, its tokenizer giving only the text inputs that
    model.onnx takes: SigLIP's export has no ``attention_mask`` (SigLIP was trained attending to its padding,
    hence its padding to 64 tokens), where the pipeline would give PyTorch one."""
    import onnx

    graph_inputs = {i.name for i in onnx.load(str(folder / "onnx" / "model.onnx"), load_external_data=False).graph.input}
    pipe = _pipeline(task, folder)
    pipe.tokenizer.model_input_names = [n for n in pipe.tokenizer.model_input_names if n in graph_inputs]
    return [zero_shot(pipe, x, options) for x in inputs]


image_classification = transformers_pipeline(classification)
