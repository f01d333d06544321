"""CLAP: an audio tower and a text tower in one embedding space (zero-shot audio classification).

>>> from transmuter_mlx.zoo import clap
>>> clap.ZERO_SHOT_SCORES, clap.text_padding(), clap.label_text("a dog barking")
('softmax', {'pad_to': None}, 'a dog barking')

transformers.js exports ``model.onnx`` (``input_ids``, ``attention_mask`` and ``input_features``
in; ``logits_per_audio`` among its outputs), ``audio_model.onnx`` (``audio_embeds``) and
``text_model.onnx`` (``text_embeds``). Zero-shot classification runs ``model.onnx`` with every
label's text against the clips; ``ClapFeatureExtractor`` (``preprocessor_config.json``) gives
every clip the same frames, so clips run in batches. The graph holds the logit scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._base import BaseArgs

__all__ = ["DEFAULT_VARIANT", "FILES", "TASKS", "ZERO_SHOT_SCORES", "ModelArgs", "label_text", "text_padding"]

FILES = {"model": ("model",), "audio": ("audio_model",), "text": ("text_model",)}
TASKS = frozenset({"zero-shot-audio-classification"})
DEFAULT_VARIANT = None
#: how the logits of a clip against its labels become scores: a softmax over the labels
ZERO_SHOT_SCORES = "softmax"


@dataclass
class ModelArgs(BaseArgs):
    """CLAP reads no config.json key of its own."""


def text_padding() -> dict[str, Any]:
    """How the labels' texts are padded, as transformers' zero-shot-audio-classification pipeline pads
    them (``padding=True``; ``Tokenizer.encode`` options): to the longest label."""
    return {"pad_to": None}


def label_text(text: str) -> str:
    """A label's text as the family's tokenizer takes it (CLAP: unchanged)."""
    return text
