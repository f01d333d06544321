"""The image processor types: each one's config keys, defaults and size rules, as its transformers class.

>>> import numpy as np
>>> clip = ImageProcessor.from_config({"image_processor_type": "CLIPImageProcessor"})
>>> clip.preprocess(np.zeros((300, 451, 3), np.uint8), 0)[0].resized_size  # shortest edge 224, then a crop
(224, 336)
>>> detr = ImageProcessor.from_config({"feature_extractor_type": "DetrFeatureExtractor", "size": 200})
>>> features = detr.preprocess(np.zeros((300, 451, 3), np.uint8), 0)[0]
>>> features.pixel_values.shape, features.pixel_mask.shape, detr.feed_names
((3, 200, 300), (200, 300), ('pixel_values', 'pixel_mask'))

Each class names the transformers classes it is (``register``); the steps run in the slow class's order
on the loaded uint8 RGB image: resize (Pillow, or torch's for a ``...Fast`` type), crop or pad, rescale,
normalise. ``do_convert_rgb`` has nothing to do: images arrive in RGB.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from .base import IMAGENET_DEFAULT, OPENAI_CLIP, ImageProcessor, register, size_dict
from .ops import center_crop, center_crop_fast, channel_values, pad, rescale
from .resize import pil_resize, torch_resize

__all__ = ["DPT", "ConvNext", "Resized", "Swin2SR", "shortest_edge_size"]

Size = tuple[int, int]


def shortest_edge_size(height: int, width: int, size: int) -> Size:
    """``get_resize_output_image_size(default_to_square=False)``: the short side to ``size``, the long one
    scaled and truncated."""
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(size * long / short)
    return (new_long, size) if width <= height else (size, new_long)


class Resized(ImageProcessor):
    """Resize (to a size or by the shortest edge), then an optional centre crop: ViT and most classifiers."""

    SIZE: ClassVar[Any] = {"height": 224, "width": 224}
    SQUARE: ClassVar[bool] = True  # an int size is a square (else the shortest edge)
    SHORTEST_EDGE: ClassVar[bool] = False  # whether the class resizes by {"shortest_edge": n}
    DO_CROP: ClassVar[bool | None] = None  # None: the class never crops
    CROP: ClassVar[Any] = {"height": 224, "width": 224}
    DO_RESIZE: ClassVar[bool] = True

    def __init__(self, config: Any, task: str = "", fast: bool = False, bilinear_uint8: bool = False) -> None:
        super().__init__(config, task, fast, bilinear_uint8)
        self.do_resize = self.flag("do_resize", self.DO_RESIZE)
        self.size = size_dict(self.value("size", self.SIZE), self.SQUARE)
        if self.do_resize:
            self.check_size()
            if self.resample is None:  # transformers' validate_preprocess_arguments refuses it too
                raise self.error("resample must be a Pillow filter (0-5) when do_resize is set, got null")
        self.do_center_crop = self.DO_CROP is not None and self.flag("do_center_crop", self.DO_CROP)
        self.crop_size = size_dict(self.value("crop_size", self.CROP), what="crop_size")
        if self.do_center_crop and not {"height", "width"} <= set(self.crop_size):
            raise self.error(f"crop_size must have height and width, got {self.crop_size}")

    def check_size(self) -> None:
        """An error for a ``size`` the class cannot resize to (transformers fails on it in ``resize``)."""
        if not (self.SHORTEST_EDGE and "shortest_edge" in self.size) and not {"height", "width"} <= set(self.size):
            raise self.error(f"size must have height and width{' (or shortest_edge)' * self.SHORTEST_EDGE}, "
                             f"got {self.size}")

    @property
    def fixed_size(self) -> bool:
        return self.do_center_crop or (self.do_resize and "height" in self.size)

    def output_size(self, height: int, width: int) -> Size:
        if "shortest_edge" in self.size:
            return shortest_edge_size(height, width, self.size["shortest_edge"])
        return self.size["height"], self.size["width"]

    def resize(self, image: np.ndarray, size: Size) -> np.ndarray:
        if self.fast:
            return torch_resize(image, size, self.resample, self.bilinear_uint8)
        return pil_resize(image, size, self.resample)

    def crop(self, image: np.ndarray, size: Size) -> np.ndarray:
        return center_crop_fast(image, size) if self.fast else center_crop(image, size)

    def transform(self, image: np.ndarray) -> tuple[np.ndarray, Size, None]:
        if self.do_resize:
            image = self.resize(image, self.output_size(*image.shape[:2]))
        resized = image.shape[:2]
        if self.do_center_crop:
            image = self.crop(image, (self.crop_size["height"], self.crop_size["width"]))
        return self.finish(image), resized, None


@register("ViTImageProcessor")
class ViT(Resized):
    """``ViTImageProcessor`` (Swin, ViT-MAE, ...): resize to 224x224, bilinear, mean and std 0.5."""


@register("DeiTImageProcessor")
class DeiT(Resized):
    """``DeiTImageProcessor``: resize to 256x256 bicubic, crop 224x224."""

    SIZE = {"height": 256, "width": 256}
    RESAMPLE = 3
    DO_CROP = True


@register("BeitImageProcessor")
class Beit(DeiT):
    """``BeitImageProcessor``: DeiT's rules (its segmentation-map options do not touch images)."""


