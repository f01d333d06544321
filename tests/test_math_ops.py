"""Math primitives (argsort, det, bitcast) agree on numpy, mlx and torch; math ops on edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from transmuter_mlx.converters.backends import get_backend
from transmuter_mlx.converters.ops.linalg import gemm_7, matmul_1
from transmuter_mlx.converters.ops.reduce import _reduce, topk_11

DEVICES = ["mlx", "torch"]


def _run(name: str, method: str, *args, **kwargs) -> np.ndarray:
    B = get_backend(name)
    return B.to_numpy(getattr(B, method)(*[B.asarray(a) for a in args], **kwargs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_argsort_is_stable(device, dtype):
    x = np.random.default_rng(0).integers(0, 3, (4, 200)).astype(dtype)
    for axis in (0, 1, -1):
        got = _run(device, "argsort", x, axis=axis)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, _run("numpy", "argsort", x, axis=axis))


@pytest.mark.parametrize("device", DEVICES)
def test_det(device):
    x = np.random.default_rng(1).standard_normal((3, 2, 4, 4)).astype(np.float32)
    x[0, 0] = np.eye(4)[[1, 0, 2, 3]]  # one row swap: det -1
    want = _run("numpy", "det", x)
    got = _run(device, "det", x)
    assert got.dtype == np.float32 and got.shape == (3, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert got[0, 0] == pytest.approx(-1.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("src", "dst"), [(np.float32, np.int32), (np.int8, np.uint8), (np.float16, np.int16)]
)
def test_bitcast(device, src, dst):
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(src)
    got = _run(device, "bitcast", x, dtype=np.dtype(dst))
    np.testing.assert_array_equal(got, x.view(dst))


@pytest.mark.parametrize("device", ["numpy", *DEVICES])
def test_integer_matmul_and_gemm(device):
    B = get_backend(device)
    rng = np.random.default_rng(3)
    a, b = rng.integers(-9, 9, (2, 3, 4)).astype(np.int32), rng.integers(-9, 9, (4, 5)).astype(np.int32)
    v = rng.integers(-9, 9, (4,)).astype(np.int32)
    for x, y in ((a, b), (v, b), (a, v), (v, v)):
        got = B.to_numpy(matmul_1(B, B.asarray(x), B.asarray(y)))
        np.testing.assert_array_equal(got, np.matmul(x, y))
    c = rng.integers(-9, 9, (5,)).astype(np.int32)
    got = B.to_numpy(gemm_7(B, B.asarray(a[0].T), B.asarray(b), B.asarray(c), transA=1))
    np.testing.assert_array_equal(got, a[0] @ b + c)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_set_reductions(device):
    B = get_backend(device)
    x = B.asarray(np.zeros((2, 0, 3), np.float32))
    got = B.to_numpy(_reduce(B, "max", x, np.array([1]), 1, 0))
    np.testing.assert_array_equal(got, np.full((2, 1, 3), -np.inf, np.float32))
    got = B.to_numpy(_reduce(B, "prod", x, np.array([1]), 0, 0))
    np.testing.assert_array_equal(got, np.ones((2, 3), np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_topk_ties_take_the_lower_index(device):
    B = get_backend(device)
    x = np.array([[3, 1, 3, 2, 1, 3]], np.float32)
    values, indices = topk_11(B, B.asarray(x), np.array([4]), largest=1)
    np.testing.assert_array_equal(B.to_numpy(indices), [[0, 2, 5, 3]])
    values, indices = topk_11(B, B.asarray(x), np.array([3]), largest=0)
    np.testing.assert_array_equal(B.to_numpy(indices), [[1, 4, 3]])
    np.testing.assert_array_equal(B.to_numpy(values), [[1, 1, 2]])
