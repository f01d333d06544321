"""SigLIP: CLIP's towers with a sigmoid loss, so each label is scored alone.

>>> from transmuter_mlx.zoo import siglip
>>> siglip.ZERO_SHOT_SCORES, siglip.text_padding()
('sigmoid', {'pad_to': 64, 'max_length': 64})
>>> siglip.label_text("This is a photo of Cats, Dogs!")
'this is a photo of cats dogs'

The files are CLIP's (``model.onnx``, ``vision_model.onnx``, ``text_model.onnx``). As transformers'
zero-shot-image-classification pipeline: the texts are padded to 64 tokens (truncated beyond), and
the scores are a sigmoid of each label's logit, so they do not add up to 1. ``SiglipTokenizer``
removes punctuation, squeezes spaces and lowercases a text before it tokenizes it
(``canonicalize_text`` and ``do_lower_case``): ``label_text`` does the same for a tokenizer.json.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any

from ._base import BaseArgs
from .clip import FILES, TASKS

__all__ = ["DEFAULT_VARIANT", "FILES", "TASKS", "ZERO_SHOT_SCORES", "ModelArgs", "label_text", "text_padding"]

DEFAULT_VARIANT = None
ZERO_SHOT_SCORES = "sigmoid"
TEXT_LENGTH = 64  # transformers' pipeline: padding="max_length", max_length=64, truncation=True
_PUNCTUATION = str.maketrans("", "", string.punctuation)


@dataclass
class ModelArgs(BaseArgs):
    """SigLIP reads no config.json key of its own (the graph holds the logit scale and bias)."""


def text_padding() -> dict[str, Any]:
    """The labels' texts padded (and truncated) to 64 tokens (``Tokenizer.encode`` options)."""
    return {"pad_to": TEXT_LENGTH, "max_length": TEXT_LENGTH}


def label_text(text: str) -> str:
    """``text`` as SiglipTokenizer sees it: no punctuation, single spaces, stripped, lowercase."""
    return re.sub(r"\s+", " ", text.translate(_PUNCTUATION)).strip().lower()
