"""Background removal models (IS-Net and kin): an alpha matte of the foreground.

>>> from transmuter_mlx import zoo
>>> isnet = zoo.family("isnet")
>>> sorted(isnet.TASKS), isnet.FILES
(['background-removal'], {'model': ('model',)})

These exports are not transformers models: their config.json is little more than a ``model_type``
(``onnx-community/ormbg-ONNX``: ``isnet``; ``briaai/RMBG-1.4``: ``SegformerForSemanticSegmentation``;
``Xenova/modnet``: ``modnet``; see ``REMAP``) and their preprocessor_config.json is transformers.js's
generic ``ImageFeatureExtractor`` (a fixed size, rescale, normalize). The graph has one input, whatever its
name, and the matte is its first output, (batch, 1, height, width), probabilities or logits; some fix the
batch at 1. transformers.js's ``background-removal`` pipeline drives them all the same way, so this
module only names them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import BaseArgs

FILES = {"model": ("model",)}
TASKS = frozenset({"background-removal"})
DEFAULT_VARIANT = None


@dataclass
class ModelArgs(BaseArgs):
    """No config.json key is read."""
