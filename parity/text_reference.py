"""References of the text pipelines, and the normal form in which results are compared.

>>> items("text-classification", {"predictions": [{"label": "a", "score": 0.5}]})
[(('a',), 0.5)]

fp32: transformers 4.57.6 pipelines on the fixture's PyTorch weights, sentence-transformers'
``SentenceTransformer.encode`` and ``CrossEncoder.rank``. Quantized variants: our own pipeline
logic on onnxruntime's outputs of the same ONNX file (``OrtModel`` stands in for the model).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8"))


def items(task: str, result: dict) -> list[tuple[tuple, Any]]:
    """A result as ``[(key, score or vector)]``: keys must agree, scores are compared."""
    if task == "text-embedding":
        vector = np.asarray(result["embedding"], dtype=np.float32)
        return [(tuple(vector.shape), vector)]
    if task in ("text-classification", "zero-shot-classification"):
        return [((p["label"],), p["score"]) for p in result["predictions"]]
    if task == "text-ranking":
        return [((r["index"],), r["score"]) for r in result["results"]]
    if task == "token-classification":
        return [((e["label"], e["start"], e["end"]), e["score"]) for e in result["entities"]]
    if task == "fill-mask":
        return [((p["token"], p["token_str"], p["sequence"]), p["score"]) for p in result["predictions"]]
    if task == "question-answering":
        return [((r["text"], r["start"], r["end"]), r["score"]) for r in result["results"]]
    raise ValueError(f"no comparison for task {task!r}")


class OrtModel:
    """An onnxruntime session shaped like ``tm.Model`` (``inputs``, ``outputs``, ``backend``, call)."""

    def __init__(self, path: str | Path) -> None:
        import onnxruntime as ort

        from transmuter_mlx.converters.backends import HOST
        from transmuter_mlx.converters.model import TensorInfo

        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        dtypes = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32}
        self.inputs = [
            TensorInfo(i.name, np.dtype(dtypes.get(i.type, np.int64)), tuple(i.shape))
            for i in self.session.get_inputs()
        ]
        self.outputs = [TensorInfo(o.name, None, None) for o in self.session.get_outputs()]
        self.backend = HOST

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.outputs]
        return dict(zip(names, self.session.run(None, dict(feeds))))


def transformers_reference(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """Results of the transformers pipeline (and sentence-transformers) in our result shapes."""
    if task == "text-embedding":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(_embedding_base(folder)), device="cpu")
        if model[0].auto_model.name_or_path != str(folder):  # settings of the base model, weights of this one
            from sentence_transformers.models import Transformer

            modules = [Transformer(str(folder), max_seq_length=model[0].max_seq_length), *list(model)[1:]]
            model = SentenceTransformer(modules=modules, device="cpu")
        vectors = model.encode(inputs, convert_to_numpy=True, batch_size=len(inputs))
        return [{"embedding": v} for v in vectors]
    if task == "text-ranking":
        from sentence_transformers import CrossEncoder

        model = CrossEncoder(str(folder), device="cpu")
        return [
            {
                "results": [
                    {"index": int(r["corpus_id"]), "score": float(r["score"])}
                    for r in model.rank(x["query"], x["documents"])
                ]
            }
            for x in inputs
        ]
    import transformers

    transformers.logging.set_verbosity_error()
    pipe = transformers.pipeline(task, model=str(folder), device="cpu")
    return [_convert(task, pipe, x, options) for x in inputs]


def _embedding_base(folder: Path) -> Path:
    if (folder / "modules.json").is_file():
        return folder
    from tests.fixtures.text_models import resolve_base_model

    base = resolve_base_model(folder)
    return base if base is not None else folder


def _convert(task: str, pipe: Any, x: Any, options: dict) -> dict:
    if task == "text-classification":
        arg = {"text": x[0], "text_pair": x[1]} if isinstance(x, tuple) else x
        out = pipe(arg, top_k=options.get("top_k", 1), **_only(options, "function_to_apply"))
        return {"predictions": [{"label": p["label"], "score": float(p["score"])} for p in out]}
    if task == "zero-shot-classification":
        out = pipe(x, candidate_labels=options["labels"], multi_label=options.get("multi_label", False))
        return {
            "predictions": [{"label": la, "score": float(s)} for la, s in zip(out["labels"], out["scores"])]
        }
    if task == "token-classification":
        out = pipe(x, aggregation_strategy=options.get("aggregation_strategy", "none"))
        return {
            "entities": [
                {
                    "label": e.get("entity_group", e.get("entity")),
                    "score": float(e["score"]),
                    "start": byte_offset(x, e["start"]),
                    "end": byte_offset(x, e["end"]),
                }
                for e in out
            ]
        }
    if task == "fill-mask":
        out = pipe(x, top_k=options.get("top_k", 5), **_only(options, "targets"))
        return {
            "predictions": [
                {
                    "token": p["token"],
                    "token_str": p["token_str"],
                    "sequence": p["sequence"],
                    "score": float(p["score"]),
                }
                for p in out
            ]
        }
    if task == "question-answering":
        out = pipe(
            question=x["question"],
            context=x["context"],
            **_only(options, "top_k", "handle_impossible_answer"),
        )
        out = out if isinstance(out, list) else [out]
        c = x["context"]
        return {
            "results": [
                {
                    "text": a["answer"],
                    "start": byte_offset(c, a["start"]),
                    "end": byte_offset(c, a["end"]),
                    "score": float(a["score"]),
                }
                for a in out
            ]
        }
    raise ValueError(f"no transformers reference for {task!r}")


def _only(options: dict, *names: str) -> dict:
    return {k: options[k] for k in names if k in options}
