"""zero_shot_image_classification: an image scored against labels you give, by an image-text model."""

from __future__ import annotations

from types import MappingProxyType

from .vision import ImagePipeline
from .zero_shot_media import LabelScoring

__all__ = ["ZeroShotImageClassification"]


class ZeroShotImageClassification(LabelScoring, ImagePipeline):
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
    logits = "logits_per_image"
