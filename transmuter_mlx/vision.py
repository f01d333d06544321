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
from .pipelines.vision_dense import BackgroundRemoval, DepthEstimation, ImageSegmentation, ImageToImage
from .pipelines.vision_detection import ObjectDetection, ZeroShotObjectDetection
from .pipelines.vision_zero_shot import ZeroShotImageClassification

__all__ = ["image_classification", "image_embedding", "zero_shot_image_classification",
           "background_removal", "depth_estimation", "image_segmentation", "image_to_image", "object_detection",
           "zero_shot_object_detection"]


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


def depth_estimation(model: Any = None, /, **options: Any) -> DepthEstimation:
    """A depth map of an image, resized to the image (``predicted_depth``) and as an 8-bit image (``depth``).

    >>> import numpy as np
    >>> estimate = depth_estimation("onnx-community/depth-anything-v2-small")
    >>> sorted(estimate(np.zeros((40, 60, 3), np.uint8)))
    ['depth', 'predicted_depth']
    """
    return pipeline("depth-estimation", model, **options)


def image_segmentation(model: Any = None, /, **options: Any) -> ImageSegmentation:
    """The segments of an image: a label and a mask (255 on its pixels) for each label present.

    >>> import numpy as np
    >>> segment = image_segmentation("Xenova/segformer-b0-finetuned-ade-512-512")
    >>> segment(np.zeros((40, 60, 3), np.uint8))["segments"][0]["mask"].size
    (60, 40)
    """
    return pipeline("image-segmentation", model, **options)


def background_removal(model: Any = None, /, **options: Any) -> BackgroundRemoval:
    """The foreground's matte of an image (``mask``, 255: foreground); ``return_image=True`` adds the cut-out.

    >>> import numpy as np
    >>> remove = background_removal("onnx-community/ormbg-ONNX")
    >>> remove(np.zeros((40, 60, 3), np.uint8), return_image=True)["image"].mode
    'RGBA'
    """
    return pipeline("background-removal", model, **options)


def image_to_image(model: Any = None, /, **options: Any) -> ImageToImage:
    """A new image made from an image: Swin2SR's super-resolution, ``upscale`` times larger.

    >>> import numpy as np
    >>> upscale = image_to_image("Xenova/swin2SR-classical-sr-x2-64")
    >>> upscale(np.zeros((40, 60, 3), np.uint8))["image"].size
    (120, 80)
    """
    return pipeline("image-to-image", model, **options)


def object_detection(model: Any = None, /, **options: Any) -> ObjectDetection:
    """The objects a detector finds in an image: a label, a score and a box in pixels for each.

    >>> import numpy as np
    >>> detect = object_detection("Xenova/detr-resnet-50")
    >>> detect(np.zeros((48, 64, 3), np.uint8), threshold=0.0)["detections"][0]
    {'label': ..., 'score': ..., 'box': {'xmin': ..., 'ymin': ..., 'xmax': ..., 'ymax': ...}}
    """
    return pipeline("object-detection", model, **options)


def zero_shot_object_detection(
    model: Any = None, labels: Any = None, /, **options: Any
) -> ZeroShotObjectDetection:
    """The objects of the labels you give in an image, from an open-vocabulary detector (OWL-ViT, Grounding DINO).

    >>> import numpy as np
    >>> detect = zero_shot_object_detection("Xenova/owlvit-base-patch32", ["cat", "remote control"])
    >>> sorted({d["label"] for d in detect(np.zeros((48, 64, 3), np.uint8), threshold=0.0)["detections"]})
    ['cat', 'remote control']
    """
    if labels is not None:
        options["labels"] = labels
    return pipeline("zero-shot-object-detection", model, **options)
