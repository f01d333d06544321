"""The universal segmenters' processor: MaskFormer's and Mask2Former's (one rule set).

>>> import numpy as np
>>> m2f = ImageProcessor.from_config({"image_processor_type": "Mask2FormerImageProcessor", "size": 384})
>>> features = m2f.preprocess(np.zeros((300, 451, 3), np.uint8), 0)[0]
>>> features.resized_size, features.pixel_values.shape, m2f.feed_names  # 384x577, up to multiples of 32
((384, 608), (3, 384, 608), ('pixel_values', 'pixel_mask'))

``Mask2FormerImageProcessor`` and ``MaskFormerImageProcessor`` (transformers 4.57.6, slow): the shortest
edge to ``size`` (800), the longer one truncated and capped at ``longest_edge`` (``max_size``, 1333) as
torchvision's ``Resize`` caps it, or ``{"height", "width"}``; then each side rounded *up* to a multiple
of ``size_divisor`` (32; 0: none) -- the image is stretched to it, not padded -- with Pillow's filter
(bilinear); rescale, ImageNet mean and std; then zero padding at the bottom and right to ``pad_size``,
or to the image itself (transformers pads a batch to its largest image; the pipelines send one), and
``pixel_mask`` 1 on the image. These classes always pad (``do_pad`` is not theirs); ``ignore_index``,
``do_reduce_labels`` and ``num_labels`` concern training labels only. The ``...Fast`` types size the
image with DETR's rule (``get_size_with_aspect_ratio``; ``max_height``/``max_width`` too), then the
same divisor, and resize, rescale and normalise as the other fast types here.
"""

from __future__ import annotations

from typing import Any

from .base import IMAGENET_DEFAULT, ImageProcessor, register, size_dict  # noqa: F401 - the doctest's
from .detection import Detr

__all__ = ["MaskFormer", "torchvision_size"]

Size = tuple[int, int]


def torchvision_size(height: int, width: int, size: int, max_size: int | None) -> Size:
    """``get_resize_output_image_size(default_to_square=False, max_size=...)``: the short side to ``size``,
    the long one scaled and truncated; over ``max_size``, the long side is ``max_size`` and the short one
    scaled down from ``size`` and truncated."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    if max_size is not None:
        if max_size <= size:
            raise ValueError(f"max_size = {max_size} must be strictly greater than the requested size for the "
                             f"smaller edge size = {size}")
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if width <= height else (new_short, new_long)


@register("Mask2FormerImageProcessor", "MaskFormerImageProcessor")
class MaskFormer(Detr):
    """``MaskFormerImageProcessor`` / ``Mask2FormerImageProcessor``: see the module's docstring."""

    SIZE = {"shortest_edge": 800, "longest_edge": 1333}
    MEAN_STD = IMAGENET_DEFAULT
    LEGACY = False

    def __init__(self, config: Any, task: str = "", fast: bool = False, bilinear_uint8: bool = False) -> None:
        config = dict(config)
        config.pop("pad_and_return_pixel_mask", None)  # a legacy name of do_pad: both classes pad anyway
        config.pop("do_pad", None)
        # the slow class's max_size defaults to 1333 (a null one is kept); the fast one's to none
        max_size = config.pop("max_size", None if fast else 1333)
        size = config.get("size")
        if size is None:
            size = {**self.SIZE, "longest_edge": max_size} if max_size is not None or not fast else self.SIZE
        config["size"] = size_dict(size, False, max_size)
        super().__init__(config, task, fast, bilinear_uint8)
        divisor = self.config.get("size_divisor", 32)
        if divisor is None and fast:
            divisor = 32  # the fast class falls back on its default
        if not isinstance(divisor, int) or isinstance(divisor, bool) or divisor < 0:
            raise self.error(f"size_divisor must be an int (0: none), got {divisor!r}")
        self.size_divisor = divisor

    def check_size(self) -> None:
        if self.fast:
            return super().check_size()
        keys = set(self.size)
        if keys != {"shortest_edge", "longest_edge"} and not {"height", "width"} <= keys:
            raise self.error(f"size must contain 'height' and 'width' keys or 'shortest_edge' and "
                             f"'longest_edge' keys, got {self.size}")

    @property
    def fixed_size(self) -> bool:
        return self.pad_size is not None or (self.do_resize and "height" in self.size)

    def output_size(self, height: int, width: int) -> Size:
        if self.fast:
            out = super().output_size(height, width)
        elif "shortest_edge" in self.size:
            out = torchvision_size(height, width, self.size["shortest_edge"], self.size["longest_edge"])
        else:
            out = self.size["height"], self.size["width"]
        d = self.size_divisor
        return out if d == 0 else (-(-out[0] // d) * d, -(-out[1] // d) * d)
