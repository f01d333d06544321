"""SegFormer: semantic segmentation, a class for each pixel.

>>> from transmuter_mlx import zoo
>>> segformer = zoo.family("segformer")
>>> sorted(segformer.TASKS), segformer.SEGMENTATION_SUBTASKS
(['image-segmentation'], ('semantic',))

transformers.js exports one ``model.onnx`` (such as ``Xenova/segformer-b0-finetuned-ade-512-512``):
``pixel_values`` in, ``logits`` (batch, labels, height / 4, width / 4) out. As transformers'
``post_process_semantic_segmentation``, the logits are resized to the image (bilinear) and each pixel
takes the label of its highest logit; the labels are ``id2label`` of config.json.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import HeadArgs

FILES = {"model": ("model",)}
TASKS = frozenset({"image-segmentation"})
DEFAULT_VARIANT = None
#: the image-segmentation subtasks of the family's heads, in the order transformers tries them
SEGMENTATION_SUBTASKS = ("semantic",)


@dataclass
class ModelArgs(HeadArgs):
    """The config.json keys read: the labels (``HeadArgs``)."""