@register("SegformerImageProcessor")
class Segformer(Resized):
    """``SegformerImageProcessor``: resize to 512x512 bilinear, ImageNet mean and std."""

    SIZE = {"height": 512, "width": 512}
    MEAN_STD = IMAGENET_DEFAULT


@register("SiglipImageProcessor")
class Siglip(Resized):
    """``SiglipImageProcessor``: resize to 224x224 bicubic (an int size is the shortest edge, which SigLIP
    cannot resize by: an error, as in transformers)."""

    SQUARE = False
    RESAMPLE = 3


@register("OwlViTImageProcessor")
class OwlViT(Resized):
    """``OwlViTImageProcessor``: resize to 768x768 bicubic, crop off by default, CLIP mean and std (its
    legacy ``rescale`` key is overridden by ``do_rescale``, as in transformers)."""

    SIZE = {"height": 768, "width": 768}
    RESAMPLE = 3
    DO_CROP = False
    CROP = {"height": 768, "width": 768}
    MEAN_STD = OPENAI_CLIP


@register("CLIPImageProcessor")
class CLIP(Resized):
    """``CLIPImageProcessor``: the shortest edge to 224 bicubic, crop 224x224, CLIP mean and std
    (``use_square_size`` resizes to a square of the shortest edge)."""

    SIZE = {"shortest_edge": 224}
    SQUARE = False
    SHORTEST_EDGE = True
    RESAMPLE = 3
    DO_CROP = True
    MEAN_STD = OPENAI_CLIP

    def __init__(self, config: Any, task: str = "", fast: bool = False, bilinear_uint8: bool = False) -> None:
        super().__init__(config, task, fast, bilinear_uint8)
        if self.config.get("use_square_size") and "shortest_edge" in self.size:
            self.size = {"height": self.size["shortest_edge"], "width": self.size["shortest_edge"]}


@register("BitImageProcessor")
class Bit(CLIP):
    """``BitImageProcessor`` (DINOv2's): CLIP's rules."""


@register("MobileNetV1ImageProcessor")
class MobileNetV1(Resized):
    """``MobileNetV1ImageProcessor``: the shortest edge to 256 bilinear, crop 224x224, mean and std 0.5."""

    SIZE = {"shortest_edge": 256}
    SQUARE = False
    SHORTEST_EDGE = True
    DO_CROP = True


@register("MobileNetV2ImageProcessor")
class MobileNetV2(MobileNetV1):
    """``MobileNetV2ImageProcessor``: MobileNetV1's rules."""


@register("ConvNextImageProcessor")
class ConvNext(Resized):
    """``ConvNextImageProcessor``: under 384, the shortest edge to ``shortest_edge / crop_pct`` then a
    centre crop of ``shortest_edge``; from 384, a square of ``shortest_edge``."""

    SIZE = {"shortest_edge": 384}
    SQUARE = False
    SHORTEST_EDGE = True

    def __init__(self, config: Any, task: str = "", fast: bool = False, bilinear_uint8: bool = False) -> None:
        super().__init__(config, task, fast, bilinear_uint8)
        self.crop_pct = self.value("crop_pct", 224 / 256)

    def check_size(self) -> None:
        if "shortest_edge" not in self.size:
            raise self.error(f"size must have shortest_edge, got {self.size}")

    @property
    def fixed_size(self) -> bool:
        return self.do_resize

    def transform(self, image: np.ndarray) -> tuple[np.ndarray, Size, None]:
        if not self.do_resize:
            return self.finish(image), image.shape[:2], None
        edge = self.size["shortest_edge"]
        if edge >= 384:
            image = self.resize(image, (edge, edge))
            return self.finish(image), image.shape[:2], None
        image = self.resize(image, shortest_edge_size(*image.shape[:2], int(edge / self.crop_pct)))
        # the fast class crops with torchvision's F.center_crop (a rounded anchor)
        cropped = center_crop_fast(image, (edge, edge), rounded=True) if self.fast else center_crop(image, (edge, edge))
        return self.finish(cropped), image.shape[:2], None


