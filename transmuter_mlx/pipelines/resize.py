"""PyTorch's ``interpolate`` (bilinear, bicubic; ``align_corners=False``) in numpy, for resizing a model's
output maps to the image's size as the transformers pipelines do, without torch at run time.

>>> x = np.arange(4, dtype=np.float32).reshape(2, 2)
>>> interpolate(x, (4, 4), "bilinear")[0].tolist()
[0.0, 0.25, 0.75, 1.0]
>>> interpolate(x, (3, 5), "bicubic").shape
(3, 5)
>>> nearest(x, (3, 3)).tolist()
[[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [2.0, 2.0, 3.0]]

The weights and the float32 arithmetic follow ATen's CPU kernel (``UpSampleKernel.cpp``: the generic
N-d loop with ``HelperInterpLinear`` / ``HelperInterpCubic``), as the x86-64 wheels compile it, with
fused multiply-adds: the source index is ``fma(scale, i + 0.5, -0.5)``, ``scale = in / out``
(bilinear clamps it at 0); bicubic takes Keys' kernel with ``A = -0.75`` over 4 neighbours clamped
to the edge. Each output is ``sum_j wy_j * (sum_i wx_i * x[y_j, x_i])``, the width first. Measured
against torch 2.13 (CPU): bilinear is bit-exact on model-sized maps (a 128x128 map to 480x640), a
few float32 ulps apart on tiny ones; bicubic is within a few ulps (about 1e-6 relative). ``nearest``
(mode "nearest", not "nearest-exact") picks whole pixels, bit-exact by construction.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["axis_weights", "interpolate", "nearest"]

Mode = Literal["bilinear", "bicubic"]
_F = np.float32
_A = _F(-0.75)


def interpolate(x: np.ndarray, size: tuple[int, int], mode: Mode) -> np.ndarray:
    """``x`` of shape ``(..., H, W)`` resized to ``size = (h, w)`` as
    ``torch.nn.functional.interpolate(x, size, mode=mode, align_corners=False)``; float32."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim < 2:
        raise ValueError(f"interpolate: expected an array of (..., height, width), got shape {x.shape}")
    height, width = (int(s) for s in size)
    if height <= 0 or width <= 0:
        raise ValueError(f"interpolate: the size must be positive, got {tuple(size)}")
    rows, row_weights = axis_weights(x.shape[-2], height, mode)
    cols, col_weights = axis_weights(x.shape[-1], width, mode)
    inner = _weighted_sum(x, cols, col_weights, -1, mode)  # (..., H, w)
    return _weighted_sum(inner, rows, row_weights, -2, mode)


def nearest(x: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``x`` of shape ``(..., H, W)`` (any dtype) resized to ``size = (h, w)`` as
    ``torch.nn.functional.interpolate(x, size, mode="nearest")``: source index ``floor(i * (in / out))`` in
    float32 (ATen's ``nearest_idx``: the same index when the size is kept, ``i >> 1`` when doubled)."""
    def index(in_size: int, out_size: int) -> np.ndarray:
        i = np.arange(out_size)
        if out_size in (in_size, 2 * in_size):
            return i if out_size == in_size else i >> 1
        scale = _F(in_size) / _F(out_size)
        return np.minimum(np.floor(i.astype(_F) * scale).astype(np.int64), in_size - 1)

    x = np.asarray(x)
    height, width = (int(s) for s in size)
    if x.ndim < 2 or height <= 0 or width <= 0:
        raise ValueError(f"nearest: expected an array of (..., height, width) and a positive size, got shape "
                         f"{x.shape} and size {tuple(size)}")
    return x[..., index(x.shape[-2], height)[:, None], index(x.shape[-1], width)[None, :]]


def axis_weights(in_size: int, out_size: int, mode: Mode) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and float32 weights of each output position along one axis: ``(out, taps)`` each."""
    if mode not in ("bilinear", "bicubic"):
        raise ValueError(f"interpolate: mode must be 'bilinear' or 'bicubic', got {mode!r}")
    if mode == "bilinear" and in_size == out_size:  # ATen copies: weights (1, 0) on the same index
        index = np.arange(out_size)
        return np.stack([index, index], axis=1), np.tile(np.array([1, 0], _F), (out_size, 1))
    scale = _F(in_size) / _F(out_size)
    source = _fma(scale, np.arange(out_size, dtype=_F) + _F(0.5), _F(-0.5))
    if mode == "bilinear":
        source = np.maximum(source, _F(0))
    index = np.minimum(np.floor(source).astype(np.int64), in_size - 1)
    t = np.clip(source - index.astype(_F), _F(0), _F(1))
    if mode == "bilinear":
        upper = index + (index < in_size - 1)
        return np.stack([index, upper], axis=1), np.stack([_F(1) - t, t], axis=1)
    taps = np.clip(index[:, None] + np.arange(-1, 3), 0, in_size - 1)
    one = _F(1)
    weights = np.stack([_cubic2(t + one), _cubic1(t), _cubic1(one - t), _cubic2((one - t) + one)], axis=1)
    return taps, weights


def _fma(a: np.ndarray | np.float32, b: np.ndarray | np.float32, c: np.ndarray | np.float32) -> np.ndarray:
    """``a * b + c`` rounded once to float32 (a float32 product is exact in float64)."""
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(_F)


def _cubic1(x: np.ndarray) -> np.ndarray:
    """Keys' kernel for |x| <= 1: ``((A + 2) x - (A + 3)) x x + 1``."""
    return ((_A + _F(2)) * x - (_A + _F(3))) * x * x + _F(1)


def _cubic2(x: np.ndarray) -> np.ndarray:
    """Keys' kernel for 1 < |x| < 2: ``((A x - 5A) x + 8A) x - 4A``, the first two steps fused."""
    return _fma(_fma(_A, x, -(_F(5) * _A)), x, _F(8) * _A) * x - _F(4) * _A


def _weighted_sum(x: np.ndarray, index: np.ndarray, weights: np.ndarray, axis: int, mode: Mode) -> np.ndarray:
    """``sum_k weights[:, k] * x.take(index[:, k], axis)`` as ATen sums it: bilinear as
    ``fma(t0, w0, t1 * w1)``, bicubic as ``t0 * w0`` then ``fma(tk, wk, sum)`` in tap order."""
    shape = [1] * x.ndim
    shape[axis] = -1
    taps = [(np.take(x, index[:, k], axis=axis), weights[:, k].reshape(shape)) for k in range(index.shape[1])]
    if mode == "bilinear":
        (t0, w0), (t1, w1) = taps
        return _fma(t0, w0, t1 * w1)
    total = taps[0][0] * taps[0][1]
    for t, w in taps[1:]:
        total = _fma(t, w, total)
    return total
