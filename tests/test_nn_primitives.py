"""The nn primitives (sliding_window, conv, conv_transpose, layer_norm, rms_norm) agree on all backends."""

from __future__ import annotations

import numpy as np
import pytest

from transmuter_mlx.converters.backends.mlx import MlxBackend
from transmuter_mlx.converters.backends.numpy import NumpyBackend
from transmuter_mlx.converters.backends.torch import TorchBackend

BACKENDS = [MlxBackend(), TorchBackend("cpu")]
HOST = NumpyBackend()
rng = np.random.default_rng(0)


def _check(fn, *arrays, atol=1e-4):
    want = fn(HOST, *arrays)
    for B in BACKENDS:
        got = B.to_numpy(fn(B, *(None if a is None else B.asarray(a) for a in arrays)))
        assert got.shape == want.shape and got.dtype == want.dtype, B.name
        np.testing.assert_allclose(got, want, atol=atol, rtol=1e-4, err_msg=B.name)


@pytest.mark.parametrize(
    "window,strides,dilations",
    [((3,), (2,), (1,)), ((2, 3), (1, 2), (2, 1)), ((2, 2, 2), (1, 1, 2), (1, 2, 1))],
)
def test_sliding_window(window, strides, dilations):
    x = rng.standard_normal((2, 3, *[7] * len(window))).astype(np.float32)
    _check(lambda B, a: B.sliding_window(a, window, strides, dilations), x)
    # a non-contiguous input
    _check(
        lambda B, a: B.sliding_window(B.transpose(a, (1, 0, *range(2, a.ndim))), window, strides, dilations),
        x,
    )


@pytest.mark.parametrize(
    "n,groups,strides,pads,dilations",
    [
        (1, 1, (2,), ((1, 2),), (1,)),
        (2, 2, (1, 2), ((0, 1), (2, 2)), (2, 1)),
        (3, 1, (1, 1, 2), ((1, 1),) * 3, (1, 2, 1)),
    ],
)
def test_conv(n, groups, strides, pads, dilations):
    x = rng.standard_normal((2, 4, *[6] * n)).astype(np.float32)
    w = rng.standard_normal((6, 4 // groups, *[3] * n)).astype(np.float32)
    _check(lambda B, a, b: B.conv(a, b, strides, pads, dilations, groups), x, w)


@pytest.mark.parametrize(
    "n,groups,strides,dilations", [(1, 1, (2,), (1,)), (2, 2, (2, 3), (1, 2)), (3, 1, (1, 2, 1), (2, 1, 1))]
)
def test_conv_transpose(n, groups, strides, dilations):
    x = rng.standard_normal((2, 4, *[4] * n)).astype(np.float32)
    w = rng.standard_normal((4, 3, *[3] * n)).astype(np.float32)
    _check(lambda B, a, b: B.conv_transpose(a, b, strides, dilations, groups), x, w)


@pytest.mark.parametrize("affine", [True, False])
def test_norms(affine):
    x = rng.standard_normal((3, 5, 8)).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32) if affine else None
    b = rng.standard_normal(8).astype(np.float32) if affine else None
    _check(lambda B, a, s, t: B.layer_norm(a, s, t, 1e-5), x, w, b)
    _check(lambda B, a, s: B.rms_norm(a, s, 1e-5), x, w)
