"""text_classification and text_ranking: a sequence-classification head on texts or text pairs."""

from __future__ import annotations

import warnings
from types import MappingProxyType
from typing import Any

import numpy as np

from .base import TextEncoderPipeline, check_text
from .sentence_config import read_sentence_config

SCORE_FUNCTIONS = ("softmax", "sigmoid", "none")


def apply_function(logits: np.ndarray, name: str) -> np.ndarray:
    """Scores of logits as transformers computes them (``softmax``, ``sigmoid`` or ``none``)."""
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    if name == "softmax":
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)
    if name in ("none", "identity"):
        return logits
    raise ValueError(f"unknown function_to_apply {name!r}; expected one of {SCORE_FUNCTIONS}")


class TextClassification(TextEncoderPipeline):
    """Labels of a text or a ``(text, text_pair)``: ``{"predictions": [{"label", "score"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> sst2 = "Xenova/distilbert-base-uncased-finetuned-sst-2-english"
    >>> classify = tm.text.text_classification(sst2)                 # doctest: +SKIP
    >>> classify("I love this")                                        # doctest: +SKIP
    {'predictions': [{'label': 'POSITIVE', 'score': 0.9998}]}

    Labels come from ``id2label``; scores are a softmax, a sigmoid for one label or
    ``problem_type`` multi_label_classification, the logits for regression
    (``function_to_apply`` overrides). ``top_k`` (default 1; None for all labels) as transformers.
    A dict ``{"text": ..., "text_pair": ...}`` is a pair too.
    """

    task = "text-classification"
    defaults = MappingProxyType({"top_k": 1, "function_to_apply": None})
    count_options = MappingProxyType({"top_k": (1, True)})
    single_types = (str, tuple, dict)

    def run(self, items: list[Any], options: dict[str, Any]) -> list[dict[str, Any]]:
        texts = [self.text_of(i, x) for i, x in enumerate(items)]
        outputs = self.run_rows(self.encode_rows(texts), per_token=False)
        name = options["function_to_apply"] or self.args.score_function
        name = name.lower() if isinstance(name, str) else name
        top_k = options["top_k"]
        results = []
        for out in outputs:
            scores = apply_function(self.output(out, "logits"), name)
            ranked = sorted(
                ((self.args.id2label[i], float(s)) for i, s in enumerate(scores)), key=lambda p: -p[1]
            )
            ranked = ranked if top_k is None else ranked[:top_k]
            results.append({"predictions": [{"label": label, "score": score} for label, score in ranked]})
        return results

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
            return check_text(self.task, index, item[0]), check_text(self.task, index, item[1], "text_pair")
        return check_text(self.task, index, item)


class TextRanking(TextEncoderPipeline):
    """Documents ranked for a query by a cross-encoder: ``{"results": [{"index", "score"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> rank = tm.text.text_ranking("Xenova/ms-marco-MiniLM-L-6-v2")  # doctest: +SKIP
    >>> rank({"query": "Who lives in Berlin?",
    ...       "documents": ["NYC is big.", "Berlin has 3.5M people."]})  # doctest: +SKIP
    {'results': [{'index': 1, 'score': 8.76}, {'index': 0, 'score': -11.25}]}

    The scores are those of sentence-transformers' ``CrossEncoder.rank``: the activation saved
    with the model (config.json ``sentence_transformers.activation_fn``), else a sigmoid; sorted
    by score, highest first, ``top_k`` of them (None: all).
    """

    task = "text-ranking"
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

    def run(self, items: list[Any], options: dict[str, Any]) -> list[dict[str, Any]]:
        pairs, owners = [], []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or set(item) != {"query", "documents"}:
                raise TypeError(f"{self.task}: input {i}: expected {{'query': str, 'documents': [str, ...]}}")
            query = check_text(self.task, i, item["query"], "query")
            if isinstance(item["documents"], str) or not isinstance(item["documents"], list | tuple):
                raise TypeError(f"{self.task}: input {i}: documents must be a list of str")
            for doc in item["documents"]:
                pairs.append((query, check_text(self.task, i, doc, "document")))
                owners.append(i)
        outputs = self.run_rows(self.encode_rows(pairs, owners), per_token=False) if pairs else []
        scores = [
            float(apply_function(self.output(o, "logits"), self.activation).reshape(-1)[0]) for o in outputs
        ]
        results = []
        for i in range(len(items)):
            mine = [s for s, owner in zip(scores, owners) if owner == i]
            ranked = sorted(enumerate(mine), key=lambda p: -p[1])[: options["top_k"]]
            results.append({"results": [{"index": j, "score": s} for j, s in ranked]})
        return results


def activation_name(saved: str | None) -> str:
    """The activation a sentence-transformers path names (``torch.nn.modules.activation.Sigmoid``)."""
    if saved is None:
        return "sigmoid"
    kind = saved.rsplit(".", 1)[-1]
    names = {"Sigmoid": "sigmoid", "Identity": "none", "Softmax": "softmax"}
    if kind not in names:
        warnings.warn(f"text-ranking: activation {saved!r} is not supported; using a sigmoid", stacklevel=3)
    return names.get(kind, "sigmoid")
