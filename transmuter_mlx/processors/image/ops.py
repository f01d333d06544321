"""Pixel steps after the resize, in transformers' own arithmetic (so the results are bit-equal).

>>> import numpy as np
>>> x = np.full((1, 1, 3), 255, np.uint8)
>>> normalize(rescale(x, 1 / 255), [0.5] * 3, [0.5] * 3).tolist()
[[[1.0, 1.0, 1.0]]]
>>> center_crop(np.ones((2, 3, 3), np.uint8), (4, 3))[:, 0, 0].tolist()
[0, 1, 1, 0]

Images are channels-last ``(height, width, channels)`` arrays here. The slow processors'
``rescale`` multiplies in float64 and stores float32 (``image_transforms.rescale``), ``normalize`` is
``(x - mean) / std`` in float32; the fast (torchvision) processors fold the rescale factor into the mean
and std and run ``(x - mean * (1 / factor)) / (std * (1 / factor))`` in float32 (:func:`fused_normalize`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["center_crop", "center_crop_fast", "channel_values", "fused_normalize", "normalize", "pad", "rescale"]

_F32 = np.float32


def rescale(image: np.ndarray, factor: float) -> np.ndarray:
    """``image * factor`` as transformers computes it: in float64, stored float32."""
    return (image.astype(np.float64) * factor).astype(_F32)


def channel_values(value: float | Sequence[float], channels: int, what: str, dtype: type = _F32) -> np.ndarray:
    """A mean or std as one value per channel (a number is repeated), as ``normalize`` builds it."""
    values = list(value) if isinstance(value, Sequence) else [value] * channels
    if len(values) != channels:
        raise ValueError(f"{what} must have {channels} values (one per channel), got {len(values)}: {value}")
    return np.asarray(values, dtype=dtype)


def normalize(image: np.ndarray, mean: float | Sequence[float], std: float | Sequence[float]) -> np.ndarray:
    """``(image - mean) / std`` per channel in float32 (an integer image is cast to float32 first)."""
    if not np.issubdtype(image.dtype, np.floating):
        image = image.astype(_F32)
    channels = image.shape[-1]
    mean_values = channel_values(mean, channels, "image_mean").astype(image.dtype)
    std_values = channel_values(std, channels, "image_std").astype(image.dtype)
    return (image - mean_values) / std_values


def fused_normalize(image: np.ndarray, do_rescale: bool, factor: float, do_normalize: bool,
                    mean: float | Sequence[float], std: float | Sequence[float]) -> np.ndarray:
    """The fast processors' ``rescale_and_normalize`` on a uint8 image: one float32 ``(x - m) / s`` with
    the rescale factor folded into ``m`` and ``s`` (torch multiplies a float32 tensor by a Python float in
    float32); only a rescale is ``x * factor`` in float32; neither leaves the image as it is."""
    channels = image.shape[-1]
    if do_normalize:
        m = channel_values(mean, channels, "image_mean")
        s = channel_values(std, channels, "image_std")
        if do_rescale:
            inverse = _F32(1.0 / factor)
            m, s = m * inverse, s * inverse
        return (image.astype(_F32) - m) / s
    if do_rescale:
        return image.astype(_F32) * _F32(factor)
    return image


def center_crop(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``image_transforms.center_crop``: the centred ``size`` window; an image smaller than it is first
    zero-padded, with the odd pixel of padding on the top/left."""
    height, width = image.shape[:2]
    crop_height, crop_width = int(size[0]), int(size[1])
    top, left = (height - crop_height) // 2, (width - crop_width) // 2
    if top >= 0 and left >= 0 and top + crop_height <= height and left + crop_width <= width:
        return image[top:top + crop_height, left:left + crop_width]
    new_height, new_width = max(crop_height, height), max(crop_width, width)
    padded = np.zeros((new_height, new_width) + image.shape[2:], dtype=image.dtype)
    top_pad, left_pad = math.ceil((new_height - height) / 2), math.ceil((new_width - width) / 2)
    padded[top_pad:top_pad + height, left_pad:left_pad + width] = image
    top, left = top + top_pad, left + left_pad
    return padded[max(0, top):min(new_height, top + crop_height), max(0, left):min(new_width, left + crop_width)]


def center_crop_fast(image: np.ndarray, size: tuple[int, int], rounded: bool = False) -> np.ndarray:
    """``BaseImageProcessorFast.center_crop``: as :func:`center_crop`, but the odd pixel of padding goes to
    the bottom/right (torchvision's ``F.pad`` then ``F.crop``); ``rounded``: torchvision's own
    ``F.center_crop``, whose window starts at the rounded (half to even), not truncated, middle."""
    height, width = image.shape[:2]
    crop_height, crop_width = int(size[0]), int(size[1])
    if crop_width > width or crop_height > height:
        pad_h = (crop_height - height) if crop_height > height else 0
        pad_w = (crop_width - width) if crop_width > width else 0
        image = np.pad(image, ((pad_h // 2, (pad_h + 1) // 2), (pad_w // 2, (pad_w + 1) // 2), (0, 0)))
        height, width = image.shape[:2]
        if (crop_height, crop_width) == (height, width):
            return image
    anchor = round if rounded else int
    top, left = anchor((height - crop_height) / 2.0), anchor((width - crop_width) / 2.0)
    return image[top:top + crop_height, left:left + crop_width]


def pad(image: np.ndarray, height: tuple[int, int], width: tuple[int, int], mode: str = "constant",
        value: float = 0.0) -> np.ndarray:
    """``image_transforms.pad`` of the two spatial axes: ``mode`` ``"constant"`` (with ``value``, in the
    image's dtype) or ``"symmetric"``; a negative amount is an error."""
    if min(*height, *width) < 0:
        raise ValueError(f"cannot pad a {image.shape[0]}x{image.shape[1]} image by {height}, {width}")
    widths = (height, width, (0, 0))
    if mode == "constant":
        return np.pad(image, widths, mode="constant", constant_values=value)
    return np.pad(image, widths, mode=mode)
