"""The vision tasks as functions, named as the spec names them; each returns a pipeline.

>>> import transmuter_mlx as tm
>>> from tests.fixtures.images import photo
>>> classify = tm.vision.image_classification("Xenova/vit-base-patch16-224")
>>> classify([photo("chelsea"), photo("coffee")])[1]["predictions"][0]
{'label': ..., 'score': ...}

Each function takes the repository (a Hub repo id or a local folder; the task's default model
when None) and the options of ``tm.pipeline``; an image is a ``PIL.Image.Image``, a path, a URL,
``bytes`` of an image file or a ``uint8`` array ``(height, width[, channels])``, and a list of
them gives a list of results. See docs/vision.md for each task's options and results. There is
one function per ``vision.*`` row of the task table (``transmuter_mlx.pipelines.tasks.TASKS``;
tests/test_task_table.py checks that they agree).
"""

from __future__ import annotations

from typing import Any

from .pipelines import pipeline
from .pipelines.vision_classification import ImageClassification, ImageEmbedding
from .pipelines.vision_zero_shot import ZeroShotImageClassification

__all__ = ["image_classification", "image_embedding", "zero_shot_image_classification"]


def image_classification(model: Any = None, /, **options: Any) -> ImageClassification:
    """Labels of an image with their scores, best first (``top_k``, default 5).

    >>> from tests.fixtures.images import photo
    >>> classify = image_classification("Xenova/vit-base-patch16-224")
    >>> len(classify(photo("chelsea"), top_k=3)["predictions"])
    3
    """
    return pipeline("image-classification", model, **options)


def image_embedding(model: Any = None, /, **options: Any) -> ImageEmbedding:
    """An image's embedding (CLIP/SigLIP ``image_embeds``, else ``pooler_output``, else the first token).

    >>> from tests.fixtures.images import photo
    >>> embed = image_embedding("Xenova/clip-vit-base-patch32")
    >>> embed(photo("chelsea"))["embedding"].ndim
    1
    """
    return pipeline("image-embedding", model, **options)


def zero_shot_image_classification(
    model: Any = None, labels: Any = None, /, **options: Any
) -> ZeroShotImageClassification:
    """Scores of the labels you give for an image, from an image-text model (CLIP, SigLIP).

    >>> from tests.fixtures.images import photo
    >>> classify = zero_shot_image_classification("Xenova/clip-vit-base-patch32", ["cats", "dogs"])
    >>> sorted(p["label"] for p in classify(photo("chelsea"))["predictions"])
    ['cats', 'dogs']
    """
    if labels is not None:
        options["labels"] = labels
    return pipeline("zero-shot-image-classification", model, **options)
