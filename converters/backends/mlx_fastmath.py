"""Transcendental functions from plain MLX arithmetic, for MLX's CPU device.

The Linux ``mlx[cpu]`` wheel evaluates ``mx.exp``, ``mx.erf``, ``mx.tanh``, ``mx.sigmoid`` and
``mx.softmax`` one element at a time (its x86-64 build has no vector type, ``simd::max_size`` is
1) and calls libm's ``fmaf`` for every term of their polynomials: ~45 ns per element for exp,
~80 ns for erf, against ~0.5 ns for an add. Built from adds, multiplies, clamps and integer bit
operations instead, the same functions run at the speed of those, and inside ``mx.compile`` the
whole formula fuses into one generated kernel.

Each function takes a float32, float16 or bfloat16 array (half types are computed in float32
and rounded back) and matches the native function's special values: NaN propagates,
``exp(-inf) = 0``, ``exp(x > 88.72) = inf``, ``erf(±inf) = ±1``, ``tanh`` saturates to ±1 and
``sigmoid`` of a large negative is 0. Accuracies (float32, against float64) are in the docstrings
and asserted by ``tests/test_fast_math.py``. ``applies(x)`` tells whether the backend should use
these: only on the CPU device, for floating-point arrays of at most 32 bits.

    >>> import mlx.core as mx
    >>> from transmuter_mlx.converters.backends import mlx_fastmath as fm
    >>> fm.exp(mx.array([0.0, 1.0])).tolist()
    [1.0, 2.7182817459106445]
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import mlx.core as mx

_FLOATS = (mx.float32, mx.float16, mx.bfloat16)

# exp: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, and Cephes' expf polynomial
# (exp(r) = 1 + r + r^2 P(r)); 2^n is built in the exponent bits.
_LOG2E = 1.4426950408889634
_ROUND = 12582912.0  # 1.5 * 2^23: t + _ROUND rounds t (|t| < 2^22) to an integer kept in the low bits
_ROUND_BITS = 0x4B400000  # the bits of _ROUND as a float32
_LN2_HI = 0.693359375  # 9 significant bits: n * _LN2_HI is exact for |n| < 2^15
_LN2_LO = -2.12194440e-4
_EXP_P = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)
_EXP_LO, _EXP_HI = -104.0, 89.0  # exp(-104) rounds to 0 and exp(89) overflows in float32

# erf: N. Juffa's erff (also MLX's Metal erf): x + x P(x^2) up to 0.927734375, and above it
# 1 - exp(t q - t) with t = |x|, q = ((HI0 t + HI1) t^2 + MID0 t + MID1), then Horner in t over LO
_ERF_SPLIT = 0.927734375
_ERF_P = (-5.96761703e-4, 4.99119423e-3, -2.67681349e-2, 1.12819925e-1, -3.76125336e-1, 1.28379166e-1)
_ERF_Q_HI = (-1.72853470e-5, 3.83197126e-4)
_ERF_Q_MID = (-3.88396438e-3, 2.42546219e-2)
_ERF_Q_LO = (-1.06777877e-1, -6.34846687e-1, -1.28717512e-1)
_ERF_HI = 4.0  # erf(4) rounds to 1 in float32
_SQRT1_2 = 0.7071067811865476

# tanh: Cephes' tanhf, an odd polynomial below 0.625 and 1 - 2 / (exp(2|x|) + 1) above
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
_TANH_SPLIT = 0.625
_TANH_HI = 10.0  # tanh(x > 9.02) rounds to 1 in float32
_SIGN = -0x80000000  # the float32 sign bit, as an int32


def applies(x: mx.array) -> bool:
    """Whether to use these functions for ``x``: on the CPU device and a float of <= 32 bits."""
    return x.dtype in _FLOATS and mx.default_device() == mx.cpu


def _in_float32(fn: Callable[..., mx.array]) -> Callable[..., mx.array]:
    """``fn`` traced by ``mx.compile`` (one per static-argument tuple), run in float32.

    Compiled, the formula runs as a few fused kernels, also when called eagerly; inside an outer
    ``mx.compile`` the trace is inlined."""

    @functools.cache
    def compiled(*static: Any) -> Callable[[mx.array], mx.array]:
        return mx.compile(lambda x: fn(x, *static))

    @functools.wraps(fn)
    def wrapped(x: mx.array, *static: Any) -> mx.array:
        static = tuple(tuple(a) if isinstance(a, list) else a for a in static)  # hashable axes
        if x.dtype == mx.float32:
            return compiled(*static)(x)
        return compiled(*static)(x.astype(mx.float32)).astype(x.dtype)

    return wrapped


def _contiguous(x: mx.array) -> mx.array:
    """``x`` in row-major order (a no-op where it is): the formulas below read their input in several fused
    kernels, and a strided view (a transpose's) read so is slow: SegFormer-b0's eight GELUs, whose inputs are
    transposed views, took 371-378 ms of a call on mlx's CPU walked op by op, 99-131 ms with the copy first."""
    return mx.contiguous(x)


def _horner(x: mx.array, coefficients: tuple[float, ...]) -> mx.array:
    p = x * coefficients[0] + coefficients[1]
    for c in coefficients[2:]:
        p = p * x + c
    return p


def _pow2(n: mx.array) -> mx.array:
    """2^n as float32 for int32 ``n`` in [-126, 127]."""
    return ((n + 127) << 23).view(mx.float32)


def _select(mask: mx.array, a: mx.array, b: mx.array) -> mx.array:
    """``mx.where(mask, a, b)`` for float32 ``a``, ``b`` of ``mask``'s shape, as bit operations: the
    CPU's eager ``where`` is ~10x slower than an add (compiled, both fuse)."""
    m = -mask.astype(mx.int32)  # all ones where mask
    return ((a.view(mx.int32) & m) | (b.view(mx.int32) & ~m)).view(mx.float32)


def _copysign(a: mx.array, b: mx.array) -> mx.array:
    """|a| with the sign of ``b``, for float32 ``a`` >= 0 (or -0, NaN)."""
    return ((a.view(mx.int32) & ~_SIGN) | (b.view(mx.int32) & _SIGN)).view(mx.float32)


def _exp_reduced(x: mx.array) -> tuple[mx.array, mx.array]:
    """(exp(r), n) with x = n ln2 + r, for float32 ``x`` in [_EXP_LO, _EXP_HI] (or NaN)."""
    k = x * _LOG2E + _ROUND
    n = k - _ROUND
    r = (x - n * _LN2_HI) - n * _LN2_LO
    y = (_horner(r, _EXP_P) * (r * r) + r) + 1.0
    return y, k.view(mx.int32) - _ROUND_BITS


def _exp32(x: mx.array) -> mx.array:
    y, n = _exp_reduced(mx.clip(x, _EXP_LO, _EXP_HI))
    half = n >> 1  # 2^n in two normal factors, so that results below 2^-126 round once into subnormals
    return y * _pow2(half) * _pow2(n - half)


@_in_float32
def exp(x: mx.array) -> mx.array:
    """e^x. float32, against float64 over 33.5M inputs (every 128th bit pattern): max error
    0.97 ulp (relative 7.9e-8) for normal results; subnormal results within 1.4e-45. Unlike
    ``mx.exp`` (0 below -88, inf above 88) it follows float32's own range."""
    return _exp32(x)


@_in_float32
def erf(x: mx.array) -> mx.array:
    """The error function. float32, against float64 (same sweep as ``exp``): max error 1.13 ulp
    (relative 9.3e-8, absolute 6.8e-8); ``mx.erf`` has an absolute error of 1.5e-7 and returns 0
    for |x| < 2^-126."""
    return _erf32(_contiguous(x))


@_in_float32
def gelu(x: mx.array) -> mx.array:
    """The exact GELU ``x / 2 * (1 + erf(x / sqrt(2)))`` with ``erf`` above, traced as one formula."""
    x = _contiguous(x)
    return x * (_erf32(x * _SQRT1_2) + 1.0) * 0.5


def _erf32(x: mx.array) -> mx.array:
    x = mx.clip(x, -_ERF_HI, _ERF_HI)
    s = x * x
    small = _horner(s, _ERF_P) * x + x
    t = mx.abs(x)
    q = (t * _ERF_Q_HI[0] + _ERF_Q_HI[1]) * s + (t * _ERF_Q_MID[0] + _ERF_Q_MID[1])
    for c in _ERF_Q_LO:
        q = q * t + c
    y, n = _exp_reduced(q * t - t)  # in [-17, -1.02]: one scale factor
    large = _copysign(1.0 - y * _pow2(n), x)
    return _select(t > _ERF_SPLIT, large, small)


@_in_float32
def tanh(x: mx.array) -> mx.array:
    """Hyperbolic tangent. float32, against float64 (same sweep as ``exp``): max error 1.25 ulp
    (relative 1.3e-7)."""
    x = _contiguous(x)
    a = mx.abs(x)
    small = mx.minimum(a, _TANH_SPLIT)
    z = small * small
    small = _horner(z, _TANH_P) * z * small + small
    y, n = _exp_reduced(mx.minimum(a, _TANH_HI) * 2.0)
    large = 1.0 - 2.0 / (y * _pow2(n) + 1.0)
    return _copysign(_select(a < _TANH_SPLIT, small, large), x)


@_in_float32
def sigmoid(x: mx.array) -> mx.array:
    """1 / (1 + e^-x). float32, against float64 (same sweep as ``exp``): max error 2.42 ulp
    (relative 1.5e-7) for results above 2^-126; like ``mx.sigmoid``, 0 below x = -88.7."""
    return 1.0 / (_exp32(-x) + 1.0)


@_in_float32
def softmax(x: mx.array, axis: int) -> mx.array:
    """exp(x - max) / sum, along ``axis``."""
    e = _exp32(x - mx.max(x, axis=axis, keepdims=True))
    return e * mx.reciprocal(mx.sum(e, axis=axis, keepdims=True))


@_in_float32
def logsumexp(x: mx.array, axis: int | tuple[int, ...] | None, keepdims: bool) -> mx.array:
    """log(sum(exp(x))) along ``axis``, shifted by the max (0 where the max is infinite)."""
    m = mx.max(x, axis=axis, keepdims=True)
    m = mx.where(mx.isinf(m), 0.0, m)
    out = mx.log(mx.sum(_exp32(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else mx.squeeze(out, axis=axis)
