"""Integer matmul and convolution: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

The int32 accumulation is done exactly in float32: inputs minus zero points lie in [-255, 255],
so a sum of 256 products stays below 2**24, where float32 holds every integer. Longer reductions
are split into chunks of at most 256 terms whose int32 partial sums are then added. A constant weight
(``IntegerLinear``, fused from ``MatMulInteger``) is split where its own values need it, usually nowhere.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import TensorProto

from ._window import spatial_pads
from .fused import FUSED_DOMAIN
from .quantized import INT_RANGES, quantize_linear, saturate_int
from .quantized_contrib import cached_per_weight
from .registry import register

CHUNK = 256
F32 = np.dtype(np.float32)


def _centered(B: Any, x: Any, zero_point: Any, shape: tuple[int, ...] | None = None) -> Any:
    """``x - zero_point`` in float32; ``shape`` reshapes a zero point that is not a scalar."""
    xf = B.astype(x, F32)
    if zero_point is None:
        return xf
    zp = B.astype(zero_point, F32)
    if shape is not None and int(np.prod(B.shape(zp))) > 1:
        zp = B.reshape(zp, shape)
    elif int(np.prod(B.shape(zp))) == 1:
        zp = B.reshape(zp, ())
    return B.subtract(xf, zp)


def int_matmul(B: Any, a: Any, b: Any) -> Any:
    """Exact int32 ``a @ b`` of float32 operands holding integers in [-255, 255] (numpy matmul rules)."""
    va, vb = len(B.shape(a)) == 1, len(B.shape(b)) == 1
    a = B.expand_dims(a, [0]) if va else a
    b = B.expand_dims(b, [1]) if vb else b
    k = B.shape(a)[-1]
    if k <= CHUNK:
        out = B.astype(B.matmul(a, b), np.int32)
    else:
        c = -(-k // CHUNK)
        ra, rb = len(B.shape(a)), len(B.shape(b))
        a = B.pad(a, [(0, 0)] * (ra - 1) + [(0, c * CHUNK - k)], 0.0)
        b = B.pad(b, [(0, 0)] * (rb - 2) + [(0, c * CHUNK - k), (0, 0)], 0.0)
        a = B.reshape(a, B.shape(a)[:-1] + (c, CHUNK))  # (..., M, c, CHUNK)
        perm = list(range(ra + 1))
        perm[-3], perm[-2] = perm[-2], perm[-3]
        a = B.transpose(a, perm)  # (..., c, M, CHUNK)
        b = B.reshape(b, B.shape(b)[:-2] + (c, CHUNK, B.shape(b)[-1]))
        out = B.astype(B.sum(B.astype(B.matmul(a, b), np.int32), -3), np.int32)
    if va:
        out = B.squeeze(out, [-2])
    return B.squeeze(out, [-1]) if vb else out


def weight_chunks(B: Any, w: np.ndarray, zero_point: np.ndarray | None) -> list[tuple[int, int, Any]]:
    """A constant (K, N) integer weight minus its zero point (a scalar or one per column), float32, as ``(lo, hi,
    device weight)`` row ranges: the right operand of ``int_linear``.

    A range is as long as float32 stays exact for it: with ``|a| <= 255``, every partial sum of column n is at most
    ``255 * sum(|w[lo:hi, n]|)``, so ranges whose column sums stay within ``2**24 / 255`` give exact products in any
    summation order. A trained weight's codes are mostly small, so one range usually holds all of K (256 rows a
    range whatever the values took 4x the products for SmolLM2-135M, and as many more ops to compile).
    """
    wf = w.astype(F32)
    if zero_point is not None:
        wf -= np.asarray(zero_point, F32).reshape(-1)  # one value, or one a column
    return [(lo, hi, B.matmul_weight(wf[lo:hi], only_matmul=True)) for lo, hi in _exact_ranges(wf, float(2**24 // 255))]


def _exact_ranges(wf: np.ndarray, limit: float, block: int = 64) -> list[tuple[int, int]]:
    """Row ranges ``[lo, hi)`` of ``wf`` whose column sums of ``|wf|`` stay within ``limit``, each as long as it can
    be (one row always fits: 255 * 255 < 2**24), found ``block`` rows at a time: float64 sums of a block, not of the
    whole weight (Qwen3-0.6B's q8 head, 1024 x 151,936: 2.5 GB of float64 cumulative sums at load before).

    >>> _exact_ranges(np.array([[3.0, 1], [2, 2], [1, 4], [5, 0]]), 5.0, block=2)
    [(0, 2), (2, 3), (3, 4)]
    """
    k = wf.shape[0]
    bounds, lo, start = [], 0, 0
    running = np.zeros(wf.shape[1], np.float64)  # the column sums of |wf[lo:start]|, all within limit
    while start < k:
        stop = min(start + block, k)
        sums = np.cumsum(np.abs(wf[start:stop], dtype=np.float64), 0)
        sums += running
        fits = int(np.searchsorted(sums.max(1), limit, side="right"))  # sums grow row by row: a prefix fits
        if fits == stop - start:
            running, start = sums[-1], stop
            continue
        hi = max(start + fits, lo + 1)
        bounds.append((lo, hi))
        lo = start = hi
        running = np.zeros_like(running)
    if lo < k:
        bounds.append((lo, k))
    return bounds


def int_linear(B: Any, a: Any, chunks: list[tuple[int, int, Any]], as_float: bool = False) -> Any:
    """Exact int32 ``a @ w`` of ``a`` (..., M, K) by ``weight_chunks(w)``: one 2-D product a range (a batched product
    of equal chunks took torch's slow bmm paths: 2.5 ms for one of SmolLM2's layers at one row, 0.13 ms this way).
    ``as_float``: the int32 result cast to float32, as ONNX's ``Cast`` makes it."""
    if len(chunks) == 1:  # every partial sum exact, all below 2**24: the float32 product is that Cast already
        out = B.matmul(a, chunks[0][2])
        return out if as_float else B.astype(out, np.int32)
    rank, total = len(B.shape(a)), None
    for lo, hi, w in chunks:
        part = B.slice(a, [0] * (rank - 1) + [lo], list(B.shape(a)[:-1]) + [hi], [1] * rank)
        part = B.astype(B.matmul(part, w), np.int32)
        total = part if total is None else B.add(total, part)
    return B.astype(total, F32) if as_float else total


def int8_weight(B: Any, w: np.ndarray, zero_point: np.ndarray | None) -> tuple[Any, Any, Any] | None:
    """A constant (K, N) 8-bit weight for the backend's int8 GEMM (``int8_linear``), or None where it has none.

    With ``w - zw = w8 + cw`` (``w8 = w - 128`` for a uint8 weight, ``w`` for an int8 one; ``cw`` per column) and the
    input's ``a - za = a8 + ca`` likewise, the exact product is ``a8 @ w8 + ca * (colsum(w8) + K * cw) + rowsum(a8) *
    cw``: int8 operands and int32 sums, exact as the product itself (wrapping int32 arithmetic gives the true value
    wherever that fits in int32, as MatMulInteger's must). Returns ``(device w8, those column sums, cw or None)``.
    """
    shift = 128 if w.dtype == np.uint8 else 0
    w8 = (w.astype(np.int16) - shift).astype(np.int8)
    device = B.int8_matmul_weight(w8)
    if device is None:
        return None
    k, n = w.shape
    zw = np.zeros(n, np.int32) if zero_point is None else np.asarray(zero_point, np.int32).reshape(-1)
    cw = np.broadcast_to(shift - zw, (n,)).astype(np.int32)
    sums = (w8.astype(np.int32).sum(0) + k * cw).astype(np.int32)
    return device, B.asarray(sums), B.asarray(cw) if cw.any() else None


def int8_linear(B: Any, a: Any, a_shift: Any, weight: tuple[Any, Any, Any]) -> Any:
    """Exact int32 ``(a + a_shift) @ (w - zw)`` of an int8 ``a`` (..., M, K) by ``int8_weight(w, zw)``; ``a_shift``:
    an int32 scalar (``128 - za`` for a uint8 input turned int8), or None for 0."""
    w8, sums, cw = weight
    out = B.int8_matmul(a, w8)
    if a_shift is not None:
        out = B.add(out, B.multiply(a_shift, sums))
    if cw is not None:
        rows = B.astype(B.sum(B.astype(a, np.int32), -1, True), np.int32)  # torch sums int32 into int64
        out = B.add(out, B.multiply(rows, cw))
    return out


def int_conv(B: Any, x: Any, w: Any, pads: Any, strides: Any, dilations: Any, group: int) -> Any:
    """Exact int32 convolution of float32 operands holding integers in [-255, 255]."""
    (n, _, *space), (m, cg, *kernel) = B.shape(x), B.shape(w)
    step = max(1, CHUNK // int(np.prod(kernel)))  # exact while one input channel's window fits
    if cg <= step:
        return B.astype(B.conv(x, w, strides, pads, dilations, group), np.int32)
    xg = B.reshape(x, (n, group, cg, *space))
    total = None
    for lo in range(0, cg, step):
        hi = min(cg, lo + step)
        r = len(space)
        xs = B.slice(xg, [0, 0, lo] + [0] * r, [n, group, hi] + list(space), [1] * (3 + r))
        xs = B.reshape(xs, (n, group * (hi - lo), *space))
        ws = B.slice(w, [0, lo] + [0] * r, [m, hi] + list(kernel), [1] * (2 + r))
        part = B.astype(B.conv(xs, ws, strides, pads, dilations, group), np.int32)
        total = part if total is None else B.add(total, part)
    return total


def _centered_conv(
    B: Any, x: Any, x_zero_point: Any, w: Any, w_zero_point: Any, group: int, auto_pad: str, dilations: Any,
    kernel_shape: Any, pads: Any, strides: Any,
) -> Any:  # fmt: skip
    """The int32 convolution of ``x - x_zero_point`` by ``w - w_zero_point`` (zero points per output channel)."""
    kernel = list(kernel_shape or B.shape(w)[2:])
    pairs, strides, dilations, _ = spatial_pads(B.shape(x)[2:], kernel, strides, dilations, pads, auto_pad)
    wshape = (B.shape(w)[0],) + (1,) * (len(B.shape(w)) - 1)
    x, w = _centered(B, x, x_zero_point), _centered(B, w, w_zero_point, wshape)
    return int_conv(B, x, w, pairs, strides, dilations, group)


def _requantize(B: Any, acc: Any, multiplier: Any, y_zero_point: Any, out: np.dtype) -> Any:
    """``saturate(round(acc * multiplier) + y_zero_point)`` as ``out``."""
    y = B.multiply(B.astype(acc, F32), multiplier)
    if out not in INT_RANGES:  # float8 results: quantize on the host with unit scale
        return quantize_linear(B, y, B.full((), 1.0, F32), y_zero_point)
    y = B.round(y)
    if y_zero_point is not None:
        y = B.add(
            y, B.astype(B.reshape(y_zero_point, ()) if _size(B, y_zero_point) == 1 else y_zero_point, F32)
        )
    return saturate_int(B, y, out)


def _size(B: Any, v: Any) -> int:
    return int(np.prod(B.shape(v)))


def _row_param(B: Any, v: Any) -> Any:
    """A per-row (1-D, length M) parameter of the left operand, as an (M, 1) column."""
    return B.reshape(v, (_size(B, v), 1)) if len(B.shape(v)) == 1 and _size(B, v) > 1 else v


@register("MatMulInteger", 10)
def matmul_integer_10(B: Any, A: Any, Bm: Any, a_zero_point: Any = None, b_zero_point: Any = None) -> Any:
    a = _centered(B, A, None if a_zero_point is None else _row_param(B, a_zero_point))
    return int_matmul(B, a, _centered(B, Bm, b_zero_point))


def _integer_linear_kernel(B: Any, A: Any, W: np.ndarray, a_zero_point: Any = None, w_zero_point: Any = None,
                           to: int = TensorProto.INT32) -> Any:
    """``IntegerLinear`` as a function of its inputs that holds the weight as the backend multiplies it fastest (made
    once per weight): its int8 GEMM where it has one (``int8_linear``), else float32 ranges (``int_linear``); None
    where the general MatMulInteger must run (a left operand of one axis)."""
    if len(B.shape(A)) < 2:
        return None
    as_float = to == TensorProto.FLOAT
    one_zero_point = a_zero_point is None or math.prod(B.shape(a_zero_point)) == 1
    int8_plan = one_zero_point and cached_per_weight(B, (W, w_zero_point), ("int8-linear",),
                                                     lambda: int8_weight(B, W, w_zero_point))
    if int8_plan:
        uint8 = B.dtype(A) == np.uint8
        flip = B.full((), 128, np.uint8)  # a uint8 code with its top bit flipped is the int8 code minus 128
        shift = B.full((), 128, np.int32)

        def int8_kernel(A: Any, W: Any, a_zero_point: Any = None, w_zero_point: Any = None) -> Any:
            a, a_shift = (B.bitcast(B.bitwise_xor(A, flip), np.int8), shift) if uint8 else (A, None)
            if a_zero_point is not None:
                za = B.astype(B.reshape(a_zero_point, ()), np.int32)
                a_shift = B.negative(za) if a_shift is None else B.subtract(a_shift, za)
            out = int8_linear(B, a, a_shift, int8_plan)
            return B.astype(out, F32) if as_float else out

        return int8_kernel
    chunks = cached_per_weight(B, (W, w_zero_point), ("integer-linear",), lambda: weight_chunks(B, W, w_zero_point))

    def kernel(A: Any, W: Any, a_zero_point: Any = None, w_zero_point: Any = None) -> Any:
        a = _centered(B, A, None if a_zero_point is None else _row_param(B, a_zero_point))
        return int_linear(B, a, chunks, as_float)

    return kernel


@register("IntegerLinear", 1, FUSED_DOMAIN, static_inputs=(1, 3), specialise=_integer_linear_kernel)
def integer_linear_1(B: Any, A: Any, W: np.ndarray, a_zero_point: Any = None, w_zero_point: Any = None,
                     to: int = TensorProto.INT32) -> Any:
    """MatMulInteger by a constant 2-D weight, and the ``Cast`` to float32 after it where ``to`` says so
    (``converters/fusion.py``): the same result, with the weight prepared once (``_integer_linear_kernel``;
    onnxruntime's ``quantize_dynamic`` layers: converting the whole weight at every call made SmolLM2-135M's q8
    decode 5x slower than its fp32 export's)."""
    kernel = _integer_linear_kernel(B, A, W, a_zero_point, w_zero_point, to)
    if kernel is not None:
        return kernel(A, W, a_zero_point, w_zero_point)
    out = matmul_integer_10(B, A, B.asarray(W), a_zero_point, None if w_zero_point is None else B.asarray(w_zero_point))
    return B.astype(out, F32) if to == TensorProto.FLOAT else out


@register("ConvInteger", 10)
def conv_integer_10(
    B: Any,
    x: Any,
    w: Any,
    x_zero_point: Any = None,
    w_zero_point: Any = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: Any = None,
    group: int = 1,
    kernel_shape: Any = None,
    pads: Any = None,
    strides: Any = None,
) -> Any:
    geometry = (auto_pad, dilations, kernel_shape, pads, strides)
    return _centered_conv(B, x, x_zero_point, w, w_zero_point, group, *geometry)


def _multiplier(B: Any, *scales: Any) -> Any:
    """``s0 * s1 / s2`` in the scales' own precision, as float32 (as the reference computes it)."""
    m = B.divide(B.multiply(scales[0], scales[1]), scales[2])
    return B.astype(m, F32)


def qlinear_matmul(
    B: Any, a: Any, a_scale: Any, a_zero_point: Any, b: Any, b_scale: Any, b_zero_point: Any,
    y_scale: Any, y_zero_point: Any = None,
) -> Any:  # fmt: skip
    """Requantized integer matmul; per-row ``a`` and per-column ``b`` parameters are 1-D."""
    out = np.dtype(B.dtype(y_zero_point) if y_zero_point is not None else B.dtype(a))
    if np.dtype(B.dtype(a)) in INT_RANGES and np.dtype(B.dtype(b)) in INT_RANGES:
        acc = int_matmul(B, _centered(B, a, _row_param(B, a_zero_point)), _centered(B, b, b_zero_point))
    else:  # float8 operands: their zero points are zero
        acc = B.matmul(B.astype(a, F32), B.astype(b, F32))
    return _requantize(B, acc, _multiplier(B, _row_param(B, a_scale), b_scale, y_scale), y_zero_point, out)


register("QLinearMatMul", 10)(qlinear_matmul)
register("QLinearMatMul", 21)(qlinear_matmul)


@register("QLinearConv", 10)
def qlinear_conv_10(
    B: Any, x: Any, x_scale: Any, x_zero_point: Any, w: Any, w_scale: Any, w_zero_point: Any,
    y_scale: Any, y_zero_point: Any = None, bias: Any = None, *, auto_pad: str = "NOTSET",
    dilations: Any = None, group: int = 1, kernel_shape: Any = None, pads: Any = None, strides: Any = None,
) -> Any:  # fmt: skip
    """Integer convolution plus int32 bias, requantized with per-tensor or per-output-channel ``w_scale``."""
    geometry = (auto_pad, dilations, kernel_shape, pads, strides)
    acc = _centered_conv(B, x, x_zero_point, w, w_zero_point, group, *geometry)
    r = len(B.shape(x))
    if bias is not None:
        acc = B.add(acc, B.reshape(B.astype(bias, np.int32), (1, -1) + (1,) * (r - 2)))
    if _size(B, w_scale) > 1:
        w_scale = B.reshape(w_scale, (1, -1) + (1,) * (r - 2))
    out = np.dtype(B.dtype(y_zero_point) if y_zero_point is not None else B.dtype(x))
    return _requantize(B, acc, _multiplier(B, x_scale, w_scale, y_scale), y_zero_point, out)
