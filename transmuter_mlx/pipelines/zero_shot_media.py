"""The half that zero-shot image and audio classification share: labels in a template, tokenized
once per call, run with each batch of images or clips through one model, softmax (or sigmoid) per
label, ranked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..processors.text import text_input
from ..tokenizer import Tokenizer
from ..zoo._base import score
from .base import Prepared
from .batching import run_batched
from .text_zero_shot import parse_labels

__all__ = ["LabelScoring", "candidate_labels"]


def candidate_labels(task: str, options: Mapping[str, Any]) -> list[str]:
    """The call's labels (``candidate_labels``, else ``labels``); a ValueError when there are none."""
    given = options["candidate_labels"] if options["candidate_labels"] is not None else options["labels"]
    labels = parse_labels(given) if given is not None else []
    if not labels:
        raise ValueError(f"{task}: no candidate labels; give labels=[...] (or candidate_labels=) when building "
                         "the pipeline or at the call")
    for i, label in enumerate(labels):
        text_input(task, i, label, "label")
    return labels


class LabelScoring:
    """Mixed in before a media pipeline (ImagePipeline, AudioPipeline); ``logits`` names the
    model output with one row per image or clip and one column per label."""

    logits: str

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        self.tokenizer = self.options.tokenizer or Tokenizer.from_repo(self.repo)
        self.text_names = [i.name for i in self.model.inputs if i.name in ("input_ids", "attention_mask")]

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The labels' texts, tokenized once per call rather than once per input."""
        labels = candidate_labels(self.task, options)
        template = options["hypothesis_template"]
        if not isinstance(template, str) or template.format("\0") == template:
            raise ValueError(f"{self.task}: hypothesis_template {template!r} has no {{}} for the label")
        texts = [self.family.label_text(template.format(label)) for label in labels]
        encoded = self.tokenizer(texts, truncation=True, **self.family.text_padding())
        return {**options, "labels": labels, "text_feeds": encoded.feeds(self.text_names)}

    def forward(self, prepared: list[Prepared], options: Mapping[str, Any]) -> list[list[dict[str, np.ndarray]]]:
        text = options["text_feeds"]

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # only the output with a media axis
            return {self.logits: self.output(self.run_model({**feeds, **text}), self.logits)}

        rows = [row for p in prepared for row in p.rows]
        return [[o] for o in run_batched(rows, self.processor, run, self.batch_size, False)]

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        labels = options["labels"]
        scores = score(self.output(outputs[0], self.logits).reshape(-1), self.family.ZERO_SHOT_SCORES)
        order = sorted(range(len(labels)), key=lambda j: -scores[j])
        return {"predictions": [{"label": labels[j], "score": float(scores[j])} for j in order]}
