"""References of the text tasks, and the normal form in which their results are compared.

>>> label_items({"predictions": [{"label": "a", "score": 0.5}]})
[(('a',), 0.5)]

fp32: transformers 4.57.6 pipelines on the fixture's PyTorch weights, sentence-transformers'
``SentenceTransformer.encode`` and ``CrossEncoder.rank``. The rows of parity/tasks.py pick, per
task, one reference and one normal form from here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: a result as ``[(key, score or vector)]``: the keys must agree, the scores are compared
Items = list[tuple[tuple, Any]]
#: ``(task, folder, inputs, options)`` -> the reference's results, in our result shapes
Reference = Callable[[str, Path, list, dict], list[dict]]


def byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8"))


def embedding_items(result: dict) -> Items:
    vector = np.asarray(result["embedding"], dtype=np.float32)
    return [(tuple(vector.shape), vector)]


def label_items(result: dict) -> Items:
    return [((p["label"],), p["score"]) for p in result["predictions"]]


def ranking_items(result: dict) -> Items:
    return [((r["index"],), r["score"]) for r in result["results"]]


def entity_items(result: dict) -> Items:
    return [((e["label"], e["start"], e["end"]), e["score"]) for e in result["entities"]]


def fill_mask_items(result: dict) -> Items:
    return [((p["token"], p["token_str"], p["sequence"]), p["score"]) for p in result["predictions"]]


def answer_items(result: dict) -> Items:
    return [((r["text"], r["start"], r["end"]), r["score"]) for r in result["results"]]


def sentence_embeddings(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """sentence-transformers' ``encode``, with the base model's settings when the fixture names one."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(_embedding_base(folder)), device="cpu")
    if model[0].auto_model.name_or_path != str(folder):  # settings of the base model, weights of this one
        from sentence_transformers.models import Transformer

        modules = [Transformer(str(folder), max_seq_length=model[0].max_seq_length), *list(model)[1:]]
        model = SentenceTransformer(modules=modules, device="cpu")
    vectors = model.encode(inputs, convert_to_numpy=True, batch_size=len(inputs))
    return [{"embedding": v} for v in vectors]


def _embedding_base(folder: Path) -> Path:
    if (folder / "modules.json").is_file():
        return folder
    from tests.fixtures.text_models import resolve_base_model

    base = resolve_base_model(folder)
    return base if base is not None else folder


def cross_encoder_ranks(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """sentence-transformers' ``CrossEncoder.rank`` of each ``{"query", "documents"}``."""
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


def transformers_pipeline(
    task: str, folder: Path, inputs: list, options: dict, *, convert: Callable[[Any, Any, dict], dict]
) -> list[dict]:
    """transformers' pipeline of ``task`` on each input; ``convert(pipe, input, options)`` calls it and
    gives our result (a :data:`Reference` once ``convert`` is bound with functools.partial)."""
    import transformers

    transformers.logging.set_verbosity_error()
    pipe = transformers.pipeline(task, model=str(folder), device="cpu")
    return [convert(pipe, x, options) for x in inputs]


def classification(pipe: Any, x: Any, options: dict) -> dict:
    arg = {"text": x[0], "text_pair": x[1]} if isinstance(x, tuple) else x
    out = pipe(arg, top_k=options.get("top_k", 1), **_only(options, "function_to_apply"))
    return {"predictions": [{"label": p["label"], "score": float(p["score"])} for p in out]}


def zero_shot(pipe: Any, x: Any, options: dict) -> dict:
    out = pipe(x, candidate_labels=options["labels"], multi_label=options.get("multi_label", False))
    return {"predictions": [{"label": la, "score": float(s)} for la, s in zip(out["labels"], out["scores"])]}


def entities(pipe: Any, x: Any, options: dict) -> dict:
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


def masked_tokens(pipe: Any, x: Any, options: dict) -> dict:
    out = pipe(x, top_k=options.get("top_k", 5), **_only(options, "targets"))
    return {
        "predictions": [
            {"token": p["token"], "token_str": p["token_str"], "sequence": p["sequence"], "score": float(p["score"])}
            for p in out
        ]
    }


def answers(pipe: Any, x: Any, options: dict) -> dict:
    out = pipe(question=x["question"], context=x["context"], **_only(options, "top_k", "handle_impossible_answer"))
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


def _only(options: dict, *names: str) -> dict:
    return {k: options[k] for k in names if k in options}


def gliner_entities(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """The ``gliner`` package's ``predict_entities`` on the fixture's PyTorch model, offsets as UTF-8 bytes."""
    from tests.fixtures.gliner_models import reference

    model = reference(folder)
    kept = {k: options[k] for k in ("threshold", "flat_ner", "multi_label") if k in options}
    out = []
    for x in inputs:
        text, labels = (x["text"], x.get("labels", options.get("labels"))) if isinstance(x, dict) else (x, options["labels"])
        found = model.predict_entities(text, list(labels), **kept)
        out.append({"entities": [{"label": e["label"], "score": float(e["score"]), "start": byte_offset(text, e["start"]),
                                  "end": byte_offset(text, e["end"]), "phrase": e["text"]} for e in found]})
    return out