@register("DPTImageProcessor")
class DPT(Resized):
    """``DPTImageProcessor`` (Depth Anything's): resize to ``size`` (``keep_aspect_ratio``: the scale closer
    to 1 on both sides), each side a multiple of ``ensure_multiple_of`` (Python's round); after the
    normalisation, ``do_pad`` zero-pads each side to a multiple of ``size_divisor``, centred (the fast
    class pads before normalising)."""

    SIZE = {"height": 384, "width": 384}
    RESAMPLE = 3

    def __init__(self, config: Any, task: str = "", fast: bool = False, bilinear_uint8: bool = False) -> None:
        super().__init__(config, task, fast, bilinear_uint8)
        self.keep_aspect_ratio = self.flag("keep_aspect_ratio", False)
        self.multiple = self.config.get("ensure_multiple_of", 1)
        self.do_pad = self.flag("do_pad", False)
        self.size_divisor = self.config.get("size_divisor")
        if self.do_pad and not self.size_divisor:
            raise self.error("do_pad needs a size_divisor")

    @property
    def fixed_size(self) -> bool:
        return self.do_resize and not self.keep_aspect_ratio

    def output_size(self, height: int, width: int) -> Size:
        def multiple_of(value: float) -> int:
            x = round(value / self.multiple) * self.multiple
            return math.ceil(value / self.multiple) * self.multiple if x < 0 else x

        scale_height, scale_width = self.size["height"] / height, self.size["width"] / width
        if self.keep_aspect_ratio:
            if abs(1 - scale_width) < abs(1 - scale_height):
                scale_height = scale_width
            else:
                scale_width = scale_height
        return multiple_of(scale_height * height), multiple_of(scale_width * width)

    def pad_to_divisor(self, image: np.ndarray) -> np.ndarray:
        def split(side: int) -> tuple[int, int]:
            extra = math.ceil(side / self.size_divisor) * self.size_divisor - side
            return extra // 2, extra - extra // 2

        return pad(image, split(image.shape[0]), split(image.shape[1]))

    def transform(self, image: np.ndarray) -> tuple[np.ndarray, Size, None]:
        if self.do_resize:
            image = self.resize(image, self.output_size(*image.shape[:2]))
        resized = image.shape[:2]
        if self.do_pad and self.fast:  # the fast class pads the uint8 image, before normalising
            return self.finish(self.pad_to_divisor(image)), resized, None
        image = self.finish(image)
        return (self.pad_to_divisor(image) if self.do_pad else image), resized, None


@register("Swin2SRImageProcessor")
class Swin2SR(ImageProcessor):
    """``Swin2SRImageProcessor``: no resize; rescale, then pad the bottom and right by mirroring
    (``symmetric``) to the next multiple of ``size_divisor`` -- a whole extra block when a side already is
    one, as transformers pads. No normalisation."""

    def __init__(self, config: Any, task: str = "", fast: bool = False, bilinear_uint8: bool = False) -> None:
        super().__init__(config, task, fast, bilinear_uint8)
        self.do_normalize = False
        self.do_pad = self.flag("do_pad", True)
        # transformers sets size_divisor after the legacy pad_size attribute, so pad_size counts only when
        # size_divisor is null
        divisor = self.config.get("size_divisor", 8)
        self.size_divisor = self.config.get("pad_size") if divisor is None else divisor

    def transform(self, image: np.ndarray) -> tuple[np.ndarray, Size, None]:
        size = image.shape[:2]
        image = self.finish(image)
        if self.do_pad:
            s = self.size_divisor
            image = pad(image, (0, (size[0] // s + 1) * s - size[0]), (0, (size[1] // s + 1) * s - size[1]),
                        mode="symmetric")
        return image, size, None


@register("ImageImageProcessor")
class Generic(Resized):
    """transformers.js's generic ``ImageFeatureExtractor`` (background-removal exports such as
    ``briaai/RMBG-1.4``; no transformers class has it): a resize only when ``do_resize`` is set (to
    height/width, or by the shortest edge, with Pillow), an optional centre crop, then transformers.js's
    arithmetic: ``x * rescale_factor`` stored float32, ``(x - mean) / std`` in float64 stored float32
    (``do_normalize`` off unless set). Its ``do_pad`` is not supported."""

    SIZE = None
    SHORTEST_EDGE = True
    DO_CROP = False
    DO_RESIZE = False

    def __init__(self, config: Any, task: str = "", fast: bool = False, bilinear_uint8: bool = False) -> None:
        config = {"do_normalize": False, **config}
        if config.get("size") is None and not config.get("do_resize"):
            config["size"] = {"height": 224, "width": 224}  # unused: nothing is resized
        super().__init__(config, task, fast, bilinear_uint8)
        if self.flag("do_pad", False):
            raise self.error("do_pad (transformers.js's padding) is not supported")

    def finish(self, image: np.ndarray) -> np.ndarray:
        if self.do_rescale:
            image = rescale(image, self.rescale_factor)  # JavaScript's double product, in a Float32Array
        if self.do_normalize:
            mean = channel_values(self.image_mean, image.shape[-1], "image_mean", np.float64)
            std = channel_values(self.image_std, image.shape[-1], "image_std", np.float64)
            image = ((image.astype(np.float64) - mean) / std).astype(np.float32)
        return image
