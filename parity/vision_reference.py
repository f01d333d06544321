"""References of the vision tasks, and the normal form in which their results are compared.

>>> embedding_items({"embedding": [3.0, 4.0]})[0][0]
((2,),)

fp32: transformers 4.57.6 pipelines (and models, where the pipeline has no such output) on the
fixture's PyTorch weights, the images read from the same files; where the spec says so, onnxruntime on
the same ONNX file with transformers' (or transformers.js's) post-processing. The rows of parity/tasks.py
pick, per task, one reference and one normal form from here (and from parity/text_reference.py). A
reference is computed once per task, fixture, inputs and options (both backends compare with it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from .text_reference import Items, Reference

__all__ = [
    "DegenerateReference", "classification", "detection_items", "embedding_items", "image_classification",
    "image_embeddings", "object_detection", "once", "onnx_detections", "transformers_pipeline", "zero_shot",
    "zero_shot_image_classification", "zero_shot_object_detection",
]

BOX_KEYS = ("xmin", "ymin", "xmax", "ymax")


class DegenerateReference(ValueError):
    """A reference whose values are all alike (ties, zeros, one label): agreeing with it proves little."""


def embedding_items(result: dict) -> Items:
    """An image embedding: its shape must agree, every element is compared."""
    vector = np.asarray(result["embedding"], dtype=np.float32)
    return [((tuple(vector.shape),), vector)]


@functools.cache
def _pipeline(task: str, folder: Path) -> Any:
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers.pipeline(task, model=str(folder), device="cpu")


def once(reference: Reference) -> Reference:
    """``reference`` computed once per task, fixture, inputs and options (the backends share it)."""

    @functools.cache
    def cached(task: str, folder: Path, inputs: tuple, options: str) -> list[dict]:
        return reference(task, folder, list(inputs), json.loads(options))

    @functools.wraps(reference)
    def run(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
        return cached(task, Path(folder), tuple(inputs), json.dumps(options, sort_keys=True))

    return run


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


@once
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


@once
def zero_shot_image_classification(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' zero-shot-image-classification pipeline, its tokenizer giving only the text inputs that
    model.onnx takes: SigLIP's export has no ``attention_mask`` (SigLIP was trained attending to its padding,
    hence its padding to 64 tokens), where the pipeline would give PyTorch one."""
    import onnx

    graph_inputs = {i.name for i in onnx.load(str(folder / "onnx" / "model.onnx"), load_external_data=False).graph.input}
    pipe = _pipeline(task, folder)
    pipe.tokenizer.model_input_names = [n for n in pipe.tokenizer.model_input_names if n in graph_inputs]
    return [zero_shot(pipe, x, options) for x in inputs]


image_classification = once(transformers_pipeline(classification))


# ---------------------------------------------------------------- object detection
def detection_items(
    result: dict, score: Mapping[str, float], box: Mapping[str, float], onnx_score: Mapping[str, float] = {}
) -> Items:
    """A detection as ``(label,)`` and ``[score, xmin, ymin, xmax, ymax]`` with its tolerances by variant
    (``score``, ``box`` in pixels); a reference of onnxruntime (``result["reference"]``) takes ``onnx_score``."""
    if result.get("reference") == "onnxruntime":
        score = {**score, **onnx_score}
    limits = {v: np.array([score[v], *[box[v]] * 4]) for v in score}
    return [((d["label"],), np.array([d["score"], *(d["box"][k] for k in BOX_KEYS)], np.float64), limits)
            for d in result["detections"]]


def _untruncated(task: str, folder: Path) -> Any:
    """transformers' pipeline, its boxes the floats of ``post_process_object_detection`` (the pipeline's
    ``_get_bounding_box`` truncates them to ints)."""
    pipe = _pipeline(task, folder)
    pipe._get_bounding_box = lambda box: dict(zip(BOX_KEYS, box.tolist(), strict=True))
    return pipe


def _spread(detections: list[dict], threshold: float) -> list[dict]:
    """``detections``, checked worth comparing where ``threshold`` keeps every candidate: several, their
    scores and boxes apart."""
    scores, xmax = [d["score"] for d in detections], [d["box"]["xmax"] for d in detections]
    if threshold == 0 and (len(detections) < 4 or np.ptp(scores) < 1e-3 or np.ptp(xmax) < 1.0):
        raise DegenerateReference(f"{len(detections)} detections, scores {np.ptp(scores):.1e} apart, "
                                  f"xmax {np.ptp(xmax):.1e} px apart")
    return detections


@once
def object_detection(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' object-detection pipeline (boxes untruncated) at the case's ``threshold`` (its 0.5)."""
    if options.get("top_k") is not None:
        raise ValueError("transformers' object-detection pipeline has no top_k")
    pipe, threshold = _untruncated(task, folder), options.get("threshold", 0.5)
    return [{"detections": _spread(pipe(image, threshold=threshold), threshold)} for image in inputs]


@once
def zero_shot_object_detection(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' zero-shot-object-detection pipeline (boxes untruncated); Grounding DINO: onnxruntime on
    model.onnx with that pipeline's post-processing (``onnx_detections``), as the spec says, since the
    pipeline would give the PyTorch model each label alone where the exports take a label and a period."""
    labels = options.get("labels") or options.get("candidate_labels")
    threshold, top_k = options.get("threshold", 0.1), options.get("top_k")
    if json.loads((folder / "config.json").read_text())["model_type"] == "grounding-dino":
        return [{"detections": _spread(found[:top_k] if top_k else found, threshold), "reference": "onnxruntime"}
                for found in onnx_detections(folder, "model.onnx", inputs, threshold, labels)]
    pipe = _untruncated(task, folder)
    return [{"detections": _spread(pipe(image, candidate_labels=labels, threshold=threshold,
                                        **({"top_k": top_k} if top_k else {})), threshold)} for image in inputs]


@functools.cache
def _session(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def onnx_detections(folder: Path, file: str, inputs: list, threshold: float, labels: list[str]) -> list[list[dict]]:
    """Grounding DINO's detections of onnxruntime on ``onnx/file`` between transformers' image processor and
    tokenizer and its ``post_process_object_detection``, as the zero-shot-object-detection pipeline runs
    them: one run per label, its text the label in lowercase and a period, sorted by score (stable)."""
    import torch
    import transformers

    processor = transformers.AutoImageProcessor.from_pretrained(folder, use_fast=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    session = _session(folder / "onnx" / file)
    names = [i.name for i in session.get_inputs()]
    results = []
    for image in inputs:
        picture = transformers.image_utils.load_image(image)
        target = torch.tensor([[picture.height, picture.width]], dtype=torch.int32)
        found = []
        for label in labels:
            feeds = {**processor(images=picture, return_tensors="np"),
                     **tokenizer(label.strip().lower() + ".", return_tensors="np")}
            feeds = {n: np.asarray(feeds[n]) for n in names}
            feeds = {n: v.astype(np.int64) if v.dtype.kind in "iub" else v.astype(np.float32) for n, v in feeds.items()}
            logits, boxes = session.run(["logits", "pred_boxes"], feeds)
            out = SimpleNamespace(logits=torch.from_numpy(logits), pred_boxes=torch.from_numpy(boxes))
            raw = processor.post_process_object_detection(out, threshold, target)[0]
            found += [{"score": raw["scores"][i].item(), "label": label,
                       "box": dict(zip(BOX_KEYS, raw["boxes"][i][0].tolist()))} for i in raw["scores"].nonzero()]
        results.append(sorted(found, key=lambda d: d["score"], reverse=True))
    return results
