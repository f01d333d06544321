"""Mask2Former: universal segmentation, a class and a mask per query (panoptic, instance, semantic).

>>> from transmuter_mlx import zoo
>>> m2f = zoo.family("mask2former")
>>> sorted(m2f.TASKS), m2f.SEGMENTATION_SUBTASKS, m2f.MASK_LOGITS_SIZE
(['image-segmentation'], ('panoptic', 'instance', 'semantic'), (384, 384))

The export's ``model.onnx`` takes ``pixel_values`` and gives ``class_queries_logits`` (batch, queries,
labels + 1: the last is "no object") and ``masks_queries_logits`` (batch, queries, height / 4, width / 4).
``Mask2FormerImageProcessor``'s post-processing first resizes the mask logits to 384x384 (the size of
the original models' inputs); then panoptic runs DETR's procedure, semantic sums each label's
probability times the masks over the queries as DETR's does, and instance ranks (query, label) pairs
(``transmuter_mlx.pipelines.segments``: ``mask_segments``, ``query_semantic_map``, ``ranked_segments``).
The image processor is ``Mask2FormerImageProcessor`` (``transmuter_mlx.processors.image.segmentation``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import HeadArgs

FILES = {"model": ("model",)}
TASKS = frozenset({"image-segmentation"})
DEFAULT_VARIANT = None
#: image segmentation: the subtasks of its image processor implemented here
SEGMENTATION_SUBTASKS = ("panoptic", "instance", "semantic")
#: instance segmentation: its own (``"ranked"``: the best query-label pairs), not the panoptic procedure
INSTANCE_SEGMENTS = "ranked"
#: the outputs a query's class logits and mask logits come from, and the size the masks are resized to
#: before the sigmoid (transformers: "scale back to preprocessed image size - (384, 384) for all models")
SEGMENTATION_OUTPUTS = ("class_queries_logits", "masks_queries_logits")
MASK_LOGITS_SIZE = (384, 384)


@dataclass
class ModelArgs(HeadArgs):
    """The config.json keys read: the labels (``HeadArgs``)."""
