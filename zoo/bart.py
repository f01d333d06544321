"""BART and the encoder-decoders built like it: mBART, Marian (opus-mt), Pegasus, Blenderbot.

>>> from transmuter_mlx.zoo import bart
>>> args = bart.ModelArgs.from_dict({"model_type": "marian", "d_model": 64, "decoder_attention_heads": 4,
...                                  "max_position_embeddings": 512})
>>> args.num_attention_heads, args.head_dim, args.positions, args.POSITIONS
(4, 16, 512, 'absolute')

Their positions are a table (learned, or Marian's sinusoidal one) of ``max_position_embeddings`` rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ._base import SEQ2SEQ_FILES, SEQ2SEQ_TASKS, DecoderArgs, language_ids  # noqa: F401 (the family's hooks)

FILES = SEQ2SEQ_FILES
TASKS = SEQ2SEQ_TASKS
DEFAULT_VARIANT = None


@dataclass
class ModelArgs(DecoderArgs):
    """The decoder's heads come from ``decoder_attention_heads`` and its head size from ``d_model``."""

    POSITIONS: ClassVar[str] = "absolute"

    d_model: int | None = None
    decoder_attention_heads: int | None = None

    def __post_init__(self) -> None:
        self.hidden_size = self.hidden_size or self.d_model
        self.num_attention_heads = self.num_attention_heads or self.decoder_attention_heads
        super().__post_init__()
