"""DPT and Depth Anything: a depth map of an image (and DPT's semantic segmentation heads).

>>> from transmuter_mlx import zoo
>>> dpt = zoo.family("depth_anything")
>>> dpt.__name__, sorted(dpt.TASKS), dpt.DEPTH_OUTPUT
('transmuter_mlx.zoo.dpt', ['depth-estimation', 'image-segmentation'], 'predicted_depth')

transformers.js exports one ``model.onnx``: ``pixel_values`` in, ``predicted_depth`` (batch, height,
width) out for ``DPTForDepthEstimation`` and ``DepthAnythingForDepthEstimation`` (such as
``onnx-community/depth-anything-v2-small``), ``logits`` (batch, labels, height, width) for
``DPTForSemanticSegmentation``. The DPT image processor keeps the aspect ratio and makes each side a
multiple of ``ensure_multiple_of`` (14 for Depth Anything), so the pixel size follows the image.
Both results are resized to the image with transformers' post-processing (``post_process_depth_estimation``:
bicubic; ``post_process_semantic_segmentation``: bilinear).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import HeadArgs

FILES = {"model": ("model",)}
TASKS = frozenset({"depth-estimation", "image-segmentation"})
DEFAULT_VARIANT = None
#: the graph output of a depth head: (batch, height, width) in the model's units (relative depth is
#: larger when nearer)
DEPTH_OUTPUT = "predicted_depth"
#: the image-segmentation subtasks of the family's heads, in the order transformers tries them
SEGMENTATION_SUBTASKS = ("semantic",)


@dataclass
class ModelArgs(HeadArgs):
    """The config.json keys read: the labels of a segmentation head (``HeadArgs``); ``depth_estimation_type``
    (Depth Anything: ``relative`` or ``metric``) is informative only, both resize the same way."""

    depth_estimation_type: str | None = None
