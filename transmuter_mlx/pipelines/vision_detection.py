"""object_detection and zero_shot_object_detection: labelled boxes in an image, in pixels of the image."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from .._tokenize import pad_rows
from ..tokenizer import Tokenizer
from .base import Prepared
from .batching import run_batched
from .vision import ImagePipeline, image_rows
from .vision_boxes import SCORERS, box_dict, check_threshold, corners, scale, sigmoid
from .zero_shot_media import candidate_labels

__all__ = ["ObjectDetection", "ZeroShotObjectDetection"]


class ObjectDetection(ImagePipeline):
    """Objects of the classes of a detector: ``{"detections": [{"label", "score", "box"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> from tests.fixtures.images import photo
    >>> detect = tm.vision.object_detection("Xenova/detr-resnet-50")
    >>> detections = detect(photo("chelsea"), threshold=0.0)["detections"]
    >>> detections[0]
    {'label': ..., 'score': ..., 'box': {'xmin': ..., 'ymin': ..., 'xmax': ..., 'ymax': ...}}
    >>> all(d["label"] in detect.args.id2label.values() for d in detections)
    True

    As transformers' object-detection pipeline with its image processor's
    ``post_process_object_detection``, except that a box is floats in pixels of the input image (the
    pipeline truncates them to ints). The family says how the logits become scores: DETR and YOLOS take
    a softmax over the classes without the last ("no object") and give one detection per query, in
    query order; RT-DETR (v2, D-FINE, RF-DETR) take a sigmoid of each query and class pair and keep the
    ``top_k`` best (default: as many as there are queries), best first. Detections score above
    ``threshold`` (default 0.5).
    """

    task = "object-detection"
    defaults = MappingProxyType({"threshold": 0.5, "top_k": None})
    count_options = MappingProxyType({"top_k": (1, True)})

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        threshold = check_threshold(self.task, options["threshold"])
        if options["top_k"] is not None and self.family.DETECTION_SCORES != "sigmoid_top_k":
            raise ValueError(f"{self.task}: top_k applies to detectors that score each query and class pair "
                             f"(RT-DETR); {self.repo.name} gives one detection per query")
        return {**options, "threshold": threshold}

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        out = outputs[0]
        scores, labels, queries = SCORERS[self.family.DETECTION_SCORES](self.output(out, "logits"), options["top_k"])
        keep = scores > options["threshold"]
        height, width = prepared.rows[0].original_size
        boxes = scale(corners(self.output(out, "pred_boxes")), self.family.box_extent(self.args, height, width))
        return {"detections": [{"label": self.args.id2label[int(label)], "score": float(s), "box": box_dict(boxes[q])}
                               for s, label, q in zip(scores[keep], labels[keep], queries[keep])]}


class ZeroShotObjectDetection(ImagePipeline):
    """Objects of labels that you give: ``{"detections": [{"label", "score", "box"}, ...]}``, best first.

    >>> import transmuter_mlx as tm
    >>> from tests.fixtures.images import photo
    >>> detect = tm.vision.zero_shot_object_detection("Xenova/owlvit-base-patch32", ["cat", "remote control"])
    >>> detections = detect(photo("chelsea"), threshold=0.0, top_k=3)["detections"]
    >>> [d["label"] in ("cat", "remote control") for d in detections]
    [True, True, True]

    As transformers' zero-shot-object-detection pipeline, with boxes as floats in pixels of the input
    image: a box's score for a label is the sigmoid of its highest logit in a run of that label, every
    box scoring above ``threshold`` (default 0.1) is a detection of the label (so a box may be a
    detection of several labels), sorted by score (``top_k``: the best of them). OWL-ViT and OWLv2 run
    all labels as the text queries of one run, and the images in batches; Grounding DINO runs each label
    alone, its text the label in lowercase and a period (a label cannot hold "." or "?"). ``labels`` (or
    ``candidate_labels``: a list, or a str of comma-separated labels) at build or at each call.
    """

    task = "zero-shot-object-detection"
    defaults = MappingProxyType({"labels": None, "candidate_labels": None, "threshold": 0.1, "top_k": None})
    count_options = MappingProxyType({"top_k": (1, True)})

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        self.tokenizer = self.options.tokenizer or Tokenizer.from_repo(self.repo)

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        labels = candidate_labels(self.task, {**options, **split_labels(options)})
        texts = []
        for i, label in enumerate(labels):
            if not label.strip():
                raise ValueError(f"{self.task}: label {i} is empty (labels: {labels!r})")
            try:
                texts.append(self.family.query_text(label))
            except ValueError as e:
                raise ValueError(f"{self.task}: {e}") from None
        runs = [range(len(labels))] if self.family.JOINT_QUERIES else [[i] for i in range(len(labels))]
        return {**options, "labels": labels, "threshold": check_threshold(self.task, options["threshold"]),
                "text_feeds": [self.text_feeds([labels[i] for i in run], [texts[i] for i in run]) for run in runs]}

    def text_feeds(self, labels: list[str], texts: list[str]) -> dict[str, np.ndarray]:
        """The token ids of one run's texts, padded as the family pads them; a ValueError for a label with more
        tokens than the model takes."""
        rows = self.tokenizer.encode_rows(texts, truncation=False)
        limit = self.family.max_query_tokens(self.args)
        for row, label in zip(rows, labels):
            if len(row) > limit:
                raise ValueError(f"{self.task}: the label {label!r} has {len(row)} tokens; "
                                 f"{self.repo.name} takes at most {limit}")
        pad_id = next((i for i in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id) if i is not None), 0)
        length = self.family.query_length(self.args)
        return pad_rows(rows, length if length is not None else [], pad_id, self.tokenizer.padding_side,
                        ("input_ids", "attention_mask", "token_type_ids"))

    def forward(self, prepared: list[Prepared], options: Mapping[str, Any]) -> list[list[dict[str, np.ndarray]]]:
        """Per image, the outputs of each run: one run of all labels, or one run per label."""
        rows = image_rows(prepared)
        runs = [run_batched(rows, self.processor, self.with_text(text), self.batch_size, False)
                for text in options["text_feeds"]]
        return [[run[i] for run in runs] for i in range(len(prepared))]

    def with_text(self, text: Mapping[str, np.ndarray]) -> Any:
        """The model on a batch of images and the texts of one run (the texts once per image)."""
        def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            images = len(feeds["pixel_values"])
            out = self.run_model({**feeds, **{k: np.tile(v, (images, 1)) for k, v in text.items()}})
            return {name: self.output(out, name) for name in ("logits", "pred_boxes")}
        return run

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        labels, threshold = options["labels"], options["threshold"]
        if self.family.JOINT_QUERIES:  # label j is query j: its column is the logits of a run of it alone
            (out,) = outputs
            per_label = [(out["logits"][:, j], out["pred_boxes"]) for j in range(len(labels))]
        else:  # a run per label: the highest logit of each box, as the pipeline's post-processing
            per_label = [(out["logits"].max(axis=-1), out["pred_boxes"]) for out in outputs]
        height, width = prepared.rows[0].original_size
        extent = self.family.box_extent(self.args, height, width)
        found = []
        for label, (logits, centers) in zip(labels, per_label):
            scores, boxes = sigmoid(logits), scale(corners(centers), extent)
            found += [{"label": label, "score": float(scores[b]), "box": box_dict(boxes[b])}
                      for b in np.flatnonzero(scores > threshold)]
        found.sort(key=lambda d: -d["score"])  # stable, as the pipeline's sorted(..., reverse=True)
        top_k = options["top_k"]
        return {"detections": found[:top_k] if top_k else found}


def split_labels(options: Mapping[str, Any]) -> dict[str, Any]:
    """Labels given as a str, split at commas as transformers' pipeline splits them (the pieces unstripped)."""
    return {k: options[k].split(",") for k in ("labels", "candidate_labels") if isinstance(options[k], str)}
