"""mlx_fastmath (exp, erf, tanh, sigmoid, softmax, logsumexp on MLX's CPU device) against float64.

Errors are measured in float32 ulps of the float64 reference (``|y - ref| / spacing(float32(ref))``)
over a sweep of float32 bit patterns, dense grids where the functions bend, random values and the
special values; subnormal results are checked in absolute terms.
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest

from transmuter_mlx.converters.backends import get_backend
from transmuter_mlx.converters.backends import mlx_fastmath as fm

TINY = float(np.finfo(np.float32).tiny)
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, TINY, -TINY, 1e-30, 0.625, -0.625,
           0.927734375, -0.927734375, 4.0, -4.0, 9.0, 10.0, -10.0, 88.72, 88.73, -87.33, -103.9, -104.0,
           -200.0, 200.0, 3.4e38, -3.4e38]  # fmt: skip


def _erf64(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


# name -> (float64 reference, max ulps for normal results, max abs error where the result is subnormal)
FUNCTIONS = {
    "exp": (np.exp, 1.0, 1.5e-45),
    "erf": (_erf64, 1.5, 1.5e-45),
    "tanh": (np.tanh, 1.5, 1.5e-45),
    "sigmoid": (_sigmoid64, 2.5, TINY),  # like mx.sigmoid, 0 below x = -88.7
}


def _inputs(name: str) -> np.ndarray:
    bits = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)  # every 4099th float32
    rng = np.random.default_rng(0)
    parts = [
        bits.view(np.float32),
        np.asarray(SPECIAL, np.float32),
        rng.standard_normal(100_000).astype(np.float32),
    ]
    lo, hi = {"exp": (-105, 90), "erf": (-4.5, 4.5), "tanh": (-10, 10), "sigmoid": (-105, 90)}[name]
    parts.append(np.linspace(lo, hi, 400_001, dtype=np.float32))
    parts.append(np.linspace(-1, 1, 200_001, dtype=np.float32))
    x = np.concatenate(parts)
    return x[~np.isnan(x) | (np.arange(x.size) < 1)]  # sweep NaNs are all alike: keep one


def _errors(y: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ref32 = ref.astype(np.float32)
    y64 = y.astype(np.float64)
    finite = np.isfinite(ref32)
    normal = finite & (np.abs(ref) >= TINY)
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(y64 - ref), 0.0)
        ulps = np.where(normal, err / np.spacing(np.abs(ref32)).astype(np.float64), 0.0)
    return ulps, np.where(normal, 0.0, err), finite


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_float32_accuracy(name):
    reference, max_ulps, max_subnormal = FUNCTIONS[name]
    x = _inputs(name)
    y = np.asarray(getattr(fm, name)(mx.array(x)))
    with np.errstate(over="ignore", invalid="ignore"):
        ref = reference(x.astype(np.float64))
    with np.errstate(over="ignore"):
        ulps, sub, finite = _errors(y, ref)
    assert ulps.max() <= max_ulps, f"{name}: {ulps.max():.2f} ulp at x={x[ulps.argmax()]!r}"
    assert sub.max() <= max_subnormal, f"{name}: abs error {sub.max():.3g} at x={x[sub.argmax()]!r}"
    # overflow, infinities and NaN: exactly what float32 rounding of the reference gives
    with np.errstate(over="ignore"):
        ref32 = ref.astype(np.float32)
    np.testing.assert_array_equal(y[~finite], ref32[~finite])


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_special_values(name):
    reference = FUNCTIONS[name][0]
    x = np.asarray(SPECIAL, np.float32)
    y = np.asarray(getattr(fm, name)(mx.array(x)))
    with np.errstate(over="ignore", invalid="ignore"):
        ref = reference(x.astype(np.float64)).astype(np.float32)
    if name == "sigmoid":
        ref[x < -88.7] = 0.0  # flushed like mx.sigmoid
    np.testing.assert_allclose(y, ref, rtol=3e-7, atol=0)
    assert np.array_equal(np.isnan(y), np.isnan(x))
    assert np.array_equal(np.signbit(y[y == 0]), np.signbit(ref[y == 0])) or name == "sigmoid"


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_half_types_round_the_float32_result(name, dtype):
    x = mx.array(np.linspace(-12, 12, 5001, dtype=np.float32)).astype(dtype)
    y = getattr(fm, name)(x)
    assert y.dtype == dtype
    want = getattr(fm, name)(x.astype(mx.float32)).astype(dtype)
    assert mx.array_equal(y, want, equal_nan=True).item()


def test_compiled_matches_eager():
    x = mx.array(np.linspace(-110, 110, 100_001, dtype=np.float32))
    for name in FUNCTIONS:
        fn = getattr(fm, name)
        assert mx.array_equal(mx.compile(fn)(x), fn(x), equal_nan=True).item(), name


@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax_and_logsumexp(axis):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 64, 96)) * 20).astype(np.float32)
    x[0, :, :5] = -np.inf  # masked positions
    x[1, 3, :] = -3.4e38
    m = x.max(axis=axis, keepdims=True)
    # the reference starts from x - max rounded to float32, as the float32 functions do
    with np.errstate(invalid="ignore"):
        e = np.exp((x - m).astype(np.float64))
    got = np.asarray(fm.softmax(mx.array(x), axis))
    np.testing.assert_allclose(got, e / e.sum(axis=axis, keepdims=True), rtol=1e-6, atol=1e-37)
    got = np.asarray(fm.logsumexp(mx.array(x), axis, False))
    m = np.where(np.isinf(m), 0, m)  # all -inf: log(0) = -inf, not NaN
    with np.errstate(divide="ignore"):
        want = (np.log(np.exp((x - m).astype(np.float64)).sum(axis=axis, keepdims=True)) + m).squeeze(axis)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_logsumexp_infinite_rows():
    x = mx.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 1.0]], dtype=mx.float32)
    got = np.asarray(fm.logsumexp(x, 1, True))
    np.testing.assert_array_equal(got[:, 0], [-np.inf, np.inf, np.nan])


def test_mlx_backend_uses_them_on_the_cpu_only():
    B = get_backend("mlx")
    x = mx.array(np.linspace(-5, 5, 101, dtype=np.float32))
    assert fm.applies(x) == (mx.default_device() == mx.cpu)
    assert not fm.applies(x.astype(mx.int32))
    if fm.applies(x):
        for name in FUNCTIONS:
            assert mx.array_equal(getattr(B, name)(x), getattr(fm, name)(x)).item(), name
    if mx.metal.is_available():
        with mx.stream(mx.gpu):
            assert not fm.applies(x)
