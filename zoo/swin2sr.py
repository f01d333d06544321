"""Swin2SR: super-resolution, an image ``upscale`` times larger.

>>> from transmuter_mlx import zoo
>>> swin2sr = zoo.family("swin2sr")
>>> sorted(swin2sr.TASKS), swin2sr.IMAGE_OUTPUT, swin2sr.ModelArgs.from_dict({"upscale": 4}).upscale
(['image-to-image'], 'reconstruction', 4)

transformers.js exports one ``model.onnx`` (such as ``Xenova/swin2SR-classical-sr-x2-64``):
``pixel_values`` in, ``reconstruction`` (batch, 3, upscale * height, upscale * width) out, values in
about 0..1. The image processor pads the image at the bottom and the right (symmetric) to a
multiple of ``size_divisor`` (``pad_size`` in older configs), so the output holds the upscaled padding too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import BaseArgs

FILES = {"model": ("model",)}
TASKS = frozenset({"image-to-image"})
DEFAULT_VARIANT = None
#: the graph output: the image, (batch, channels, height, width) in 0..1
IMAGE_OUTPUT = "reconstruction"


@dataclass
class ModelArgs(BaseArgs):
    """The config.json keys read: ``upscale``, the factor between the input's and the output's sizes."""

    upscale: int = 2
