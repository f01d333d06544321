"""Internal ops (domain ``ai.transmuter``) that ``converters.fusion`` rewrites exported chains into.

No exporter writes these: they exist so that a chain of element-wise ONNX nodes runs as one
backend kernel. Each computes what the chain it replaces computes, and falls back to the chain
itself when the shapes it meets at run time are not the ones its kernel covers.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..values import np_dtype
from ._window import spatial_pads
from .activation import _HALF
from .contrib import _gelu_erf, _gelu_tanh
from .elementwise import clip_11
from .nn_conv import conv_1
from .nn_norm import instance_normalization_1
from .registry import register
from .tensor_pad import pad_11
from .tensor_shape import _ints, _reshape_target, expand_8, reshape_14, slice_10, unsqueeze_13

FUSED_DOMAIN = "ai.transmuter"


def _scaled(B: Any, x: Any, factor: Any, divide: int) -> Any:
    if factor is None:
        return x
    f = B.astype(B.asarray(factor), B.dtype(x))
    return B.divide(x, f) if divide else B.multiply(x, f)


def _swap_last(perm: list[int]) -> list[int]:
    return [*perm[:-2], perm[-1], perm[-2]]


def _scale(factors: list[Any], divide: tuple[int, ...]) -> float:
    scale = 1.0
    for f, div in zip(factors, divide):
        if f is not None:
            value = float(np.reshape(f, -1)[0])
            scale = scale / value if div else scale * value
    return scale


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    return len(shape) <= len(target) and all(d in (1, t) for d, t in zip(reversed(shape), reversed(target)))


def _sdpa_applies(B: Any, q: Any, key: Any, v: Any, mask: Any, factors: list[Any], casts: tuple[int, int]) -> bool:
    """Whether the fused kernel computes exactly the chain: (b, h, s, d) operands of one batch (or a key and value
    of batch 1 that the query's rows share, ``_shared_kv``), scalar scale factors, a same-dtype mask that broadcasts
    to the scores, and no cast of the scores or the probabilities to another dtype."""
    shapes = [B.shape(q), B.shape(key), B.shape(v)]
    if any(cast and np_dtype(cast) != B.dtype(q) for cast in casts):
        return False
    if any(len(s) != 4 for s in shapes) or any(
        f is not None and (np.size(f) != 1 or np.ndim(f) > 4) for f in factors
    ):
        return False
    if len({s[0] for s in shapes}) != 1 and not shapes[1][0] == shapes[2][0] == 1:
        return False
    if mask is None:
        return True
    scores = (*shapes[0][:3], shapes[1][2])
    return B.dtype(mask) == B.dtype(q) and _broadcasts_to(B.shape(mask), scores)


def _group_size(shape: tuple[int, ...], expand: Any, target: Any) -> int | None:
    """n when ``Reshape(Expand(Unsqueeze(x, 2), expand), target)`` of an ``x`` of ``shape`` (b, h, s, d) repeats
    each head n times in a row (transformers' ``repeat_kv``: query head i reads head i // n); else None."""
    if len(shape) != 4:
        return None
    try:
        expanded = np.broadcast_shapes((*shape[:2], 1, *shape[2:]), tuple(_ints(expand)))
    except ValueError:
        return None
    if len(expanded) != 5 or expanded[:2] != shape[:2] or expanded[3:] != shape[2:]:
        return None
    n = expanded[2]
    grouped = [shape[0], shape[1] * n, *shape[2:]]
    return n if _reshape_target(expanded, _ints(target), 0) == grouped else None


def _repeat_heads(B: Any, x: Any, expand: Any, target: Any) -> Any:
    """The chain ``Reshape(Expand(Unsqueeze(x, 2), expand), target)`` itself (nothing when ``expand`` is None)."""
    if expand is None:
        return x
    return reshape_14(B, expand_8(B, unsqueeze_13(B, x, np.array([2])), expand), target)


def _attention_kernel(
    B: Any,
    query: Any,
    key: Any,
    value: Any,
    mask: Any = None,
    query_factor: Any = None,
    key_factor: Any = None,
    score_factor: Any = None,
    key_expand: Any = None,
    key_shape: Any = None,
    value_expand: Any = None,
    value_shape: Any = None,
    heads_shape: Any = None,
    rows_shape: Any = None,
    *,
    key_perm: tuple[int, ...] = (),
    divide: tuple[int, ...] = (0, 0, 0),
    nan_to_zero: int = 0,
    scores_cast: int = 0,
    probs_cast: int = 0,
) -> Any:
    """The attention as one ``B.sdpa`` call, a function of the op's inputs, where the shapes and static inputs make
    it the chain's computation (None elsewhere); decided from shapes alone, so a replay decides once."""
    if len(B.shape(query)) == 3:
        return _folded_heads_kernel(B, query, key, value, mask, query_factor, key_factor, score_factor, heads_shape,
                                    rows_shape, key_perm=key_perm, divide=divide, nan_to_zero=nan_to_zero,
                                    casts=(scores_cast, probs_cast))
    if heads_shape is not None:
        return None
    factors = [query_factor, key_factor, score_factor]
    perm = list(key_perm) or [0, 1, 2, 3]
    if len(B.shape(key)) != 4 or len(perm) != 4:
        return None
    swap = _swap_last(perm)
    k = B.transpose(key, swap)
    if key_expand is not None or value_expand is not None:
        groups = {_group_size(B.shape(key), key_expand, key_shape) if key_expand is not None else 1,
                  _group_size(B.shape(value), value_expand, value_shape) if value_expand is not None else 1}
        heads = B.shape(query)[1:2], B.shape(k)[1:2], B.shape(value)[1:2]
        if len(groups) != 1 or None in groups or perm[:2] != [0, 1]:
            return None
        if heads[0] != (heads[1][0] * groups.pop(),) or heads[1] != heads[2]:
            return None
    if not _sdpa_applies(B, query, k, value, mask, factors, (scores_cast, probs_cast)):
        return None
    scale, keep = _scale(factors, divide), swap == [0, 1, 2, 3]
    shared = B.shape(query)[0] > 1 == B.shape(k)[0]

    def kernel(q: Any, key: Any, v: Any, mask: Any = None, *static: Any) -> Any:
        k = key if keep else B.transpose(key, swap)
        if shared:
            return _shared_kv(B, q, k, v, scale, mask, bool(nan_to_zero))
        return B.sdpa(q, k, v, scale, mask, zero_nan=bool(nan_to_zero))

    return kernel


def _folded_heads_kernel(B: Any, query: Any, key: Any, value: Any, mask: Any, query_factor: Any, key_factor: Any,
                         score_factor: Any, heads_shape: Any, rows_shape: Any, *, key_perm: tuple[int, ...],
                         divide: tuple[int, ...], nan_to_zero: int, casts: tuple[int, int]) -> Any:
    """``_attention_kernel`` for operands of rank 3, heads folded into the batch (n = b * h, L, E): viewed as (b, h, L,
    E) where the chain unfolds the scores to (b, h, L, S) for the mask and folds them back (``heads_shape``,
    ``rows_shape``), else as one batch of n heads, and the result folded again; None where that is not the chain."""
    key_perm = list(key_perm)
    if key_perm not in ([], [0, 2, 1]) or any(len(B.shape(a)) != 3 for a in (key, value)):
        return None
    n, length, _ = B.shape(query)
    source = B.shape(key)[1 if key_perm else 2]
    if heads_shape is None:
        b, h = 1, n
        if mask is not None and (len(B.shape(mask)) > 3 or not _broadcasts_to(B.shape(mask), (n, length, source))):
            return None
    else:
        scores = (n, length, source)
        unfolded = _reshape_target(scores, _ints(heads_shape), 0)
        if len(unfolded) != 4 or unfolded[2:] != [length, source] or math.prod(unfolded) != math.prod(scores) \
                or _reshape_target(tuple(unfolded), _ints(rows_shape), 0) != list(scores):
            return None
        b, h = unfolded[:2]

    def unfold(x: Any) -> Any:
        return B.reshape(x, (b, h, *B.shape(x)[1:]))

    def unfold_mask(m: Any) -> Any:
        return m if m is None or heads_shape is not None else B.reshape(m, (1,) * (4 - len(B.shape(m))) + B.shape(m))

    inner = _attention_kernel(B, unfold(query), unfold(key), unfold(value), unfold_mask(mask), query_factor,
                              key_factor, score_factor, key_perm=[0, 1, 3, 2] if key_perm else [], divide=divide,
                              nan_to_zero=nan_to_zero, scores_cast=casts[0], probs_cast=casts[1])
    if inner is None:
        return None

    def kernel(q: Any, key: Any, v: Any, mask: Any = None, *static: Any) -> Any:
        out = inner(unfold(q), unfold(key), unfold(v), unfold_mask(mask))
        return B.reshape(out, (n, length, B.shape(v)[2]))

    return kernel


def _shared_kv(B: Any, q: Any, k: Any, v: Any, scale: float, mask: Any, zero_nan: bool) -> Any:
    """``B.sdpa`` of q (n, h, m, d) over a key and value of batch 1 that its n rows share (the beams of one input
    reading its cross-attention cache once, ``generation/seq2seq.py``): the n rows become n * m queries of one
    batch, the mask's rows with them."""
    n, h, m, d = B.shape(q)
    rows = B.reshape(B.transpose(q, (1, 0, 2, 3)), (1, h, n * m, d))
    if mask is not None:
        mask_shape = B.shape(mask)
        mask = B.reshape(mask, (1,) * (4 - len(mask_shape)) + tuple(mask_shape))
        mask = B.broadcast_to(mask, (n, B.shape(mask)[1], m, B.shape(k)[2]))
        mask = B.reshape(B.transpose(mask, (1, 0, 2, 3)), (1, B.shape(mask)[1], n * m, B.shape(k)[2]))
    out = B.sdpa(rows, k, v, scale, mask, zero_nan=zero_nan)  # (1, h, n * m, dv)
    return B.transpose(B.reshape(out, (h, n, m, B.shape(v)[3])), (1, 0, 2, 3))


@register("ScaledDotProductAttention", 1, FUSED_DOMAIN, static_inputs=(4, 5, 6, 7, 8, 9, 10, 11, 12),
          specialise=_attention_kernel)
def scaled_dot_product_attention_1(
    B: Any,
    query: Any,
    key: Any,
    value: Any,
    mask: Any = None,
    query_factor: Any = None,
    key_factor: Any = None,
    score_factor: Any = None,
    key_expand: Any = None,
    key_shape: Any = None,
    value_expand: Any = None,
    value_shape: Any = None,
    heads_shape: Any = None,
    rows_shape: Any = None,
    *,
    key_perm: tuple[int, ...] = (),
    divide: tuple[int, ...] = (0, 0, 0),
    nan_to_zero: int = 0,
    scores_cast: int = 0,
    probs_cast: int = 0,
) -> Any:
    """``Softmax(scale(query) @ scale(Transpose(key, key_perm)) scaled + mask, -1) @ value``.

    The chain an exporter writes for attention: ``key_perm`` is the perm of the Transpose that made
    K^T (none: ``key`` is K^T already); the three factors (host scalars: constants, or computed from
    shapes) multiply, or divide where ``divide`` says so, the query, K^T and the scores. ``nan_to_zero``: the
    probabilities went through ``Where(IsNaN(p), 0, p)``, so a fully masked row attends to nothing (zeros).
    ``key_expand`` and ``key_shape`` (``value_expand``, ``value_shape``): the key (value) is first repeated by
    ``Reshape(Expand(Unsqueeze(key, 2), key_expand), key_shape)``; ``B.sdpa`` reads the heads grouped instead
    where that repeat is transformers' ``repeat_kv``. ``scores_cast``: the scores are cast to this ONNX dtype before
    the softmax (T5's ``softmax(scores.float())``; the kernel runs where that is the dtype they have), and
    ``probs_cast`` the probabilities after it (``attn_weights.to(value.dtype)``). ``heads_shape`` and
    ``rows_shape``: the scores are reshaped to the first for the mask and back to the second (rank-3 operands,
    heads folded into the batch, as transformers' bmm attention writes them).
    """
    inputs = (query, key, value, mask, query_factor, key_factor, score_factor, key_expand, key_shape, value_expand,
              value_shape, heads_shape, rows_shape)
    kernel = _attention_kernel(B, *inputs, key_perm=key_perm, divide=divide, nan_to_zero=nan_to_zero,
                               scores_cast=scores_cast, probs_cast=probs_cast)
    if kernel is not None:
        return kernel(*inputs)
    key = _repeat_heads(B, key, key_expand, key_shape)
    value = _repeat_heads(B, value, value_expand, value_shape)
    kt = B.transpose(key, list(key_perm)) if key_perm else key
    scores = B.matmul(_scaled(B, query, query_factor, divide[0]), _scaled(B, kt, key_factor, divide[1]))
    scores = _scaled(B, scores, score_factor, divide[2])
    if heads_shape is not None:
        scores = reshape_14(B, scores, heads_shape)
    if mask is not None:
        scores = B.add(scores, mask)
    if rows_shape is not None:
        scores = reshape_14(B, scores, rows_shape)
    probs = B.softmax(B.astype(scores, np_dtype(scores_cast)) if scores_cast else scores, -1)
    probs = _zero_nan(B, probs) if nan_to_zero else probs
    return B.matmul(B.astype(probs, np_dtype(probs_cast)) if probs_cast else probs, value)


def _zero_nan(B: Any, x: Any) -> Any:
    return B.where(B.isnan(x), B.zeros((), B.dtype(x)), x)


@register("Silu", 1, FUSED_DOMAIN)
def silu_1(B: Any, x: Any) -> Any:
    """``Mul(x, Sigmoid(x))``: the SiLU as one backend call."""
    return B.silu(x)


def _takes_linear(B: Any, x: Any, weight: Any) -> bool:
    """Whether ``B.linear`` takes these operands: rows of x's floating dtype, the weight's."""
    return len(B.shape(x)) >= 2 and B.dtype(x) == B.dtype(weight) and np.issubdtype(B.dtype(x), np.floating)


def _linear_kernel(B: Any, x: Any, weight: Any, bias: Any, *, gelu: str = "") -> Any:
    """``B.linear`` itself for these shapes and dtypes, where it computes the node (else None): the op's checks,
    made once a signature, cost ~4 us a call beside a 16-row GEMM of ~50."""
    if not _takes_linear(B, x, weight) or (gelu and B.dtype(x) in _HALF):
        return None
    return functools.partial(B.linear, gelu=gelu or None)


@register("MatMulAdd", 1, FUSED_DOMAIN, specialise=_linear_kernel)
def matmul_add_1(B: Any, x: Any, weight: Any, bias: Any, *, gelu: str = "") -> Any:
    """``MatMul(x, weight) + bias``: a linear layer (``weight`` 2-D, ``bias`` 1-D of its width); with ``gelu``
    ("none": erf, or "tanh"), the GELU of it that followed it (``com.microsoft::Gelu`` / ``FastGelu``'s rule: a half
    one in float32, after the product)."""
    kernel = _linear_kernel(B, x, weight, bias, gelu=gelu)
    if kernel is not None:
        return kernel(x, weight, bias)
    y = B.linear(x, weight, bias) if _takes_linear(B, x, weight) else B.add(B.matmul(x, weight), bias)
    return y if not gelu else _gelu_erf(B, y) if gelu == "none" else _gelu_tanh(B, y)


def _rms_norm_kernel(B: Any, x: Any, weight: Any, *, epsilon: float, cast_to: int = 0) -> Any:
    """``B.rms_norm`` with the weight, a function of the op's inputs, where the Cast keeps x's dtype (else None)."""
    to = np_dtype(cast_to) if cast_to else None
    if (to is None or to == B.dtype(x)) and B.dtype(weight) == B.dtype(x) and len(B.shape(weight)) == 1:
        return lambda x, weight: B.rms_norm(x, weight, epsilon)
    return None


@register("RMSNorm", 1, FUSED_DOMAIN, specialise=_rms_norm_kernel)
def rms_norm_1(B: Any, x: Any, weight: Any, *, epsilon: float, cast_to: int = 0) -> Any:
    """``weight * Cast(x / sqrt(mean(x^2, -1) + epsilon), cast_to)`` (no Cast when ``cast_to`` is 0): the RMSNorm of
    the Llama family as exported, one kernel (``B.rms_norm``) where the Cast keeps the dtype."""
    kernel = _rms_norm_kernel(B, x, weight, epsilon=epsilon, cast_to=cast_to)
    if kernel is not None:
        return kernel(x, weight)
    to = np_dtype(cast_to) if cast_to else None
    y = B.rms_norm(x, None, epsilon)
    return B.multiply(weight, y if to is None else B.astype(y, to))


def _varies_by_channel(shape: tuple[int, ...], x_shape: tuple[int, ...]) -> bool:
    """Whether a ``shape`` operand multiplies (N, C, *S) ``x_shape`` channel by channel: (C,) on the channel axis."""
    padded = (1,) * (len(x_shape) - len(shape)) + tuple(shape)
    return len(padded) == len(x_shape) and padded[1] == x_shape[1] and math.prod(padded) == x_shape[1]


@register("GroupNorm", 1, FUSED_DOMAIN)
def group_norm_1(B: Any, x: Any, weight: Any, bias: Any = None, *, num_groups: int, epsilon: float) -> Any:
    """torch's GroupNorm as exported (``converters/fusion.py``): ``B.group_norm`` where ``weight`` and ``bias`` are
    per channel and of float32 ``x``'s dtype, else the chain: ``Reshape(x, (N, G, -1))``, the instance norm,
    ``Reshape`` back, ``* weight (+ bias)``."""
    shape = B.shape(x)
    vectors = [v for v in (weight, bias) if v is not None]
    if len(shape) >= 2 and B.dtype(x) == np.float32 and all(
        B.dtype(v) == np.float32 and _varies_by_channel(B.shape(v), shape) for v in vectors
    ):
        weight, bias = (None if v is None else B.reshape(v, (shape[1],)) for v in (weight, bias))
        return B.group_norm(x, num_groups, weight, bias, epsilon)
    groups = B.reshape(x, (shape[0], num_groups, -1))
    ones, zeros = (B.full((num_groups,), v, B.dtype(x)) for v in (1, 0))
    y = B.multiply(B.reshape(instance_normalization_1(B, groups, ones, zeros, epsilon=epsilon), shape), weight)
    return y if bias is None else B.add(y, bias)


def _with_padding(B: Any, x: Any, padding: np.ndarray, value: np.ndarray | None, axes: np.ndarray | None, mode: str,
                  conv: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """``x`` and the convolution's attributes after a ``Pad(x, padding, value, axes, mode)``: the padding joins the
    convolution's own where it is zeros on the spatial axes alone, else the ``Pad`` runs."""
    joined = _joined_padding(len(B.shape(x)), padding, value, axes, mode, conv)
    return (x, joined) if joined is not None else (pad_11(B, x, padding, value, axes, mode=mode), conv)


def _joined_padding(rank: int, padding: np.ndarray, value: np.ndarray | None, axes: np.ndarray | None, mode: str | bytes,
                    conv: dict[str, Any]) -> dict[str, Any] | None:
    """The convolution's attributes with a ``Pad``'s amounts added to its pads, where that ``Pad`` is zeros on the
    spatial axes of a rank-``rank`` input alone; else None."""
    amounts = [int(v) for v in np.asarray(padding).reshape(-1)]
    zeros = value is None or (np.size(value) == 1 and float(np.asarray(value).reshape(-1)[0]) == 0)
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if (mode == "constant" and zeros and axes is None and len(amounts) == 2 * rank and min(amounts, default=0) >= 0
            and amounts[:2] == amounts[rank:rank + 2] == [0, 0] and conv.get("auto_pad", "NOTSET") in ("NOTSET", b"NOTSET")):
        own = list(conv.get("pads") or [0] * (2 * rank - 4))
        spatial = amounts[2:rank] + amounts[rank + 2:]
        return {**conv, "pads": [a + b for a, b in zip(own, spatial)]}
    return None


def _fused_geometry(B: Any, x: Any, w: Any, z: Any, clip: list[float] | None,
                    conv: dict[str, Any]) -> tuple[Any, ...] | None:
    """``B.fused_conv``'s arguments after ``x, w, bias, add`` (clip bounds, strides, pads, dilations, groups) for
    ``x`` and ``w``'s shapes, where ``z`` is None or of the output's shape and dtype; else None."""
    kernel = B.shape(w)[2:]
    pads, strides, dilations, _ = spatial_pads(B.shape(x)[2:], kernel, conv.get("strides"), conv.get("dilations"),
                                               conv.get("pads"), conv.get("auto_pad", "NOTSET"))
    spans = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    shape = (B.shape(x)[0], B.shape(w)[0],
             *((n + lo + hi - span) // s + 1 for n, (lo, hi), span, s in zip(B.shape(x)[2:], pads, spans, strides)))
    if z is not None and (tuple(B.shape(z)) != shape or B.dtype(z) != B.dtype(x)):
        return None
    bounds = None if clip is None else (float(clip[0]), float(clip[1]))
    return bounds, strides, pads, dilations, conv.get("group", 1)


def _fused_conv_kernel(B: Any, x: Any, w: Any, b: Any = None, z: Any = None, padding: np.ndarray | None = None,
                       pad_value: np.ndarray | None = None, pad_axes: np.ndarray | None = None, *,
                       clip: list[float] | None = None, pad_mode: str = "constant", **conv: Any) -> Any:
    """``B.fused_conv`` with its geometry worked out once for a signature, where a ``Pad`` joins the convolution's
    padding (or there is none) and ``z`` fits; else None. MobileNetV2's 52 convolutions on torch: the op's Python,
    its padding and geometry at every call, was ~1 ms of a 10 ms call. Where the backend has no fused kernel the
    ops run one after the other, on the joined padding."""
    if padding is not None:
        conv = _joined_padding(len(B.shape(x)), padding, pad_value, pad_axes, pad_mode, conv)
        if conv is None:
            return None
    geometry = _fused_geometry(B, x, w, z, clip, conv)
    if geometry is None:
        return None

    def kernel(x: Any, w: Any, b: Any = None, z: Any = None, *static: Any) -> Any:
        y = B.fused_conv(x, w, b, z, *geometry)
        return y if y is not None else _conv_then_add_and_clip(B, x, w, b, z, clip, conv)

    return kernel


@register("FusedConv", 1, FUSED_DOMAIN, static_inputs=(4, 5, 6), specialise=_fused_conv_kernel)
def fused_conv_1(B: Any, x: Any, w: Any, b: Any = None, z: Any = None, padding: np.ndarray | None = None,
                 pad_value: np.ndarray | None = None, pad_axes: np.ndarray | None = None, *,
                 clip: list[float] | None = None, pad_mode: str = "constant", **conv: Any) -> Any:
    """A ``Pad`` of ``x`` (``padding``, ``pad_value``, ``pad_axes``, ``pad_mode``: its inputs and mode, where given),
    ``Conv`` (its attributes in ``conv``), then ``+ z`` and ``clip`` (min, max; (0, inf): ReLU) (``converters/
    fusion.py``, which also folds a per-channel scale and shift into ``w`` and ``b``): ``B.fused_conv`` where ``z``
    is the output's shape and dtype, else one op after the other."""
    if padding is not None:
        x, conv = _with_padding(B, x, padding, pad_value, pad_axes, pad_mode, conv)
    geometry = _fused_geometry(B, x, w, z, clip, conv)
    if geometry is not None:
        y = B.fused_conv(x, w, b, z, *geometry)
        if y is not None:
            return y
    return _conv_then_add_and_clip(B, x, w, b, z, clip, conv)


def _conv_then_add_and_clip(B: Any, x: Any, w: Any, b: Any, z: Any, clip: list[float] | None,
                            conv: dict[str, Any]) -> Any:
    """``FusedConv``'s ops one after the other: ``Conv`` (attributes ``conv``), ``+ z``, ``clip``."""
    y = conv_1(B, x, w, b, **conv)
    y = y if z is None else B.add(y, z)
    if clip is None:
        return y
    lo, hi = (None if math.isinf(v) else B.full((), v, B.dtype(y)) for v in (float(clip[0]), float(clip[1])))
    return clip_11(B, y, lo, hi)


def _half_bounds(bounds: list[Any], rank: int, width: int) -> bool:
    """Whether two Slices' (starts, ends, axes, steps) are ``[:width // 2]`` and ``[width // 2:]`` of the last axis."""
    try:  # run at every call: plain ints, no numpy arithmetic
        start1, end1, axis1, step1, start2, end2, axis2, step2 = (None if b is None else b.item() for b in bounds)
    except (AttributeError, ValueError):  # not one-element host arrays
        return False
    half = width // 2
    return (
        width % 2 == 0
        and axis1 in (-1, rank - 1) and axis2 in (-1, rank - 1)
        and step1 in (None, 1) and step2 in (None, 1)
        and slice(start1, end1).indices(width)[:2] == (0, half)
        and slice(start2, end2).indices(width)[:2] == (half, width)
    )


def _rotate_half_kernel(B: Any, x: Any, cos: Any, sin: Any, *bounds: Any) -> Any:
    """``B.rotate_half_embedding``, a function of the op's inputs, where the Slices take the halves of the last axis
    and nothing broadcasts x (else None)."""
    bounds = list(bounds) + [None] * (8 - len(bounds))
    shape = B.shape(x)
    if (shape and _half_bounds(bounds, len(shape), shape[-1]) and B.dtype(cos) == B.dtype(x) == B.dtype(sin)
            and _broadcasts_to(B.shape(cos), shape) and _broadcasts_to(B.shape(sin), shape)):
        return lambda x, cos, sin, *bounds: B.rotate_half_embedding(x, cos, sin)
    return None


@register("RotateHalfEmbedding", 1, FUSED_DOMAIN, static_inputs=tuple(range(3, 11)), specialise=_rotate_half_kernel)
def rotate_half_embedding_1(B: Any, x: Any, cos: Any, sin: Any, *bounds: Any) -> Any:
    """``x * cos + Concat(-Slice(x, *bounds[4:]), Slice(x, *bounds[:4]), -1) * sin``: the rotary embedding of the
    Llama family as exported (``bounds``: the Slices' starts, ends, axes, steps), one backend op
    (``B.rotate_half_embedding``) when the Slices take the halves of the last axis and nothing broadcasts x."""
    kernel = _rotate_half_kernel(B, x, cos, sin, *bounds)
    if kernel is not None:
        return kernel(x, cos, sin)
    bounds = list(bounds) + [None] * (8 - len(bounds))
    first, second = slice_10(B, x, *bounds[:4]), slice_10(B, x, *bounds[4:])
    rotated = B.concatenate([B.negative(second), first], -1)
    return B.add(B.multiply(x, cos), B.multiply(rotated, sin))
