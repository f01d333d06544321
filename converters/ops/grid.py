"""GridSample (2-D and N-D; nearest, linear, cubic; zeros, border, reflection), AffineGrid, RoiAlign.

The sampling positions are data, so the taps are computed on the device: per spatial axis a few
tap indices and weights, combined over the axes into one gather of the flattened input.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .registry import register

_MODES = {"bilinear": "linear", "bicubic": "cubic"}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _const(B: Any, v: float, dtype: Any) -> Any:
    return B.asarray(np.asarray(v, dtype))


def _reflect(B: Any, x: Any, lo: float, hi: float, dt: Any) -> Any:
    """Reflect ``x`` at the borders ``lo``/``hi`` until it lies between them."""
    span = hi - lo
    below = B.less(x, _const(B, lo, dt))
    dx = B.where(below, B.subtract(_const(B, lo, dt), x), B.subtract(x, _const(B, hi, dt)))
    flips = B.floor(B.divide(dx, _const(B, span, dt)))
    r = B.subtract(dx, B.multiply(flips, _const(B, span, dt)))
    even = B.equal(B.remainder(flips, _const(B, 2, dt)), _const(B, 0, dt))
    from_lo, from_hi = B.add(_const(B, lo, dt), r), B.subtract(_const(B, hi, dt), r)
    inside = B.logical_and(B.greater_equal(x, _const(B, lo, dt)), B.less_equal(x, _const(B, hi, dt)))
    return B.where(
        inside, x, B.where(below, B.where(even, from_lo, from_hi), B.where(even, from_hi, from_lo))
    )


def _cubic(B: Any, t: Any, dt: Any) -> list[Any]:
    """Keys cubic weights (a = -0.75) of the taps at -1, 0, 1, 2 for the fraction ``t``."""
    a = -0.75

    def near(d: Any) -> Any:  # |d| <= 1
        return B.add(B.multiply(B.multiply(B.subtract(B.multiply(d, _const(B, a + 2, dt)), _const(B, a + 3, dt)), d), d),
                     _const(B, 1, dt))  # fmt: skip

    def far(d: Any) -> Any:  # 1 < |d| < 2
        p = B.add(
            B.multiply(B.subtract(B.multiply(d, _const(B, a, dt)), _const(B, 5 * a, dt)), d),
            _const(B, 8 * a, dt),
        )
        return B.subtract(B.multiply(p, d), _const(B, 4 * a, dt))

    one = _const(B, 1, dt)
    return [far(B.add(t, one)), near(t), near(B.subtract(one, t)), far(B.subtract(_const(B, 2, dt), t))]


def _axis_taps(B: Any, c: Any, size: int, mode: str, padding: str, align: int, dt: Any):
    """Tap indices (int32, in range) and weights along one axis for coordinates ``c``."""
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if mode == "nearest":
        c = B.round(c)
    out = B.logical_or(B.less(c, _const(B, lo, dt)), B.greater(c, _const(B, hi, dt)))
    if padding == "border":
        c = B.where(out, B.clip(c, 0.0, size - 1.0), c)
    elif padding == "reflection":
        c = B.where(out, _reflect(B, c, lo, hi, dt), c)
    if mode == "nearest":
        taps, weights = [B.floor(c) if padding == "reflection" else c], [None]
    else:
        base = B.floor(c)
        t = B.subtract(c, base)
        if mode == "linear":
            taps, weights = [base, B.add(base, _const(B, 1, dt))], [B.subtract(_const(B, 1, dt), t), t]
        else:
            taps = [B.add(base, _const(B, k, dt)) for k in (-1, 0, 1, 2)]
            weights = _cubic(B, t, dt)
    result = []
    for tap, w in zip(taps, weights):
        if padding == "zeros":
            valid = B.logical_and(
                B.greater_equal(tap, _const(B, 0, dt)), B.less_equal(tap, _const(B, size - 1, dt))
            )
            w = B.astype(valid, dt) if w is None else B.where(valid, w, _const(B, 0, dt))
        elif padding == "reflection":
            tap = _reflect(B, tap, lo, hi, dt)
        idx = B.astype(B.clip(tap, 0.0, size - 1.0), np.int32)
        result.append((idx, w))
    return result


@register("GridSample", 16)
def grid_sample_16(B: Any, x: Any, grid: Any, *, align_corners: int = 0, mode: str = "bilinear",
                   padding_mode: str = "zeros") -> Any:  # fmt: skip
    """Versions 16 (bilinear/bicubic, 4-D) and 20 (linear/cubic, N-D) share this."""
    mode, padding = _MODES.get(_text(mode), _text(mode)), _text(padding_mode)
    N, C, *space = B.shape(x)
    n = len(space)
    out = B.shape(grid)[1:-1]
    P = int(np.prod(out))
    dt = B.dtype(grid)
    per_axis = []
    for i, size in enumerate(space):
        g = B.reshape(B.slice(grid, [0] * (n + 1) + [n - 1 - i], [N, *out, n - i], [1] * (n + 2)), (N, P))
        one = _const(B, 1, dt)
        if align_corners:  # (g + 1) / 2 * (size - 1)
            c = B.multiply(B.add(g, one), _const(B, (size - 1) / 2, dt))
        else:  # ((g + 1) * size - 1) / 2
            c = B.divide(B.subtract(B.multiply(B.add(g, one), _const(B, size, dt)), one), _const(B, 2, dt))
        per_axis.append(_axis_taps(B, c, size, mode, padding, align_corners, dt))
    strides = [int(np.prod(space[i + 1 :])) for i in range(n)]
    indices, weights = [], []
    for combo in itertools.product(*per_axis):
        flat, w = None, None
        for (idx, wi), st in zip(combo, strides):
            term = B.multiply(idx, B.asarray(np.asarray(st, np.int32))) if st != 1 else idx
            flat = term if flat is None else B.add(flat, term)
            w = wi if w is None else (w if wi is None else B.multiply(w, wi))
        indices.append(flat)
        weights.append(w)
    T = len(indices)
    gathered = B.take_along_axis(B.reshape(x, (N, C, -1)), B.reshape(B.stack(indices, 1), (N, 1, T * P)), 2)
    gathered = B.reshape(gathered, (N, C, T, P))
    if all(w is None for w in weights):
        y = B.reshape(gathered, (N, C, P))
    else:
        wt = B.expand_dims(B.astype(B.stack(weights, 1), B.dtype(x)), (1,))
        y = B.sum(B.multiply(gathered, wt), 2, False)
    return B.reshape(y, (N, C, *out))


register("GridSample", 20)(grid_sample_16)


@register("AffineGrid", 20, static_inputs=(1,))
def affine_grid_20(B: Any, theta: Any, size: Any, *, align_corners: int = 0) -> Any:
    """A grid of normalised (x, y[, z]) points, transformed by each batch's affine ``theta``."""
    N, _, *space = [int(v) for v in np.asarray(size).reshape(-1)]
    axes = []
    for L in space:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, L) if L > 1 else np.zeros(1))
        else:
            axes.append((np.arange(L) * 2.0 + 1.0) / L - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")
    base = np.stack(
        [m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)], 1
    )  # (P, n + 1): x, y, ...
    dt = B.dtype(theta)
    out = B.matmul(B.asarray(base.astype(dt)[None]), B.transpose(theta, (0, 2, 1)))
    return B.reshape(out, (N, *space, len(space)))


