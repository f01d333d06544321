"""``DecoderSession``s over ONNX decoder exports, with the KV-cache layout read from the graph.

>>> import transmuter_mlx as tm
>>> from transmuter_mlx.generation.sessions import open_session
>>> from transmuter_mlx.hub import open_repo
>>> repo = open_repo("onnx-community/Qwen3-0.6B-ONNX")
>>> session = open_session(tm.load(repo.onnx_path()), pad_token_id=0)
>>> session.prefill([[5, 6, 7], [8]]).shape == (2, repo.config["vocab_size"])   # each row's last logits
True

The cache is ``past_key_values.N.key/value`` in and ``present.N.key/value`` out, each
(batch, kv_heads, length, head_dim); the heads, head size and dtype come from the graph inputs (a
symbolic head size from the family's config). ``CacheLayout.of(model).mode`` picks one of three modes:

- ``"gqa"``: GroupQueryAttention that counts each row's valid cache rows from the attention-mask
  values (onnxruntime-genai model-builder exports): a fixed buffer the operator writes in place,
  prompts padded on the right (``GQASession``); a ``position_ids`` input, when the export has one, gets
  each new token's position in its row.
- ``"buffer"``: exports that declare ``position_ids`` (optimum ``model.onnx`` of GPT-2, Llama, Qwen2):
  a fixed buffer with masked free rows and explicit positions, prompts padded on the left
  (``BufferSession``).
- ``"grow"``: merged decoders without ``position_ids`` (``decoder_model_merged.onnx``), and any other
  GroupQueryAttention: the cache grows by one row per token, rows grouped by prompt length
  (``GrowSession``).

Prompts run in power-of-two chunks (at most ``MAX_CHUNK`` long) and each new token is a chunk of
one, so the fixed-buffer modes compile one shape per chunk length and capacity, whatever the lengths.
"""

from __future__ import annotations

from typing import Any

from .sessions_buffer import BufferSession, GQASession
from .sessions_common import MAX_CHUNK, CacheLayout, chunk_sizes
from .sessions_grow import GrowSession

__all__ = ["MAX_CHUNK", "BufferSession", "CacheLayout", "GQASession", "GrowSession", "chunk_sizes", "open_session"]

SESSIONS = {"gqa": GQASession, "buffer": BufferSession, "grow": GrowSession}


def open_session(model: Any, pad_token_id: int = 0, mode: str | None = None, *, heads: int | None = None,
                 head_dim: int | None = None) -> GQASession | BufferSession | GrowSession:
    """The session for a loaded decoder ``Model``, in the mode its graph implies (or ``mode``); ``heads`` and
    ``head_dim`` (the family's config) serve a graph that leaves them symbolic."""
    layout = CacheLayout.of(model, heads, head_dim)
    return SESSIONS[mode or layout.mode](model, pad_token_id, layout)
