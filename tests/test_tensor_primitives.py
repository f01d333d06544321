"""The scatter primitives agree on the numpy, mlx and torch backends (numpy is the reference)."""

from __future__ import annotations

import numpy as np
import pytest

from transmuter_mlx.converters.backends import get_backend

DEVICES = ["mlx", "torch"]
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def _run(name: str, method: str, *args, **kwargs) -> np.ndarray:
    B = get_backend(name)
    conv = [
        B.asarray(a) if isinstance(a, np.ndarray) else [B.asarray(i) for i in a] if isinstance(a, list) else a
        for a in args
    ]
    return B.to_numpy(getattr(B, method)(*conv, **kwargs))


def _along_axis_index(
    rng: np.random.Generator, shape: tuple[int, ...], axis: int, k: int, unique: bool
) -> np.ndarray:
    """``k`` indices along ``axis`` per row; distinct for "none", which leaves duplicates' winner open."""
    if unique:
        return np.take(np.argsort(rng.random(shape), axis=axis), np.arange(k), axis=axis)
    out_shape = list(shape)
    out_shape[axis] = k
    return rng.integers(0, shape[axis], out_shape)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scatter_along_axis(device, reduction, dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(-5, 5, (5, 3, 4)).astype(dtype)
    for axis in (0, 1, -1):
        idx = _along_axis_index(rng, x.shape, axis, 3, reduction == "none")
        upd = rng.integers(-5, 5, idx.shape).astype(dtype)
        want = _run("numpy", "scatter_along_axis", x, idx, upd, axis, reduction)
        got = _run(device, "scatter_along_axis", x, idx, upd, axis, reduction)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype == x.dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_index_update(device, reduction):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    if reduction == "none":
        flat = rng.permutation(20)[:6]
        index = [flat // 5, flat % 5]
    else:
        index = [rng.integers(0, 4, (6,)), rng.integers(0, 5, (6,))]
    upd = rng.standard_normal((6, 3)).astype(np.float32)
    want = _run("numpy", "index_update", x, index, upd, reduction)
    got = _run(device, "index_update", x, index, upd, reduction)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # broadcast index arrays over the leading axes, full-element updates
    index = [rng.integers(0, 4, (3, 1)), rng.integers(0, 5, (1, 2)), np.array([0, 2])]
    upd = rng.standard_normal((3, 2)).astype(np.float32)
    if reduction != "none":
        want = _run("numpy", "index_update", x, index, upd, reduction)
        got = _run(device, "index_update", x, index, upd, reduction)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_numpy_index_update_does_not_modify_input():
    B = get_backend("numpy")
    x = np.zeros((3,), np.float32)
    B.index_update(x, [np.array([1])], np.array([2.0], np.float32), "none")
    assert not x.any()