def _roi_axis(B: Any, start: Any, length: Any, pooled: int, grid: int, size: int, dt: Any):
    """Sample taps along one axis of every roi: (low, high) indices, (low, high) weights, validity."""
    steps = (np.arange(pooled)[:, None] + (np.arange(grid)[None, :] + 0.5) / grid).reshape(-1)  # in bins
    c = B.add(B.expand_dims(start, (1,)), B.multiply(B.expand_dims(B.divide(length, _const(B, pooled, dt)), (1,)),
                                                      B.asarray(steps.astype(dt))))  # fmt: skip
    valid = B.logical_and(B.greater_equal(c, _const(B, -1, dt)), B.less_equal(c, _const(B, size, dt)))
    c = B.maximum(c, _const(B, 0, dt))
    low = B.floor(c)
    cap = B.greater_equal(low, _const(B, size - 1, dt))
    low = B.where(cap, _const(B, size - 1, dt), low)
    high = B.where(cap, low, B.add(low, _const(B, 1, dt)))
    frac = B.subtract(B.where(cap, low, c), low)
    lo_i, hi_i = (B.astype(v, np.int32) for v in (low, high))
    return (lo_i, hi_i), (B.subtract(_const(B, 1, dt), frac), frac), valid


def _roi_align(B: Any, x: Any, rois: Any, batch_indices: Any, *, half_pixel: bool, mode: str, output_height: int,
               output_width: int, sampling_ratio: int, spatial_scale: float) -> Any:  # fmt: skip
    if sampling_ratio <= 0:
        raise NotImplementedError("RoiAlign with sampling_ratio=0 samples a data-dependent grid per roi")
    N, C, H, W = B.shape(x)
    R = B.shape(rois)[0]
    dt = B.dtype(x)
    g = sampling_ratio
    r = B.subtract(
        B.multiply(B.astype(rois, dt), _const(B, spatial_scale, dt)), _const(B, 0.5 if half_pixel else 0, dt)
    )
    x1, y1, x2, y2 = (B.reshape(B.slice(r, [0, k], [R, k + 1], [1, 1]), (R,)) for k in range(4))
    rw, rh = B.subtract(x2, x1), B.subtract(y2, y1)
    if not half_pixel:
        rw, rh = B.maximum(rw, _const(B, 1, dt)), B.maximum(rh, _const(B, 1, dt))
    (yl, yh), (wyl, wyh), vy = _roi_axis(B, y1, rh, output_height, g, H, dt)  # (R, Sy)
    (xl, xh), (wxl, wxh), vx = _roi_axis(B, x1, rw, output_width, g, W, dt)  # (R, Sx)
    base = B.reshape(
        B.multiply(B.astype(batch_indices, np.int32), B.asarray(np.asarray(H * W, np.int32))), (R, 1, 1)
    )
    valid = B.astype(B.logical_and(B.expand_dims(vy, (2,)), B.expand_dims(vx, (1,))), dt)
    idx, wts = [], []
    for iy, wy in ((yl, wyl), (yh, wyh)):
        for ix, wx in ((xl, wxl), (xh, wxh)):
            row = B.expand_dims(B.multiply(iy, B.asarray(np.asarray(W, np.int32))), (2,))
            idx.append(B.add(base, B.add(row, B.expand_dims(ix, (1,)))))
            wts.append(B.multiply(B.multiply(B.expand_dims(wy, (2,)), B.expand_dims(wx, (1,))), valid))
    flat = B.reshape(B.transpose(x, (1, 0, 2, 3)), (C, N * H * W))
    vals = B.take(flat, B.stack(idx, 3), 1)  # (C, R, Sy, Sx, 4)
    vals = B.multiply(vals, B.stack(wts, 3))
    if mode == "max":
        s = B.max(vals, 4, False)
        s = B.reshape(s, (C, R, output_height, g, output_width, g))
        out = B.max(s, (3, 5), False)
    else:
        s = B.reshape(B.sum(vals, 4, False), (C, R, output_height, g, output_width, g))
        out = B.divide(B.sum(s, (3, 5), False), _const(B, g * g, dt))
    return B.transpose(out, (1, 0, 2, 3))


@register("RoiAlign", 10)
def roi_align_10(B: Any, x: Any, rois: Any, batch_indices: Any, *, mode: str = "avg", output_height: int = 1,
                 output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0) -> Any:  # fmt: skip
    """Version 10 has no coordinate_transformation_mode: rois are in output_half_pixel coordinates."""
    return _roi_align(B, x, rois, batch_indices, half_pixel=False, mode=_text(mode), output_height=output_height,
                      output_width=output_width, sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)  # fmt: skip


@register("RoiAlign", 16)
def roi_align_16(B: Any, x: Any, rois: Any, batch_indices: Any, *, coordinate_transformation_mode: str = "half_pixel",
                 mode: str = "avg", output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0,
                 spatial_scale: float = 1.0) -> Any:  # fmt: skip
    return _roi_align(B, x, rois, batch_indices, half_pixel=_text(coordinate_transformation_mode) == "half_pixel",
                      mode=_text(mode), output_height=output_height, output_width=output_width,
                      sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)  # fmt: skip
