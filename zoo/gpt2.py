"""GPT-2 and the decoder-only LMs with a table of learned positions (GPT-Neo, GPT-BigCode, OPT, ...).

>>> from transmuter_mlx.zoo import gpt2
>>> args = gpt2.ModelArgs.from_dict({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_positions": 256})
>>> args.head_dim, args.num_key_value_heads, args.positions, args.POSITIONS
(16, 4, 256, 'absolute')

A row cannot go past the table: a request that would is an error before decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ._base import DECODER_FILES, DECODER_TASKS, DecoderArgs

FILES = DECODER_FILES
TASKS = DECODER_TASKS
DEFAULT_VARIANT = "q4"  # when neither the caller nor config.json chooses one


@dataclass
class ModelArgs(DecoderArgs):
    """GPT-2's config.json names (``n_embd``, ``n_head``, ``n_positions``) next to the usual ones."""

    POSITIONS: ClassVar[str] = "absolute"
    POSITIONS_KEY: ClassVar[str] = "n_positions"

    n_embd: int | None = None
    n_head: int | None = None
    n_positions: int | None = None

    def __post_init__(self) -> None:
        self.hidden_size = self.hidden_size or self.n_embd
        self.num_attention_heads = self.num_attention_heads or self.n_head
        self.max_position_embeddings = self.max_position_embeddings or self.n_positions
        super().__post_init__()
