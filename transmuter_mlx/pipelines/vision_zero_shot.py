"""zero_shot_image_classification: an image scored against labels you give, by an image-text model."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..processors.text import text_input
from ..tokenizer import Tokenizer
from ..zoo._base import score
from .base import Prepared
from .batching import run_batched
from .text_zero_shot import parse_labels
from .vision import ImagePipeline, image_rows

__all__ = ["ZeroShotImageClassification", "candidate_labels"]


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


class ZeroShotImageClassification(ImagePipeline):
    """Scores of the labels you give for an image, best first: ``{"predictions": [{"label", "score"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> from tests.fixtures.images import photo
    >>> classify = tm.vision.zero_shot_image_classification("Xenova/clip-vit-base-patch32", ["cats", "dogs"])
    >>> predictions = classify(photo("chelsea"))["predictions"]
    >>> sorted(p["label"] for p in predictions), round(sum(p["score"] for p in predictions), 4)
    (['cats', 'dogs'], 1.0)

    As transformers' zero-shot-image-classification pipeline: each label goes into
    ``hypothesis_template`` (default "This is a photo of {}."), the texts of all labels and the
    images run through ``model.onnx`` together (one run per batch of images), and the scores of
    ``logits_per_image`` are a softmax over the labels (CLIP), or a sigmoid of each label (SigLIP,
    whose texts are also lowercased, without punctuation, padded to 64 tokens): the family says
    which. ``labels`` (or ``candidate_labels``) at build or at each call.
    """

    task = "zero-shot-image-classification"
    defaults = MappingProxyType({"labels": None, "candidate_labels": None,
                                 "hypothesis_template": "This is a photo of {}."})

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        self.tokenizer = self.options.tokenizer or Tokenizer.from_repo(self.repo)
        self.text_names = [i.name for i in self.model.inputs if i.name in ("input_ids", "attention_mask")]

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        labels = candidate_labels(self.task, options)
        template = options["hypothesis_template"]
        if not isinstance(template, str) or template.format("\0") == template:
            raise ValueError(f"{self.task}: hypothesis_template {template!r} has no {{}} for the label")
        texts = [self.family.label_text(template.format(label)) for label in labels]
        encoded = self.tokenizer(texts, truncation=True, **self.family.text_padding())
        return {**options, "labels": labels, "text_feeds": encoded.feeds(self.text_names)}

    def forward(self, prepared: list[Prepared], options: Mapping[str, Any]) -> list[list[dict[str, np.ndarray]]]:
        text = options["text_feeds"]

        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # only the outputs with an image axis
            return {"logits_per_image": self.output(self.run_model({**feeds, **text}), "logits_per_image")}

        return [[o] for o in run_batched(image_rows(prepared), self.processor, run, self.batch_size, False)]

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        labels = options["labels"]
        scores = score(self.output(outputs[0], "logits_per_image").reshape(-1), self.family.ZERO_SHOT_SCORES)
        order = sorted(range(len(labels)), key=lambda j: -scores[j])
        return {"predictions": [{"label": labels[j], "score": float(scores[j])} for j in order]}
