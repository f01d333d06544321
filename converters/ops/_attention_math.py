"""The attention math shared by the attention ops (``attention``, ``contrib_attention``, ``seqmix``).

Tensors are in the (batch, heads, sequence, head_size) layout unless a name says otherwise. Two
numerics live side by side: the ONNX reference's (ai.onnx Attention) and onnxruntime's CPU kernels'
(the com.microsoft contrib ops), selected by ``attend``'s ``ort`` flag.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_LOW_PRECISION = ("float16", "bfloat16")


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
    B: Any, q: Any, k: Any, v: Any, *, scale: float, bias: Any = None, allowed: Any = None,
    softcap: float = 0.0, sink: Any = None, softmax_dtype: Any = None, qk_mode: int | None = None,
    ort: bool = False,
) -> tuple[Any, Any]:  # fmt: skip
    """``softmax(softcap(q k^T * scale) + bias) v``, masked where not ``allowed``; returns (y, qk).

    q (B, Hq, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev), Hq a multiple of Hkv (query head h reads kv
    head h // (Hq // Hkv)). ``bias`` (additive) and ``allowed`` (boolean) broadcast to (B, Hq, L, S);
    a key not ``allowed`` scores float32's lowest value, so a row with none averages v. ``sink`` (Hq,)
    adds exp(sink) to each softmax denominator (head sinks, smooth softmax). ``qk`` is the score output
    of ``qk_mode`` (0 raw/softcapped, 1 softcapped, 2 with bias, 3 probabilities), None when
    ``qk_mode`` is None. Without a score output, softcap, sink or softmax dtype the backend's fused
    ``sdpa`` runs.

    The numerics are the ONNX reference's: q and k each scaled by sqrt(scale), the softmax of half
    precision rounded at each step (or computed in ``softmax_dtype``), and a row whose bias is all
    -inf a zero row of y. ``ort=True`` computes as onnxruntime's CPU kernels do: half precision in
    float32, the scale and softcap applied to the scores, no row zeroed.
    """
    out_dtype = B.dtype(q)
    if ort and out_dtype.name in _LOW_PRECISION:
        q, k, v = (B.astype(a, np.float32) for a in (q, k, v))
    dtype = B.dtype(q)
    masked_rows = None
    if bias is not None and not ort:
        masked_rows = B.equal(B.max(bias, axis=-1, keepdims=True), B.full((), -np.inf, B.dtype(bias)))
    floor = None if allowed is None else B.full((), np.finfo(np.float32).min, dtype)
    fused_ok = softmax_dtype is None or np.dtype(softmax_dtype) == dtype
    if qk_mode is None and softcap <= 0 and sink is None and fused_ok:
        mask = None if bias is None else B.astype(bias, dtype)
        if allowed is not None:
            mask = allowed if mask is None else B.where(allowed, mask, floor)
        y = B.sdpa(q, k, v, float(scale), mask)
        return B.astype(_zero_rows(B, y, masked_rows), out_dtype), None
    if not ort:
        n_rep = B.shape(q)[1] // B.shape(k)[1]
        k, v = repeat_kv(B, k, n_rep), repeat_kv(B, v, n_rep)
    qk = scores = _scores(B, q, k, scale, softcap, ort)
    if bias is not None:
        scores = B.add(scores, B.astype(bias, dtype))
    if allowed is not None:
        scores = B.where(allowed, scores, floor)
    if qk_mode == 2:
        qk = scores
    if softmax_dtype is not None:
        scores = B.astype(scores, softmax_dtype)
    probs = _softmax(B, scores, sink)
    probs = B.astype(_zero_rows(B, probs, masked_rows), dtype)
    if qk_mode == 3:
        qk = probs
    y = _grouped_matmul(B, probs, v) if ort else B.matmul(probs, v)
    return B.astype(y, out_dtype), (None if qk_mode is None else B.astype(qk, dtype))


def _scores(B: Any, q: Any, k: Any, scale: float, softcap: float, ort: bool) -> Any:
    """softcap(q k^T * scale): q and k each scaled by sqrt(scale) as the ONNX reference does, or
    (``ort``) the product scaled, as a GEMM alpha, with k shared by its group of query heads."""
    if ort:
        scores = B.multiply(_grouped_matmul(B, q, B.transpose(k, (0, 1, 3, 2))), scale)
        return scores if softcap <= 0 else B.multiply(B.tanh(B.multiply(scores, 1 / softcap)), softcap)
    root = B.full((), math.sqrt(scale), B.dtype(q))
    scores = B.matmul(B.multiply(q, root), B.transpose(B.multiply(k, root), (0, 1, 3, 2)))
    if softcap <= 0:
        return scores
    cap = B.full((), softcap, B.dtype(q))
    return B.multiply(B.tanh(B.divide(scores, cap)), cap)


def _grouped_matmul(B: Any, a: Any, b: Any) -> Any:
    """``a`` (n, Hq, L, M) @ ``b`` (n, Hkv, M, N), each kv head shared by its group of query heads."""
    n, hq, rows, inner = B.shape(a)
    hkv, cols = B.shape(b)[1], B.shape(b)[3]
    grouped = B.reshape(a, (n, hkv, (hq // hkv) * rows, inner))
    return B.reshape(B.matmul(grouped, b), (n, hq, rows, cols))


def _zero_rows(B: Any, x: Any, rows: Any) -> Any:
    return x if rows is None else B.where(rows, B.zeros((), B.dtype(x)), x)


def _softmax(B: Any, x: Any, sink: Any = None) -> Any:
    """Softmax over the last axis, with ``sink`` (heads,) as one more logit per row when given.

    In half precision it is rounded after each step, as the ONNX reference computes it."""
    if sink is not None:
        b, n, s, t = B.shape(x)
        sink = B.broadcast_to(B.reshape(B.astype(sink, B.dtype(x)), (1, n, 1, 1)), (b, n, s, 1))
        return B.split(_softmax(B, B.concatenate([x, sink], -1)), [t, 1], -1)[0]
    if np.dtype(B.dtype(x)).itemsize > 2:
        return B.softmax(x, -1)
    m = B.max(x, axis=-1, keepdims=True)
    m = B.where(B.isinf(m), B.zeros((), B.dtype(x)), m)
    e = B.exp(B.subtract(x, m))
    return B.divide(e, B.sum(e, axis=-1, keepdims=True))


def rope(B: Any, x: Any, cos: Any, sin: Any, interleaved: int, num_heads: int = 0) -> Any:
    """RoPE: the first ``2 * cos.shape[-1]`` features of each head of ``x`` rotated by the angles.

    ``x`` is (batch, heads, seq, size) or (batch, seq, heads * size) with ``num_heads`` heads (when
    0, heads of size ``2 * cos.shape[-1]``); ``cos``/``sin`` are (batch, seq, rotary_dim / 2).
    Interleaved rotates the pairs (x[2i], x[2i+1]); otherwise the halves (x[i], x[i + rotary_dim / 2]).
    """
    shape = B.shape(x)
    half = B.shape(cos)[-1]
    if len(shape) == 3:
        b, s, d = shape
        size = d // num_heads if num_heads else 2 * half
        x, head_axis = B.reshape(x, (b, s, d // size, size)), 2
    else:
        head_axis = 1
    cos, sin = (B.expand_dims(B.astype(t, B.dtype(x)), [head_axis]) for t in (cos, sin))
    heads = B.shape(x)
    size = heads[-1]
    rot, rest = (x, None) if 2 * half == size else B.split(x, [2 * half, size - 2 * half], -1)
    if interleaved:
        pairs = B.reshape(rot, heads[:-1] + (half, 2))
        x1, x2 = (B.squeeze(p, [-1]) for p in B.split(pairs, [1, 1], -1))
    else:
        x1, x2 = B.split(rot, [half, half], -1)
    y1 = B.subtract(B.multiply(x1, cos), B.multiply(x2, sin))
    y2 = B.add(B.multiply(x2, cos), B.multiply(x1, sin))
    if interleaved:
        out = B.reshape(B.stack([y1, y2], -1), heads[:-1] + (2 * half,))
    else:
        out = B.concatenate([y1, y2], -1)
    out = out if rest is None else B.concatenate([out, rest], -1)
    return B.reshape(out, shape)
