"""The object detectors' processors: DETR's family (its resize rules and pixel mask), and OWLv2's.

>>> import numpy as np
>>> yolos = ImageProcessor.from_config({"image_processor_type": "YolosImageProcessor"})
>>> features = yolos.preprocess(np.zeros((300, 451, 3), np.uint8), 0)[0]
>>> features.pixel_values.shape, features.pixel_mask, yolos.feed_names   # multiples of 16, no mask
((3, 800, 1200), None, ('pixel_values',))
>>> owlv2 = ImageProcessor.from_config({"image_processor_type": "Owlv2ImageProcessor"})
>>> owlv2.preprocess(np.zeros((300, 451, 3), np.uint8), 0)[0].pixel_values.shape
(3, 960, 960)

DETR, Conditional and Deformable DETR, Table Transformer and Grounding DINO share one rule set; YOLOS
rounds its sizes down to multiples of 16 and returns no mask; RT-DETR resizes to 640x640 without
normalising or padding. With ``do_pad`` a DETR image is padded at the bottom and right (after the
normalisation, with zeros) to ``pad_size``, or to itself -- transformers pads a batch to its largest
image, and its pipelines call the processor one image at a time -- and ``pixel_mask`` marks the image.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .base import IMAGENET_DEFAULT, OPENAI_CLIP, ImageProcessor, register, size_dict
from .ops import normalize, pad, rescale
from .processors import Resized
from .resize import skimage_resize

__all__ = ["Detr", "Owlv2", "RTDetr", "Yolos", "aspect_ratio_size"]

Size = tuple[int, int]


def aspect_ratio_size(height: int, width: int, size: int, max_size: int | None, yolos: bool = False) -> Size:
    """DETR's (and YOLOS's) ``get_size_with_aspect_ratio``: the shorter side to ``size`` unless the longer
    one would pass ``max_size``; YOLOS tests the sides in another order and rounds down to multiples of 16."""
    raw_size = None
    if max_size is not None:
        low, high = float(min(height, width)), float(max(height, width))
        if high / low * size > max_size:
            raw_size = max_size * low / high
            size = int(round(raw_size))
    scaled = raw_size if max_size is not None and raw_size is not None else size
    unchanged = (height <= width and height == size) or (width <= height and width == size)
    if unchanged and not (yolos and width < height):
        out_height, out_width = height, width
    elif width < height:
        out_height, out_width = int(scaled * height / width), size
    else:
        out_height, out_width = size, int(scaled * width / height)
    if yolos:
        out_height, out_width = out_height - out_height % 16, out_width - out_width % 16
    return out_height, out_width


@register("DetrImageProcessor", "ConditionalDetrImageProcessor", "DeformableDetrImageProcessor",
          "GroundingDinoImageProcessor")
class Detr(Resized):
    """``DetrImageProcessor`` (and the classes that copy it): the shortest edge to 800, the longest at most
    1333 (or ``max_height``/``max_width``, or ``height``/``width``), bilinear, ImageNet mean and std, a
    pixel mask when padding."""

    SIZE = {"shortest_edge": 800, "longest_edge": 1333}
    SQUARE = False
    SHORTEST_EDGE = True
    MEAN_STD = IMAGENET_DEFAULT
    DO_PAD: ClassVar[bool] = True
    MASK: ClassVar[bool] = True  # whether padding returns pixel_mask
    YOLOS: ClassVar[bool] = False
    LEGACY: ClassVar[bool] = True  # reads max_size and pad_and_return_pixel_mask

    def __init__(self, config: Any, task: str = "", fast: bool = False, bilinear_uint8: bool = False) -> None:
        config = dict(config)
        if self.LEGACY:
            if "pad_and_return_pixel_mask" in config:  # the legacy name of do_pad
                config["do_pad"] = config.pop("pad_and_return_pixel_mask")
            legacy_max = config.pop("max_size", None if config.get("size") is None else 1333)
            if config.get("size") is not None and not isinstance(config["size"], dict):
                config["size"] = size_dict(config["size"], self.SQUARE, legacy_max)
        super().__init__(config, task, fast, bilinear_uint8)
        self.do_pad = self.flag("do_pad", self.DO_PAD)
        self.pad_size = self.config.get("pad_size")
        if self.do_pad and self.MASK:
            self.feed_names = ("pixel_values", "pixel_mask")

    def check_size(self) -> None:
        if set(self.size) not in ({"shortest_edge", "longest_edge"}, {"max_height", "max_width"}, {"height", "width"}):
            raise self.error(f"size must have shortest_edge and longest_edge, max_height and max_width, or "
                             f"height and width, got {self.size}")

    @property
    def fixed_size(self) -> bool:
        return (self.do_pad and self.pad_size is not None) or (self.do_resize and "height" in self.size)

    def output_size(self, height: int, width: int) -> Size:
        size = self.size
        if "shortest_edge" in size:
            return aspect_ratio_size(height, width, size["shortest_edge"], size["longest_edge"], self.YOLOS)
        if "max_height" in size:
            scale = min(size["max_height"] / height, size["max_width"] / width)
            return int(height * scale), int(width * scale)
        return size["height"], size["width"]

    def transform(self, image: np.ndarray) -> tuple[np.ndarray, Size, np.ndarray | None]:
        pixels, resized, _ = super().transform(image)
        if not self.do_pad:
            return pixels, resized, None
        height, width = pixels.shape[:2]
        target = (self.pad_size["height"], self.pad_size["width"]) if self.pad_size else (height, width)
        if target[0] < height or target[1] < width:
            raise ValueError(f"pad_size {self.pad_size} is smaller than the resized image ({height}x{width})")
        pixels = pad(pixels, (0, target[0] - height), (0, target[1] - width))
        mask = np.zeros(target, np.int64)
        mask[:height, :width] = 1
        return pixels, resized, mask if self.MASK else None


@register("YolosImageProcessor")
class Yolos(Detr):
    """``YolosImageProcessor``: DETR's rules, sides rounded down to multiples of 16, no pixel mask."""

    MASK = False
    YOLOS = True


