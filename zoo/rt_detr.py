"""RT-DETR and its kin: object detectors scoring each query and class pair with a sigmoid.

>>> from transmuter_mlx import zoo
>>> rt_detr = zoo.family("rt_detr_v2")
>>> rt_detr.__name__, rt_detr.DETECTION_SCORES
('transmuter_mlx.zoo.rt_detr', 'sigmoid_top_k')

As transformers' ``RTDetrImageProcessor.post_process_object_detection`` (with its default
``use_focal_loss=True``): a sigmoid of every (query, class) logit, the ``top_k`` best pairs kept (by
default as many as there are queries), best first. RT-DETR v2, D-FINE and RF-DETR map here
(``REMAP``); their processors resize every image to one size, so images go into batches.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import HeadArgs

FILES = {"model": ("model",)}
TASKS = frozenset({"object-detection"})
DEFAULT_VARIANT = None
#: how the logits become detections (``transmuter_mlx.pipelines.vision_boxes.SCORERS``)
DETECTION_SCORES = "sigmoid_top_k"


@dataclass
class ModelArgs(HeadArgs):
    """The config.json keys detection reads: the class names (``id2label``)."""


def box_extent(args: ModelArgs, height: int, width: int) -> tuple[int, int]:
    """The ``(width, height)`` the model's relative boxes span: the image's."""
    return width, height
