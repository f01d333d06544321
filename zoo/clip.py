"""CLIP: an image tower and a text tower in one embedding space (zero-shot image classification).

>>> from transmuter_mlx.zoo import clip
>>> clip.ZERO_SHOT_SCORES, clip.text_padding()
('softmax', {'pad_to': None})

transformers.js exports ``model.onnx`` (both towers and the logit scale: ``logits_per_image``),
``vision_model.onnx`` (``image_embeds``) and ``text_model.onnx`` (``text_embeds``). Zero-shot
classification runs ``model.onnx`` with every label's text against the images; an image embedding
is ``image_embeds`` of ``vision_model.onnx``. Chinese-CLIP and CLIP-like exports map here (``REMAP``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._base import BaseArgs

FILES = {"model": ("model",), "vision": ("vision_model",), "text": ("text_model",)}
TASKS = frozenset({"zero-shot-image-classification", "image-embedding"})
DEFAULT_VARIANT = None
#: how the logits of an image against its labels become scores: a softmax over the labels
ZERO_SHOT_SCORES = "softmax"


@dataclass
class ModelArgs(BaseArgs):
    """CLIP reads no config.json key of its own (the graph holds the logit scale)."""


def text_padding() -> dict[str, Any]:
    """How the labels' texts are padded, as transformers' zero-shot-image-classification pipeline pads
    them for this family (``Tokenizer.encode`` options): to the longest label."""
    return {"pad_to": None}


def label_text(text: str) -> str:
    """A label's text as the family's tokenizer takes it (CLIP: unchanged)."""
    return text
