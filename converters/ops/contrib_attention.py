"""onnxruntime attention contrib ops (com.microsoft): GroupQueryAttention, MultiHeadAttention,
Attention and RotaryEmbedding, as onnxruntime's CPU kernels compute them.

The attention math is shared with the ai.onnx ops (``_attention_math``) and called with ``ort=True``:
half-precision inputs are computed in float32, as onnxruntime's CPU kernels do. Values that depend
on the data (``seqlens_k``, mask lengths) stay on the device and become masks, so every shape is static.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import call_scope
from ._attention_math import add_bias, attend, merge_heads, rope, split_heads
from .contrib import rms_norm
from .registry import MS_DOMAIN, IndexBound, register


def _positions(B: Any, n: int, shape: tuple[int, ...], dtype: Any = np.int32) -> Any:
    """``arange(n)`` reshaped to ``shape``, made on the host: a traced step holds it as a constant
    instead of recomputing it (each decode step runs several)."""
    return B.asarray(np.arange(n, dtype=dtype).reshape(shape))


def _scale(scale: float | None, head_size: int) -> float:
    return scale if scale else 1.0 / math.sqrt(head_size)


def cache_rows(B: Any, start: Any, shape: tuple[int, ...], length: int) -> Any:
    """The (b, n, s, h) row index of ``write_cache`` for new rows of ``shape`` written at ``start`` (b,)."""
    b, n, s, h = shape
    rows = B.add(B.reshape(B.astype(start, np.int32), (b, 1, 1, 1)), _positions(B, s, (1, 1, s, 1)))
    return B.broadcast_to(B.minimum(rows, B.full((), length - 1, np.int32)), (b, n, s, h))


def write_cache(B: Any, past: Any, new: Any, rows: Any, length: int) -> Any:
    """A (b, n, length, h) cache: ``past`` (zeros without one) with ``new``'s rows written at ``rows``
    (``cache_rows``).

    A scatter of the new rows only: the cost of a decode step does not grow with the buffer beyond one
    copy. Rows past each entry's valid ones keep what ``past`` held there (onnxruntime leaves them
    unspecified too; the attention mask never reads them).
    """
    b, n, s, h = B.shape(new)
    if past is None:
        base = B.zeros((b, n, length, h), B.dtype(new))
    else:
        p = B.shape(past)[2]
        base = B.slice(past, [0, 0, 0, 0], [b, n, min(p, length), h], [1, 1, 1, 1])
        if p < length:
            base = B.pad(base, [(0, 0), (0, 0), (0, length - p), (0, 0)], 0)
    return B.scatter_along_axis(base, rows, new, 2)


def _gqa_bounds(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
    """``seqlens_k + 1`` valid rows per entry: at least the new ones (after a first prompt: any), at most
    the buffer (and, with rotary and no position_ids, the cos/sin caches); position_ids pick cache rows."""
    get = lambda i: args[i] if len(args) > i else None  # noqa: E731
    query, past_key, total = get(0), get(3), get(6)
    s = B.shape(query)[1]
    total = int(np.asarray(total).reshape(-1)[0]) if total is not None else s
    length = max(total, B.shape(past_key)[2] if past_key is not None else 0)
    first_prompt = past_key is None or (s > 1 and s == total)
    rows = B.shape(get(7))[0] if attrs.get("do_rotary") and get(7) is not None else None
    bounds = []
    if get(5) is not None:
        high = length if rows is None or get(9) is not None else min(length, rows)
        bounds.append(IndexBound(5, 0 if first_prompt else s - 1, high,
                                 f"seqlens_k + 1 rows valid, of a {length}-row buffer"))
    if rows is not None and get(9) is not None:
        bounds.append(IndexBound(9, 0, rows, f"the {rows} rows of the cos/sin caches"))
    return bounds


def _gqa_kernel(B: Any, query: Any, key: Any = None, value: Any = None, past_key: Any = None, past_value: Any = None,
                seqlens_k: Any = None, total_sequence_length: Any = None, cos_cache: Any = None, sin_cache: Any = None,
                *extra: Any, num_heads: int, kv_num_heads: int, scale: float = 0.0, softcap: float = 0.0,
                local_window_size: int = -1, do_rotary: int = 0, rotary_interleaved: int = 0, smooth_softmax: int = -1,
                causal: int = 1, **options: Any) -> Any:  # fmt: skip
    """The model builder's GQA (a past buffer shared with present, rotate-half rotary over the whole head, causal,
    nothing optional) as a function of the op's inputs with every shape decided once: ~20 backend calls where
    the op's checks and index arithmetic made ~40 (SmolLM2-135M int4 on torch: 339 us a layer), the positions,
    rotary angles and mask made once a step for all layers; else None."""
    quantized = options.get("kv_cache_bit_width") or any(options.get(f"{kv}_quant_type", "NONE") != "NONE"
                                                          for kv in "kv")
    plain = all(x is None for x in extra) and not (quantized or options.get("qk_output")
                                                     or options.get("sliding_window_cache"))
    if (not plain or past_key is None or past_value is None or not do_rotary or rotary_interleaved or not causal
            or softcap or local_window_size >= 0 or smooth_softmax == 1 or B.dtype(query) != np.float32):
        return None
    b, s, d = B.shape(query)
    h = d // (num_heads + 2 * kv_num_heads) if key is None else d // num_heads
    half = B.shape(cos_cache)[-1]
    total = int(np.asarray(total_sequence_length).reshape(-1)[0])
    length = max(total, B.shape(past_key)[2])
    if 2 * half != h or B.shape(past_key) != (b, kv_num_heads, length, h) or B.shape(past_value) != B.shape(past_key):
        return None
    first_prompt = s > 1 and s == total
    sizes, scale = [num_heads * h, kv_num_heads * h, kv_num_heads * h], _scale(scale, h)
    steps, keys = _positions(B, s, (1, s)), _positions(B, length, (1, 1, 1, length))
    rows_in_step = _positions(B, s, (1, 1, s, 1))
    last_row = B.full((), length - 1, np.int32)
    full: list[Any] = [None, None, None]  # (cos cache, sin cache, [cos cos sin sin]: both at the head's width)
    facts = ("GroupQueryAttention", b, s, h, length, kv_num_heads, first_prompt)

    def step_values(seqlens_k: Any, cos_cache: Any, sin_cache: Any) -> tuple[Any, Any, Any, Any]:
        """(cos, sin, the cache rows the new keys go to, the keys each query sees)."""
        if full[0] is not cos_cache or full[1] is not sin_cache:  # each half repeated once, not at every call
            full[:] = [cos_cache, sin_cache, B.concatenate([cos_cache, cos_cache, sin_cache, sin_cache], -1)]
        seen = B.astype(seqlens_k, np.int32)  # rows per entry before this step's last token
        if first_prompt:
            past = B.zeros((b,), np.int32)
        else:
            past = seen if s == 1 else B.subtract(seen, s - 1)
        pos = B.reshape(past, (b, 1)) if s == 1 else B.add(B.reshape(past, (b, 1)), steps)
        cos, sin = B.split(B.expand_dims(B.take(full[2], pos, 0), [1]), [h, h], -1)  # (b, 1, s, h): one gather
        rows = B.reshape(past, (b, 1, 1, 1))
        if s > 1:
            rows = B.add(rows, rows_in_step)  # each new row's place in the buffer
        at = B.broadcast_to(B.astype(B.minimum(rows, last_row), np.int64), (b, kv_num_heads, s, h))
        # key t is visible to a new row r at position p when t <= p and t <= seen (the last row written)
        allowed = B.less_equal(keys, rows if s == 1 else B.minimum(rows, B.reshape(seen, (b, 1, 1, 1))))
        return cos, sin, at, allowed

    def kernel(query: Any, key: Any, value: Any, past_key: Any, past_value: Any, seqlens_k: Any, *rest: Any) -> Any:
        # the same in every layer of a step: made by the first, kept for the others (~10 backend calls a layer)
        inputs = (seqlens_k, rest[1], rest[2])
        cos, sin, at, allowed = call_scope.keep(facts, inputs, lambda: step_values(*inputs))
        if key is None:  # the packed projection's query and key heads rotated as one tensor
            qk, value = B.split(query, [sizes[0] + sizes[1], sizes[2]], -1)
            qk = B.rotate_half_embedding(split_heads(B, qk, num_heads + kv_num_heads), cos, sin)
            q, k = B.split(qk, [num_heads, kv_num_heads], 1)
        else:
            q, k = (B.rotate_half_embedding(split_heads(B, x, n), cos, sin)
                    for x, n in ((query, num_heads), (key, kv_num_heads)))
        v = split_heads(B, value, kv_num_heads)
        present_key = B.scatter_along_axis(past_key, at, k, 2)
        present_value = B.scatter_along_axis(past_value, at, v, 2)
        out = B.sdpa(q, present_key, present_value, scale, allowed)
        return merge_heads(B, out), present_key, present_value

    return kernel


@register("GroupQueryAttention", 1, MS_DOMAIN, static_inputs=(6,), index_bounds=_gqa_bounds,
          specialise=_gqa_kernel)
def group_query_attention_1(
    B: Any,
    query: Any,
    key: Any = None,
    value: Any = None,
    past_key: Any = None,
    past_value: Any = None,
    seqlens_k: Any = None,
    total_sequence_length: Any = None,
    cos_cache: Any = None,
    sin_cache: Any = None,
    position_ids: Any = None,
    attention_bias: Any = None,
    head_sink: Any = None,
    k_scale: Any = None,
    v_scale: Any = None,
    q_norm_weight: Any = None,
    k_norm_weight: Any = None,
    query_seqlens: Any = None,
    *,
    num_heads: int,
    kv_num_heads: int,
    scale: float = 0.0,
    softcap: float = 0.0,
    local_window_size: int = -1,
    do_rotary: int = 0,
    rotary_interleaved: int = 0,
    smooth_softmax: int = -1,
    causal: int = 1,
    qk_output: int = 0,
    sliding_window_cache: int = 0,
    kv_cache_bit_width: int = 0,
    k_quant_type: str = "NONE",
    v_quant_type: str = "NONE",
    qk_norm_epsilon: float = 1e-6,
    q_norm_epsilon: float | None = None,
    k_norm_epsilon: float | None = None,
) -> tuple[Any, Any, Any]:
    """onnxruntime's GQA: a KV cache of ``seqlens_k + 1`` valid rows per batch entry.

    A first prompt (sequence_length == total_sequence_length > 1) starts at position 0; any
    other step appends its rows after the ``seqlens_k + 1 - sequence_length`` cached ones.
    present_key/value are (b, kv_heads, max(total_sequence_length, past length), h), zero beyond
    each entry's rows, as onnxruntime writes them when past and present are separate buffers.
    """
    unsupported = {
        "quantized KV cache": k_scale is not None or v_scale is not None or kv_cache_bit_width
        or k_quant_type != "NONE" or v_quant_type != "NONE",
        "query_seqlens": query_seqlens is not None,
        "sliding_window_cache": sliding_window_cache,
        "qk_output": qk_output,
    }  # fmt: skip
    for what, used in unsupported.items():
        if used:
            raise NotImplementedError(f"GroupQueryAttention with {what} is not supported")
    b, s, d = B.shape(query)
    if key is None:  # packed QKV
        h = d // (num_heads + 2 * kv_num_heads)
        query, key, value = B.split(query, [num_heads * h, kv_num_heads * h, kv_num_heads * h], -1)
    q = split_heads(B, query, num_heads)
    k = split_heads(B, key, kv_num_heads)
    v = split_heads(B, value, kv_num_heads)
    h = B.shape(q)[-1]
    total = int(np.asarray(total_sequence_length).reshape(-1)[0])
    first_prompt = past_key is None or (s > 1 and s == total)
    total_b = B.add(B.astype(seqlens_k, np.int32), 1)  # valid rows per entry after this step
    past_b = B.zeros((b,), np.int32) if first_prompt else B.subtract(total_b, s)
    if q_norm_weight is not None:
        q = rms_norm(B, q, q_norm_weight, q_norm_epsilon or qk_norm_epsilon, stats=False)[0]
        k = rms_norm(B, k, k_norm_weight, k_norm_epsilon or qk_norm_epsilon, stats=False)[0]
    if do_rotary:
        if position_ids is not None:
            pos = position_ids
        else:
            pos = B.add(B.reshape(past_b, (b, 1)), _positions(B, s, (1, s)))
        cos, sin = B.take(cos_cache, pos, 0), B.take(sin_cache, pos, 0)
        q, k = rope(B, q, cos, sin, rotary_interleaved), rope(B, k, cos, sin, rotary_interleaved)
    length = max(total, B.shape(past_key)[2] if past_key is not None else 0)
    rows_k = cache_rows(B, past_b, B.shape(k), length)
    rows_v = rows_k if B.shape(v) == B.shape(k) else cache_rows(B, past_b, B.shape(v), length)
    present_key = write_cache(B, past_key, k, rows_k, length)
    present_value = write_cache(B, past_value, v, rows_v, length)
    # key t is visible to query row i when t < min(past + i + 1, total) and within the window
    t = _positions(B, length, (1, 1, 1, length))
    rows = _positions(B, s, (1, 1, s, 1))
    end = B.reshape(total_b, (b, 1, 1, 1))
    if causal:
        end = B.minimum(B.add(B.add(B.reshape(past_b, (b, 1, 1, 1)), rows), 1), end)
    allowed = B.less(t, end)
    if local_window_size >= 0:
        allowed = B.logical_and(allowed, B.greater_equal(t, B.subtract(end, local_window_size)))
    bias = None
    if attention_bias is not None:
        cols = B.shape(attention_bias)[-1]
        bias = (
            attention_bias
            if cols == length
            else B.pad(attention_bias, [(0, 0)] * 3 + [(0, length - cols)], 0)
        )
    sink = head_sink
    if sink is None and smooth_softmax == 1:
        sink = B.zeros((num_heads,), B.dtype(q))
    out, _ = attend(B, q, present_key, present_value, scale=_scale(scale, h), bias=bias, allowed=allowed,
                    softcap=softcap, sink=sink, ort=True)  # fmt: skip
    return merge_heads(B, out), present_key, present_value


def _contrib_rotary_bound(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
    """position_ids pick cache rows; a (1,) start position leaves room for the whole sequence."""
    rows = B.shape(args[2])[0]
    shape = B.shape(args[0])
    if len(B.shape(args[1])) == 1:
        s = shape[1] if len(shape) == 3 else shape[2]
        return [IndexBound(1, 0, rows - s + 1, f"a start position for {s} of the {rows} cos/sin cache rows")]
    return [IndexBound(1, 0, rows, f"the {rows} rows of the cos/sin caches")]


@register("RotaryEmbedding", 1, MS_DOMAIN, index_bounds=_contrib_rotary_bound)
def rotary_embedding_1(
    B: Any,
    x: Any,
    position_ids: Any,
    cos_cache: Any,
    sin_cache: Any,
    *,
    interleaved: int = 0,
    is_packed_batching: int = 0,
    num_heads: int = 0,
    rotary_embedding_dim: int = 0,
    scale: float = 1.0,
) -> Any:
    """RoPE on (b, s, hidden) or (b, heads, s, head_size); position_ids (1,) is an offset.

    ``scale`` is accepted and unused, as in onnxruntime's kernels.
    """
    if is_packed_batching:
        raise NotImplementedError("RotaryEmbedding with is_packed_batching=1 is not supported")
    shape = B.shape(x)
    b, s = shape[0], shape[1] if len(shape) == 3 else shape[2]
    if len(B.shape(position_ids)) == 1:  # a start position shared by the batch
        pos = B.add(
            B.reshape(B.astype(position_ids, np.int64), (1, 1)), _positions(B, s, (1, s), np.int64)
        )
        pos = B.broadcast_to(pos, (b, s))
    else:
        pos = position_ids
    return rope(B, x, B.take(cos_cache, pos, 0), B.take(sin_cache, pos, 0), interleaved, num_heads)


def key_mask_bias(B: Any, mask: Any, b: int, s: int, total: int, past: int, causal: int, fill: float) -> Any:
    """Additive (b, 1, s, total) bias: ``fill`` where onnxruntime's mask forms hide a key.

    Forms: (b) valid lengths (right padding); (2b) end positions then start positions; (b, total)
    or (b, s, total) with 0 for hidden keys; (b, 1, max, max) sliced at the past length.
    """
    t = _positions(B, total, (1, 1, 1, total))
    hidden = None
    if mask is not None:
        shape = B.shape(mask)
        if len(shape) == 1 and shape[0] in (b, 2 * b):
            ends = B.reshape(B.astype(B.slice(mask, [0], [b], [1]), np.int32), (b, 1, 1, 1))
            hidden = B.greater_equal(t, ends)
            if shape[0] == 2 * b:
                starts = B.reshape(B.astype(B.slice(mask, [b], [2 * b], [1]), np.int32), (b, 1, 1, 1))
                hidden = B.logical_or(hidden, B.less(t, starts))
        elif len(shape) in (2, 3, 4):
            if len(shape) == 4:
                mask = B.slice(mask, [0, 0, past, 0], [b, 1, past + s, total], [1, 1, 1, 1])
            hidden = B.equal(B.reshape(mask, (b, 1, -1, total)), B.zeros((), B.dtype(mask)))
        else:
            raise NotImplementedError(f"attention mask of shape {shape} is not supported")
    if causal:
        rows = _positions(B, s, (1, 1, s, 1))
        future = B.greater(t, B.add(rows, past))
        hidden = future if hidden is None else B.logical_or(hidden, future)
    if hidden is None:
        return None
    return B.where(hidden, B.full((), fill, np.float32), B.zeros((), np.float32))


@register("MultiHeadAttention", 1, MS_DOMAIN)
def multi_head_attention_1(
    B: Any,
    query: Any,
    key: Any = None,
    value: Any = None,
    bias: Any = None,
    key_padding_mask: Any = None,
    attention_bias: Any = None,
    past_key: Any = None,
    past_value: Any = None,
    past_sequence_length: Any = None,
    cache_indirection: Any = None,
    *,
    num_heads: int,
    mask_filter_value: float = -10000.0,
    scale: float = 0.0,
    unidirectional: int = 0,
) -> tuple[Any, Any, Any]:
    """Self/cross attention on projected q/k/v: separate (b, s, d), packed QKV (b, s, n, 3, h),
    packed KV (b, l, n, 2, h) or key/value already in (b, n, l, h)."""
    if past_sequence_length is not None or cache_indirection is not None:
        raise NotImplementedError("MultiHeadAttention with a shared KV buffer or beam cache_indirection")
    n = num_heads
    bnsh_kv = key is not None and len(B.shape(key)) == 4
    if len(B.shape(query)) == 5:  # packed QKV
        query, key, value = (B.squeeze(t, [3]) for t in B.split(query, [1, 1, 1], 3))
    elif len(B.shape(key)) == 5:  # packed KV
        key, value = (B.squeeze(t, [3]) for t in B.split(key, [1, 1], 3))
    b, s = B.shape(query)[:2]
    # everything to (b, seq, n, h) unless key/value are already (b, n, l, h)
    q = B.reshape(query, (b, s, n, -1))
    k, v = (key, value) if bnsh_kv else (B.reshape(t, B.shape(t)[:2] + (n, -1)) for t in (key, value))
    if bias is not None:
        hq, hk, hv = B.shape(q)[-1], B.shape(k)[-1], B.shape(v)[-1]
        bq, bk, bv = B.split(bias, [n * hq, n * hk, n * hv], 0)
        q = B.add(q, B.reshape(bq, (n, hq)))
        if not bnsh_kv:
            k, v = B.add(k, B.reshape(bk, (n, hk))), B.add(v, B.reshape(bv, (n, hv)))
    q = B.transpose(q, (0, 2, 1, 3))
    if not bnsh_kv:
        k, v = B.transpose(k, (0, 2, 1, 3)), B.transpose(v, (0, 2, 1, 3))
    past = 0
    if past_key is not None:
        past = B.shape(past_key)[2]
        k, v = B.concatenate([past_key, k], 2), B.concatenate([past_value, v], 2)
    total = B.shape(k)[2]
    mask = key_mask_bias(B, key_padding_mask, b, s, total, past, unidirectional, mask_filter_value)
    out, _ = attend(
        B, q, k, v, scale=_scale(scale, B.shape(q)[-1]), bias=add_bias(B, mask, attention_bias), ort=True
    )
    return merge_heads(B, out), k, v


@register("Attention", 1, MS_DOMAIN)
def attention_1(
    B: Any,
    x: Any,
    weights: Any,
    bias: Any = None,
    mask_index: Any = None,
    past: Any = None,
    attention_bias: Any = None,
    past_sequence_length: Any = None,
    *,
    num_heads: int,
    qkv_hidden_sizes: list[int] | None = None,
    unidirectional: int = 0,
    scale: float = 0.0,
    mask_filter_value: float = -10000.0,
    past_present_share_buffer: int = 0,
    do_rotary: int = 0,
    rotary_embedding_dim: int = 0,
) -> tuple[Any, Any]:
    """The fused-projection attention of BERT/GPT-2 exports; present is (2, b, n, past + s, h)."""
    if past_present_share_buffer or past_sequence_length is not None or do_rotary:
        raise NotImplementedError("Attention with a shared past/present buffer or do_rotary is not supported")
    b, s = B.shape(x)[:2]
    qkv = B.matmul(x, weights)
    if bias is not None:
        qkv = B.add(qkv, bias)
    sizes = list(qkv_hidden_sizes) if qkv_hidden_sizes else [B.shape(weights)[1] // 3] * 3
    q, k, v = (split_heads(B, t, num_heads) for t in B.split(qkv, sizes, -1))
    past_len = 0
    if past is not None:
        past_len = B.shape(past)[3]
        pk, pv = (B.squeeze(t, [0]) for t in B.split(past, [1, 1], 0))
        k, v = B.concatenate([pk, k], 2), B.concatenate([pv, v], 2)
    total = B.shape(k)[2]
    mask = key_mask_bias(B, mask_index, b, s, total, past_len, unidirectional, mask_filter_value)
    scale = _scale(scale, sizes[0] // num_heads)
    out, _ = attend(B, q, k, v, scale=scale, bias=add_bias(B, mask, attention_bias), ort=True)
    present = B.stack([k, v], 0) if sizes[1] == sizes[2] else None
    return merge_heads(B, out), present