@register("RTDetrImageProcessor")
class RTDetr(Detr):
    """``RTDetrImageProcessor``: 640x640 bilinear, rescale only, no padding (a pixel mask when ``do_pad``)."""

    SIZE = {"height": 640, "width": 640}
    DO_PAD = False
    LEGACY = False

    def __init__(self, config: Any, task: str = "", fast: bool = False, bilinear_uint8: bool = False) -> None:
        config = {"do_normalize": False, **config}
        super().__init__(config, task, fast, bilinear_uint8)


@register("Owlv2ImageProcessor")
class Owlv2(ImageProcessor):
    """``Owlv2ImageProcessor``: rescale, pad to a square with gray (0.5) at the bottom and right, resize to
    960x960 with scikit-image's anti-aliased linear resize (:func:`~.resize.skimage_resize`, bit-equal to
    transformers' scipy calls), CLIP mean and std. Its ``...Fast`` type runs these same steps here, not
    transformers' torch approximation of them (a 3-sigma blur, then a plain bilinear resize)."""

    MEAN_STD = OPENAI_CLIP

    def __init__(self, config: Any, task: str = "", fast: bool = False, bilinear_uint8: bool = False) -> None:
        super().__init__(config, task, fast=False, bilinear_uint8=bilinear_uint8)
        self.do_pad = self.flag("do_pad", True)
        self.do_resize = self.flag("do_resize", True)
        self.size = size_dict(self.value("size", {"height": 960, "width": 960}))
        if self.do_resize and not {"height", "width"} <= set(self.size):
            raise self.error(f"size must have height and width, got {self.size}")

    @property
    def fixed_size(self) -> bool:
        return self.do_resize

    def transform(self, image: np.ndarray) -> tuple[np.ndarray, Size, None]:
        # transformers pads a uint8 image with 0 (0.5 cast); resizing then needs floats either way
        image = rescale(image, self.rescale_factor) if self.do_rescale else image.astype(np.float32)
        if self.do_pad:
            side = max(image.shape[:2])
            image = pad(image, (0, side - image.shape[0]), (0, side - image.shape[1]),
                        value=0.5 if self.do_rescale else 0.0)
        if self.do_resize:
            image = skimage_resize(image, (self.size["height"], self.size["width"]))
        resized = image.shape[:2]
        if self.do_normalize:
            image = normalize(image, self.image_mean, self.image_std)
        return image, resized, None
