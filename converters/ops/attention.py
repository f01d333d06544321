"""Scaled dot-product attention (ai.onnx Attention 23-25, FlexAttention) and RotaryEmbedding.

The plain functions here (``split_heads``, ``merge_heads``, ``repeat_kv``, ``window_bias``,
``mask_bias``, ``attend``) are the shared attention math; the com.microsoft contrib attention
ops import them. Tensors are in the (batch, heads, sequence, head_size) layout unless a name
says otherwise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import helper

from .registry import register

PREVIEW_DOMAIN = "ai.onnx.preview"


def split_heads(B: Any, x: Any, num_heads: int) -> Any:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    b, s, hidden = B.shape(x)
    return B.transpose(B.reshape(x, (b, s, num_heads, hidden // num_heads)), (0, 2, 1, 3))


def merge_heads(B: Any, x: Any) -> Any:
    """(batch, heads, seq, size) -> (batch, seq, heads * size)."""
    b, h, s, d = B.shape(x)
    return B.reshape(B.transpose(x, (0, 2, 1, 3)), (b, s, h * d))


def repeat_kv(B: Any, x: Any, n_rep: int) -> Any:
    """Each kv head repeated ``n_rep`` times in a row ([h0, h0, h1, h1, ...]) for grouped queries."""
    if n_rep == 1:
        return x
    b, h, s, d = B.shape(x)
    x = B.broadcast_to(B.expand_dims(x, (2,)), (b, h, n_rep, s, d))
    return B.reshape(x, (b, h * n_rep, s, d))


def neg_inf_bias(B: Any, allowed: Any, dtype: Any) -> Any:
    """0 where ``allowed`` is True, -inf elsewhere (select, never multiply: 0 * -inf is NaN)."""
    return B.where(allowed, B.zeros((), dtype), B.full((), -np.inf, dtype))


def window_bias(
    B: Any, q_len: int, kv_len: int, offset: Any, dtype: Any, *, causal: bool, left: int = -1, right: int = -1
) -> Any | None:
    """Additive bias of a causal and/or sliding-window frontier, bottom-right aligned by ``offset``.

    Query ``i`` sits at absolute position ``p = i + offset`` and sees key ``j`` iff ``j <= p`` (causal)
    and ``p - left <= j <= p + right`` (each bound when >= 0). ``offset`` is an int (shape (L, S))
    or a per-batch device vector (shape (batch, 1, L, S)). None when nothing is restricted.
    """
    if not causal and left < 0 and right < 0:
        return None
    diff = np.arange(q_len)[:, None] - np.arange(kv_len)[None, :]  # p - j, less the offset
    if isinstance(offset, int):
        p = diff + offset
        allowed = np.ones((q_len, kv_len), dtype=bool)
        if causal:
            allowed &= p >= 0
        if left >= 0:
            allowed &= p <= left
        if right >= 0:
            allowed &= -p <= right
        return B.asarray(np.where(allowed, 0, -np.inf).astype(dtype))
    p = B.add(B.asarray(diff.astype(np.int64)), B.reshape(B.astype(offset, np.int64), (-1, 1, 1, 1)))
    zero = B.zeros((), np.int64)
    allowed = None
    for on, cond in ((causal, lambda: B.greater_equal(p, zero)),
                     (left >= 0, lambda: B.less_equal(p, B.full((), left, np.int64))),
                     (right >= 0, lambda: B.greater_equal(p, B.full((), -right, np.int64)))):  # fmt: skip
        if on:
            allowed = cond() if allowed is None else B.logical_and(allowed, cond())
    return neg_inf_bias(B, allowed, dtype)


def mask_bias(B: Any, mask: Any, kv_len: int, dtype: Any) -> Any:
    """An ONNX attention mask as an additive bias: boolean True attends; a float mask is added.

    A mask shorter than ``kv_len`` on its last axis is padded with -inf (False)."""
    if B.dtype(mask) == np.bool_:
        mask = neg_inf_bias(B, mask, dtype)
    pad = kv_len - B.shape(mask)[-1]
    if pad > 0:
        mask = B.pad(B.astype(mask, dtype), [(0, 0)] * (len(B.shape(mask)) - 1) + [(0, pad)], -np.inf)
    return B.astype(mask, dtype)


def add_bias(B: Any, bias: Any | None, more: Any | None) -> Any | None:
    """Sum of two optional additive biases."""
    if bias is None or more is None:
        return more if bias is None else bias
    return B.add(bias, more)


def attend(
    B: Any, q: Any, k: Any, v: Any, *, scale: float, bias: Any = None, softcap: float = 0.0,
    softmax_dtype: Any = None, qk_mode: int | None = None,
) -> tuple[Any, Any]:  # fmt: skip
    """``softmax(softcap(q k^T * scale) + bias) v`` as ONNX Attention computes it; returns (y, qk).

    q (B, Hq, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev), Hq a multiple of Hkv; ``bias`` broadcasts
    to (B, Hq, L, S). A row whose bias is all -inf is a zero row of y. ``qk`` is the score output
    of ``qk_mode`` (0 raw/softcapped, 1 softcapped, 2 with bias, 3 probabilities) or None when
    ``qk_mode`` is None. Without a score output, softcap or a softmax dtype, the backend's fused
    ``sdpa`` runs.
    """
    dtype = B.dtype(q)
    masked_rows = None
    if bias is not None:
        row_max = B.max(bias, axis=-1, keepdims=True)
        masked_rows = B.equal(row_max, B.full((), -np.inf, B.dtype(bias)))
    fused_ok = softmax_dtype is None or np.dtype(softmax_dtype) == dtype
    if qk_mode is None and softcap <= 0 and fused_ok:
        y = B.sdpa(q, k, v, float(scale), bias)
        return (y if masked_rows is None else B.where(masked_rows, B.zeros((), dtype), y)), None
    n_rep = B.shape(q)[1] // B.shape(k)[1]
    k, v = repeat_kv(B, k, n_rep), repeat_kv(B, v, n_rep)
    root = B.full((), math.sqrt(scale), dtype)  # both sides scaled by sqrt(scale), as the spec does
    scores = B.matmul(B.multiply(q, root), B.transpose(B.multiply(k, root), (0, 1, 3, 2)))
    if softcap > 0:
        cap = B.full((), softcap, dtype)
        scores = B.multiply(B.tanh(B.divide(scores, cap)), cap)
    qk = scores
    if bias is not None:
        scores = B.add(scores, bias)
    if qk_mode == 2:
        qk = scores
    if softmax_dtype is not None:
        scores = B.astype(scores, softmax_dtype)
    probs = _softmax(B, scores)
    if masked_rows is not None:
        probs = B.where(masked_rows, B.zeros((), B.dtype(probs)), probs)
    probs = B.astype(probs, dtype)
    if qk_mode == 3:
        qk = probs
    return B.matmul(probs, v), (None if qk_mode is None else B.astype(qk, dtype))


def _softmax(B: Any, x: Any) -> Any:
    """Softmax; in half precision rounded after each step, as the ONNX reference computes it."""
    if np.dtype(B.dtype(x)).itemsize > 2:
        return B.softmax(x, -1)
    m = B.max(x, axis=-1, keepdims=True)
    m = B.where(B.isinf(m), B.zeros((), B.dtype(x)), m)
    e = B.exp(B.subtract(x, m))
    return B.divide(e, B.sum(e, axis=-1, keepdims=True))


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


@register("RotaryEmbedding", 23)
def rotary_embedding_23(B: Any, X: Any, cos_cache: Any, sin_cache: Any, position_ids: Any = None, *,
                        interleaved: int = 0, num_heads: int = 0, rotary_embedding_dim: int = 0) -> Any:  # fmt: skip
    """Rotates the first ``rotary_embedding_dim`` features of each head by the cached angles.

    X is (batch, heads, seq, size) or (batch, seq, heads * size); without ``position_ids`` the
    caches are already (batch, seq, rotary_dim / 2)."""
    shape = B.shape(X)
    if len(shape) == 4:
        x = B.transpose(X, (0, 2, 1, 3))
    else:
        x = B.reshape(X, (shape[0], shape[1], num_heads, shape[2] // num_heads))
    b, s, h, d = B.shape(x)
    rd = rotary_embedding_dim or d
    if position_ids is not None:
        cos_cache, sin_cache = B.take(cos_cache, position_ids, 0), B.take(sin_cache, position_ids, 0)
    cos, sin = B.expand_dims(cos_cache, (2,)), B.expand_dims(sin_cache, (2,))
    full = [b, s, h]
    if interleaved:
        x1 = B.slice(x, [0, 0, 0, 0], full + [rd], [1, 1, 1, 2])
        x2 = B.slice(x, [0, 0, 0, 1], full + [rd], [1, 1, 1, 2])
    else:
        x1 = B.slice(x, [0, 0, 0, 0], full + [rd // 2], [1, 1, 1, 1])
        x2 = B.slice(x, [0, 0, 0, rd // 2], full + [rd], [1, 1, 1, 1])
    real = B.subtract(B.multiply(cos, x1), B.multiply(sin, x2))
    imag = B.add(B.multiply(sin, x1), B.multiply(cos, x2))
    if interleaved:
        rotated = B.reshape(B.stack([real, imag], -1), (b, s, h, rd))
    else:
        rotated = B.concatenate([real, imag], -1)
    if rd < d:
        rotated = B.concatenate([rotated, B.slice(x, [0, 0, 0, rd], full + [d], [1, 1, 1, 1])], -1)
    if len(shape) == 4:
        return B.transpose(rotated, (0, 2, 1, 3))
    return B.reshape(rotated, shape)
