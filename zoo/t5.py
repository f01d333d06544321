"""T5 and its kin (mT5, UMT5, LongT5): encoder-decoders with relative position buckets.

>>> from transmuter_mlx.zoo import t5
>>> args = t5.ModelArgs.from_dict({"model_type": "t5", "d_model": 64, "num_heads": 4, "d_kv": 8})
>>> args.num_attention_heads, args.head_dim, args.POSITIONS
(4, 8, 'relative')

Relative positions have no table, so a row has no hard end: it is capped at ``n_positions`` (else the
tokenizer's ``model_max_length``).
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
    """T5's config.json names: ``num_heads`` and ``d_kv`` (the decoder's heads and head size)."""

    POSITIONS: ClassVar[str] = "relative"
    POSITIONS_KEY: ClassVar[str] = "n_positions"

    d_model: int | None = None
    num_heads: int | None = None
    d_kv: int | None = None
    n_positions: int | None = None

    def __post_init__(self) -> None:
        self.hidden_size = self.hidden_size or self.d_model
        self.num_attention_heads = self.num_attention_heads or self.num_heads
        self.head_dim = self.head_dim or self.d_kv
        self.max_position_embeddings = self.max_position_embeddings or self.n_positions
        super().__post_init__()
