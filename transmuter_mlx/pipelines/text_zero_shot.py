"""zero_shot_classification: an NLI model scores the hypothesis of each candidate label."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..processors.text import text_input
from ..zoo._base import score
from .base import EncoderPipeline, Prepared


def parse_labels(labels: Any) -> list[str]:
    """Candidate labels from a list or a comma-separated str, as transformers parses them."""
    if isinstance(labels, str):
        labels = [label.strip() for label in labels.split(",") if label.strip()]
    if not isinstance(labels, list | tuple) or not all(isinstance(x, str) for x in labels):
        raise TypeError(f"zero-shot-classification: labels must be a list of str, got {labels!r}")
    return list(labels)


class ZeroShotClassification(EncoderPipeline):
    """Scores of labels that you give for a text: ``{"predictions": [{"label", "score"}, ...]}``, best first.

    >>> import transmuter_mlx as tm
    >>> classify = tm.text.zero_shot_classification("Xenova/distilbert-base-uncased-mnli",
    ...                                             ["urgent", "phone", "tablet"])
    >>> predictions = classify("My iphone is broken and I need it fixed today!")["predictions"]
    >>> predictions[0]
    {'label': ..., 'score': ...}
    >>> sorted(p["label"] for p in predictions), round(sum(p["score"] for p in predictions), 4)
    (['phone', 'tablet', 'urgent'], 1.0)

    Each label is one row: the text paired with ``hypothesis_template.format(label)`` (default
    "This example is {}."). The scores are a softmax over the labels' entailment logits, or, with
    ``multi_label=True`` (or one label), a softmax of each label's [contradiction, entailment]
    logits, as transformers' ZeroShotClassificationPipeline. ``labels`` (or transformers'
    ``candidate_labels``) may be given when building, at each call, or in a dict input
    ``{"text": ..., "labels": [...]}``.
    """

    task = "zero-shot-classification"
    per_position = False
    defaults = MappingProxyType(
        {
            "labels": None,
            "candidate_labels": None,
            "hypothesis_template": "This example is {}.",
            "multi_label": False,
        }
    )
    single_types = (str, dict)

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        self.entailment_id = self.args.entailment_id
        if self.entailment_id == -1:  # as transformers: warn, and take the last label
            warnings.warn(
                f"{self.task}: no label of {self.repo.name} starts with 'entail' (label2id: "
                f"{self.args.label2id}); using the last label as entailment",
                stacklevel=2,
            )

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        """One row per label: the text and the label's hypothesis (the text truncated when it is long)."""
        template = options["hypothesis_template"]
        text, labels = self.split(index, item, options)
        if not labels:
            raise ValueError(
                f"{self.task}: input {index}: no candidate labels; give labels=[...] "
                "when building the pipeline, at the call, or in the input"
            )
        if template.format(labels[0]) == template:
            raise ValueError(f"{self.task}: hypothesis_template {template!r} has no {{}} for the label")
        pairs = [(text, template.format(label)) for label in labels]
        return Prepared(self.processor.rows(pairs, [index] * len(pairs), truncation="only_first"), labels)

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        labels = prepared.data
        logits = np.stack([self.output(o, "logits") for o in outputs])
        scores = self.scores(logits, options["multi_label"] or len(labels) == 1)
        order = list(reversed(scores.argsort()))
        return {"predictions": [{"label": labels[j], "score": float(scores[j])} for j in order]}

    def split(self, index: int, item: Any, options: Mapping[str, Any]) -> tuple[str, list[str]]:
        labels = options["candidate_labels"] if options["candidate_labels"] is not None else options["labels"]
        if isinstance(item, dict):
            if "text" not in item or set(item) - {"text", "labels"}:
                raise TypeError(
                    f"{self.task}: input {index}: a dict input has keys 'text' and 'labels', "
                    f"got {sorted(item)}"
                )
            labels = item.get("labels", labels)
            item = item["text"]
        return text_input(self.task, index, item), parse_labels(labels) if labels is not None else []

    def scores(self, logits: np.ndarray, multi_label: bool) -> np.ndarray:
        """Each label's entailment against its contradiction (``multi_label``), else a softmax over the labels'
        entailment logits, as transformers' ZeroShotClassificationPipeline."""
        entail = self.entailment_id
        if multi_label:
            contradiction = -1 if entail == 0 else 0
            return score(logits[:, [contradiction, entail]], "softmax")[:, 1]
        return score(logits[:, entail], "softmax")
