"""DETR and YOLOS: object detectors whose queries each give one box and a softmax over the classes.

>>> from transmuter_mlx import zoo
>>> detr = zoo.family("yolos")
>>> detr.__name__, detr.DETECTION_SCORES, detr.box_extent(detr.ModelArgs(), 480, 640)
('transmuter_mlx.zoo.detr', 'softmax', (640, 480))

As transformers' ``DetrImageProcessor.post_process_object_detection`` (YOLOS's is the same): the score
of a query is its best class of a softmax over the classes without the last one, "no object"; each
query is one detection, in query order. ``logits`` and ``pred_boxes`` (center boxes relative to the
image) come from ``model.onnx`` (``DetrForSegmentation``'s, such as Xenova/detr-resnet-50-panoptic, adds
``pred_masks`` for image segmentation); the DETR image processor also gives the ``pixel_mask`` that
Xenova/detr-resnet-50 takes. YOLOS maps here (``REMAP``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import HeadArgs

FILES = {"model": ("model",)}
TASKS = frozenset({"object-detection", "image-segmentation"})
DEFAULT_VARIANT = None
#: how a query's logits become detections (``transmuter_mlx.pipelines.vision_boxes.SCORERS``)
DETECTION_SCORES = "softmax"
#: image segmentation of ``DetrForSegmentation`` exports (``pred_masks``, a mask per query): its image
#: processor's panoptic, instance and semantic post-processing
SEGMENTATION_SUBTASKS = ("panoptic", "instance", "semantic")
#: instance segmentation: the panoptic procedure (``"panoptic"``; without labels to fuse they agree)
INSTANCE_SEGMENTS = "panoptic"
#: the outputs a query's class logits and mask logits come from, and the size the masks are resized to
#: before the sigmoid (None: none; ``transmuter_mlx.pipelines.segments.mask_segments``)
SEGMENTATION_OUTPUTS = ("logits", "pred_masks")
MASK_LOGITS_SIZE = None


@dataclass
class ModelArgs(HeadArgs):
    """The config.json keys detection reads: the class names (``id2label``)."""


def box_extent(args: ModelArgs, height: int, width: int) -> tuple[int, int]:
    """The ``(width, height)`` the model's relative boxes span: the image's."""
    return width, height
