"""text_classification and text_ranking: a sequence-classification head on texts or text pairs."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..processors.text import text_input
from ..zoo._base import score
from .base import EncoderPipeline, Prepared
from .sentence_config import read_sentence_config


class TextClassification(EncoderPipeline):
    """Labels of a text or a ``(text, text_pair)``: ``{"predictions": [{"label", "score"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> sst2 = "Xenova/distilbert-base-uncased-finetuned-sst-2-english"
    >>> classify = tm.text.text_classification(sst2)
    >>> classify("I love this")
    {'predictions': [{'label': ..., 'score': ...}]}
    >>> every = classify("I love this", top_k=None)["predictions"]     # all labels, best first
    >>> sorted(p["label"] for p in every), round(sum(p["score"] for p in every), 4)
    (['NEGATIVE', 'POSITIVE'], 1.0)

    Labels come from ``id2label``; scores are a softmax, a sigmoid for one label or
    ``problem_type`` multi_label_classification, the logits for regression
    (``function_to_apply`` overrides). ``top_k`` (default 1; None for all labels) as transformers.
    A dict ``{"text": ..., "text_pair": ...}`` is a pair too.
    """

    task = "text-classification"
    per_position = False
    defaults = MappingProxyType({"top_k": 1, "function_to_apply": None})
    count_options = MappingProxyType({"top_k": (1, True)})
    single_types = (str, tuple, dict)

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        return Prepared(self.processor.rows([self.text_of(index, item)], owners=[index]))

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        name = options["function_to_apply"] or self.args.score_function
        scores = score(self.output(outputs[0], "logits"), name.lower() if isinstance(name, str) else name)
        ranked = sorted(((self.args.id2label[i], float(s)) for i, s in enumerate(scores)), key=lambda p: -p[1])
        top_k = options["top_k"]
        ranked = ranked if top_k is None else ranked[:top_k]
        return {"predictions": [{"label": label, "score": value} for label, value in ranked]}

    def text_of(self, index: int, item: Any) -> str | tuple[str, str]:
        if isinstance(item, dict):
            unknown = set(item) - {"text", "text_pair"}
            if unknown or "text" not in item:
                raise TypeError(
                    f"{self.task}: input {index}: a dict input has keys 'text' and 'text_pair', "
                    f"got {sorted(item)}"
                )
            item = (item["text"], item["text_pair"]) if item.get("text_pair") is not None else item["text"]
        if isinstance(item, tuple):
            if len(item) != 2:
                raise TypeError(
                    f"{self.task}: input {index}: a pair is a (text, text_pair) tuple, got {len(item)} items"
                )
            return text_input(self.task, index, item[0]), text_input(self.task, index, item[1], "text_pair")
        return text_input(self.task, index, item)


class TextRanking(EncoderPipeline):
    """Documents ranked for a query by a cross-encoder: ``{"results": [{"index", "score"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> rank = tm.text.text_ranking("Xenova/ms-marco-MiniLM-L-6-v2")
    >>> ranked = rank({"query": "Who lives in Berlin?",
    ...                "documents": ["NYC is big.", "Berlin has 3.5M people."]})["results"]
    >>> sorted(r["index"] for r in ranked), ranked[0]["score"] >= ranked[1]["score"]
    ([0, 1], True)

    The scores are those of sentence-transformers' ``CrossEncoder.rank``: the activation saved
    with the model (config.json ``sentence_transformers.activation_fn``), else a sigmoid; sorted
    by score, highest first, ``top_k`` of them (None: all).
    """

    task = "text-ranking"
    per_position = False
    defaults = MappingProxyType({"top_k": None})
    count_options = MappingProxyType({"top_k": (1, True)})
    single_types = (dict,)

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        if self.args.num_labels != 1:
            raise ValueError(
                f"{self.task}: ranking needs a cross-encoder with one label; "
                f"{self.repo.name} has {self.args.num_labels}"
            )
        saved = self.args.cross_encoder_activation
        if saved is None:
            sentence = read_sentence_config(self.repo)
            saved = sentence.activation_fn if sentence is not None else None
        self.activation = activation_name(saved)

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        """One row per document: the (query, document) pair."""
        if not isinstance(item, dict) or set(item) != {"query", "documents"}:
            raise TypeError(f"{self.task}: input {index}: expected {{'query': str, 'documents': [str, ...]}}")
        query = text_input(self.task, index, item["query"], "query")
        if isinstance(item["documents"], str) or not isinstance(item["documents"], list | tuple):
            raise TypeError(f"{self.task}: input {index}: documents must be a list of str")
        pairs = [(query, text_input(self.task, index, doc, "document")) for doc in item["documents"]]
        return Prepared(self.processor.rows(pairs, owners=[index] * len(pairs)))

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        scores = [float(score(self.output(o, "logits"), self.activation).reshape(-1)[0]) for o in outputs]
        ranked = sorted(enumerate(scores), key=lambda p: -p[1])[: options["top_k"]]
        return {"results": [{"index": j, "score": s} for j, s in ranked]}


def activation_name(saved: str | None) -> str:
    """The activation a sentence-transformers path names (``torch.nn.modules.activation.Sigmoid``)."""
    if saved is None:
        return "sigmoid"
    kind = saved.rsplit(".", 1)[-1]
    names = {"Sigmoid": "sigmoid", "Identity": "none", "Softmax": "softmax"}
    if kind not in names:
        warnings.warn(f"text-ranking: activation {saved!r} is not supported; using a sigmoid", stacklevel=3)
    return names.get(kind, "sigmoid")
