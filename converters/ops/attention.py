"""Scaled dot-product attention (ai.onnx Attention 23-25, FlexAttention) and RotaryEmbedding-23.

The attention math they share with the com.microsoft contrib ops lives in ``_attention_math``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import helper

from ._attention_math import (
    add_bias,
    attend,
    mask_bias,
    merge_heads,
    neg_inf_bias,
    repeat_kv,
    rope,
    split_heads,
    window_bias,
)
from .registry import IndexBound, register

PREVIEW_DOMAIN = "ai.onnx.preview"


def _attention(B: Any, Q: Any, K: Any, V: Any, attn_mask: Any, past_key: Any, past_value: Any,
               nonpad_kv_seqlen: Any, ctx: Any, *, is_causal: int, kv_num_heads: int | None,
               q_num_heads: int | None, qk_matmul_output_mode: int, scale: float | None, softcap: float,
               softmax_precision: int | None, left_window_size: int = -1, right_window_size: int = -1) -> tuple:  # fmt: skip
    three_d = len(B.shape(Q)) == 3
    if three_d:
        Q, K, V = (
            split_heads(B, Q, q_num_heads),
            split_heads(B, K, kv_num_heads),
            split_heads(B, V, kv_num_heads),
        )
    dtype = B.dtype(Q)
    if past_key is not None:
        K, V = B.concatenate([past_key, K], 2), B.concatenate([past_value, V], 2)
    L, S = B.shape(Q)[2], B.shape(K)[2]
    if nonpad_kv_seqlen is not None and past_key is None:
        offset = B.subtract(B.astype(nonpad_kv_seqlen, np.int64), B.full((), L, np.int64))
    else:
        offset = 0 if past_key is None else B.shape(past_key)[2]
    bias = None if attn_mask is None else mask_bias(B, attn_mask, S, dtype)
    frontier = window_bias(
        B, L, S, offset, dtype, causal=bool(is_causal), left=left_window_size, right=right_window_size
    )
    if (
        bias is None
        and is_causal
        and isinstance(offset, int)
        and offset == S - L >= 0
        and left_window_size < 0
        and right_window_size < 0
    ):
        frontier = "causal"  # the fused kernel's own bottom-right causal mask; no row is empty
    bias = add_bias(B, bias, frontier) if not isinstance(frontier, str) else frontier
    if nonpad_kv_seqlen is not None:
        valid = B.less(
            B.arange(0, S, 1, np.int64), B.reshape(B.astype(nonpad_kv_seqlen, np.int64), (-1, 1, 1, 1))
        )
        bias = add_bias(B, bias, neg_inf_bias(B, valid, dtype))
    want_qk = ctx.num_outputs > 3 and bool(ctx.step.outputs[3])
    scale = 1 / math.sqrt(B.shape(Q)[3]) if scale is None else scale
    softmax_dtype = None if softmax_precision is None else helper.tensor_dtype_to_np_dtype(softmax_precision)
    if isinstance(bias, str) and (want_qk or softcap > 0 or softmax_dtype not in (None, dtype)):
        bias = window_bias(B, L, S, S - L, dtype, causal=True)
    if isinstance(bias, str):
        y, qk = B.sdpa(Q, K, V, float(scale), "causal"), None
    else:
        y, qk = attend(B, Q, K, V, scale=scale, bias=bias, softcap=softcap, softmax_dtype=softmax_dtype,
                       qk_mode=qk_matmul_output_mode if want_qk else None)  # fmt: skip
    if three_d:
        y = merge_heads(B, y)
    return y, K, V, qk


@register("Attention", 23, context=True)
def attention_23(B: Any, Q: Any, K: Any, V: Any, attn_mask: Any = None, past_key: Any = None,
                 past_value: Any = None, *, ctx: Any, is_causal: int = 0, kv_num_heads: int | None = None,
                 q_num_heads: int | None = None, qk_matmul_output_mode: int = 0, scale: float | None = None,
                 softcap: float = 0.0, softmax_precision: int | None = None) -> tuple:  # fmt: skip
    return _attention(B, Q, K, V, attn_mask, past_key, past_value, None, ctx, is_causal=is_causal,
                      kv_num_heads=kv_num_heads, q_num_heads=q_num_heads, scale=scale, softcap=softcap,
                      qk_matmul_output_mode=qk_matmul_output_mode, softmax_precision=softmax_precision)  # fmt: skip


@register("Attention", 24, context=True)
def attention_24(B: Any, Q: Any, K: Any, V: Any, attn_mask: Any = None, past_key: Any = None,
                 past_value: Any = None, nonpad_kv_seqlen: Any = None, *, ctx: Any, is_causal: int = 0,
                 kv_num_heads: int | None = None, q_num_heads: int | None = None, qk_matmul_output_mode: int = 0,
                 scale: float | None = None, softcap: float = 0.0, softmax_precision: int | None = None) -> tuple:  # fmt: skip
    """Adds ``nonpad_kv_seqlen``: an external cache's valid length per batch entry."""
    return _attention(B, Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen, ctx, is_causal=is_causal,
                      kv_num_heads=kv_num_heads, q_num_heads=q_num_heads, scale=scale, softcap=softcap,
                      qk_matmul_output_mode=qk_matmul_output_mode, softmax_precision=softmax_precision)  # fmt: skip


