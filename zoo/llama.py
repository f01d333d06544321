"""Decoder-only LMs with rotary positions: Llama and the families that run the same way (Mistral, Qwen2,
Qwen3, Phi-3, Gemma, SmolLM, Granite, ... see ``REMAP`` in zoo/__init__.py).

>>> from transmuter_mlx.zoo import llama
>>> args = llama.ModelArgs.from_dict({"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4,
...                                   "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 512})
>>> args.head_dim, args.num_key_value_heads, args.positions, args.POSITIONS
(32, 2, 512, 'rotary')

The graph is the model: the KV-cache layout (GroupQueryAttention in place, a buffer with
``position_ids``, a merged decoder that grows) is read from it; config.json gives the head size a
graph leaves symbolic and the context (a row is capped at ``max_position_embeddings``).
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
    """The config.json keys of a rotary decoder (extra keys are ignored)."""

    POSITIONS: ClassVar[str] = "rotary"