@register("Attention", 25, context=True)
def attention_25(B: Any, Q: Any, K: Any, V: Any, attn_mask: Any = None, past_key: Any = None,
                 past_value: Any = None, nonpad_kv_seqlen: Any = None, *, ctx: Any, is_causal: int = 0,
                 kv_num_heads: int | None = None, q_num_heads: int | None = None, qk_matmul_output_mode: int = 0,
                 scale: float | None = None, softcap: float = 0.0, softmax_precision: int | None = None,
                 left_window_size: int = -1, right_window_size: int = -1) -> tuple:  # fmt: skip
    """Adds a sliding window of ``left_window_size``/``right_window_size`` keys around each query."""
    return _attention(B, Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen, ctx, is_causal=is_causal,
                      kv_num_heads=kv_num_heads, q_num_heads=q_num_heads, scale=scale, softcap=softcap,
                      qk_matmul_output_mode=qk_matmul_output_mode, softmax_precision=softmax_precision,
                      left_window_size=left_window_size, right_window_size=right_window_size)  # fmt: skip


@register("FlexAttention", 1, domain=PREVIEW_DOMAIN, context=True)
def flex_attention_1(B: Any, Q: Any, K: Any, V: Any, *, ctx: Any, scale: float | None = None,
                     score_mod: Any = None, prob_mod: Any = None, softmax_precision: int | None = None) -> Any:  # fmt: skip
    """Attention whose scores and probabilities pass through optional subgraphs (``score_mod``,
    ``prob_mod``); half precision computes the softmax in float32 unless ``softmax_precision`` says."""
    dtype = B.dtype(Q)
    scale = 1 / math.sqrt(B.shape(Q)[3]) if scale is None else scale
    if softmax_precision is not None:
        compute = helper.tensor_dtype_to_np_dtype(softmax_precision)
    else:
        compute = np.dtype(np.float32) if np.dtype(dtype).itemsize < 4 else np.dtype(dtype)
    if score_mod is None and prob_mod is None and compute == dtype:
        return B.sdpa(Q, K, V, float(scale), None)
    n_rep = B.shape(Q)[1] // B.shape(K)[1]
    K, V = repeat_kv(B, K, n_rep), repeat_kv(B, V, n_rep)
    root = B.full((), np.sqrt(np.float32(scale)), dtype)
    scores = B.matmul(B.multiply(Q, root), B.transpose(B.multiply(K, root), (0, 1, 3, 2)))
    scores = B.astype(scores, compute)
    if score_mod is not None:
        scores = B.astype(ctx.run_subgraph(score_mod, [scores])[0], compute)
    probs = B.softmax(scores, -1)
    if prob_mod is not None:
        probs = B.astype(ctx.run_subgraph(prob_mod, [probs])[0], compute)
    return B.astype(B.matmul(probs, B.astype(V, compute)), B.dtype(V))


def _rotary_position_bound(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
    """position_ids pick rows of the cos/sin caches."""
    rows = B.shape(args[1])[0]
    return [IndexBound(3, 0, rows, f"the {rows} rows of the cos/sin caches")] if len(args) > 3 else []


@register("RotaryEmbedding", 23, index_bounds=_rotary_position_bound)
def rotary_embedding_23(B: Any, X: Any, cos_cache: Any, sin_cache: Any, position_ids: Any = None, *,
                        interleaved: int = 0, num_heads: int = 0, rotary_embedding_dim: int = 0) -> Any:  # fmt: skip
    """Rotates the first ``rotary_embedding_dim`` features of each head by the cached angles.

    X is (batch, heads, seq, size) or (batch, seq, heads * size); without ``position_ids`` the
    caches are already (batch, seq, rotary_dim / 2)."""
    if rotary_embedding_dim and 2 * B.shape(cos_cache)[-1] != rotary_embedding_dim:
        raise ValueError(f"rotary_embedding_dim {rotary_embedding_dim} != twice the caches' width")
    if position_ids is not None:
        cos_cache, sin_cache = B.take(cos_cache, position_ids, 0), B.take(sin_cache, position_ids, 0)
    return rope(B, X, cos_cache, sin_cache, interleaved, num_heads)
