"""Resize and Upsample: separable interpolation, one axis at a time.

Every resized axis is a gather of ``taps`` input rows per output row followed by a weighted sum.
The tap indices and weights depend only on shapes and attributes, so they are computed on the
host (float64, as the ONNX reference does) and reach the device as constants: nearest is one
``take``, linear two taps, cubic four, antialiased filters as many as their support needs. An axis
of few input rows a tap runs as one product with the (out, in) matrix of those weights instead, and
a plain 2-D float32 resize as the backend's own kernel where it has one (``B.interpolate_2d``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .registry import register


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _source_coords(ctm: str, out_w: int, in_w: int, scale: float, roi: tuple[float, float] | None):
    """Output index -> input coordinate per coordinate_transformation_mode; and the rows outside."""
    y = np.arange(out_w, dtype=np.float64)
    length = scale * in_w  # the output length before flooring
    outside = None
    if ctm == "align_corners":
        x = np.zeros(out_w) if length == 1 else y * (in_w - 1) / (length - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        lo, hi = roi
        x = (
            np.full(out_w, (hi - lo) * (in_w - 1) / 2)
            if length == 1
            else y * (hi - lo) * (in_w - 1) / (length - 1)
        )
        x = x + lo * (in_w - 1)
        outside = (x < 0) | (x > in_w - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(out_w, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        offset = in_w / 2 * (1 - out_w / length)
        x = offset + (y + 0.5) / scale - 0.5
    elif ctm == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    else:
        raise ValueError(f"unknown coordinate_transformation_mode {ctm!r}")
    return x, outside


def _cubic(x: np.ndarray, a: float) -> np.ndarray:
    """The Keys cubic kernel with parameter ``a``, at distances ``x``."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _weights(
    mode: str, ratio: np.ndarray, scale: float, antialias: int, a: float, nearest_mode: str
) -> np.ndarray:
    """Per output row, the weights of its taps; taps sit at ``floor(x) + start + arange(n)``."""
    r = ratio[:, None]
    if mode == "nearest":
        pick_hi = {
            "round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
            "floor": np.zeros_like(ratio, bool), "ceil": np.ones_like(ratio, bool),
        }[nearest_mode] | (ratio == 1)  # fmt: skip
        return np.stack([~pick_hi, pick_hi], 1).astype(np.float64)
    s = min(scale, 1.0) if antialias else 1.0
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)
        d = (np.arange(start, 2 - start)[None, :] - r) * s
        w = np.clip(1 - np.abs(d), 0, 1)
    else:
        start = int(np.floor(-2 / s) + 1)
        w = _cubic((np.arange(start, 2 - start)[None, :] - r) * s, a)
    return w / w.sum(1, keepdims=True) if antialias else w


@functools.lru_cache(maxsize=256)
def axis_taps(in_w: int, out_w: int, scale: float, mode: str, ctm: str, roi: Any, antialias: int, a: float,
              exclude_outside: int, nearest_mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:  # fmt: skip
    """(indices, weights) of shape (out_w, taps), and the extrapolated rows (tf_crop_and_resize)."""
    x, outside = _source_coords(ctm, out_w, in_w, scale, roi)
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)  # an exact hit counts as the upper tap of the left cell
    base = np.where(x == base, base - 1, base).astype(np.int64)
    w = _weights(mode, ratio, scale, antialias, a, nearest_mode)
    n = w.shape[1]
    idx = base[:, None] + np.arange(n)[None, :] - (n // 2 - 1)
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= in_w), 0.0, w)
        total = w.sum(1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    idx = np.clip(idx, 0, in_w - 1)
    if mode == "nearest":
        idx, w = np.take_along_axis(idx, np.argmax(w, 1)[:, None], 1), np.ones((out_w, 1))
    return idx, w, outside


# An axis of at most this many input rows a tap is resized by one matrix product rather than a gather per tap:
# MLX's CPU gathers are scalar loops (on mlx, 256 channels of 16 x 16 to 128 x 128 bilinear: 78 ms as taps, 2.1 as
# products; 1,024 x 1,024 to 224 x 224, 2 taps: 7.0 ms as taps, 14.7 as products)
MATRIX_ROWS_PER_TAP = 256


def _tap_matrix(idx: np.ndarray, w: np.ndarray, in_w: int) -> np.ndarray:
    """The (out_w, in_w) matrix whose row o holds output row o's tap weights at their input rows."""
    m = np.zeros((idx.shape[0], in_w))
    np.add.at(m, (np.repeat(np.arange(idx.shape[0]), idx.shape[1]), idx.reshape(-1)), w.reshape(-1))
    return m


def _axis_product(B: Any, y: Any, axis: int, m: np.ndarray) -> Any:
    """``y`` with ``axis`` replaced by the rows of ``m @ y`` along it."""
    shape = B.shape(y)
    out_w, in_w = m.shape
    if axis == len(shape) - 1:
        return B.matmul(y, B.asarray(np.ascontiguousarray(m.T)))
    lead, trail = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    z = B.matmul(B.asarray(m), B.reshape(y, (lead, in_w, trail)))
    return B.reshape(z, (*shape[:axis], out_w, *shape[axis + 1:]))


def resize_nd(B: Any, x: Any, sizes: list[int], scales: list[float], *, mode: str, ctm: str, roi: Any = None,
              antialias: int = 0, a: float = -0.75, exclude_outside: int = 0, extrapolation_value: float = 0.0,
              nearest_mode: str = "round_prefer_floor") -> Any:  # fmt: skip
    """``x`` resized to ``sizes`` (all axes) with the given per-axis ``scales``."""
    shape = B.shape(x)
    if _is_plain_2d(shape, np.dtype(B.dtype(x)), sizes, scales, mode, ctm, roi, antialias, a, exclude_outside):
        resized = B.interpolate_2d(x, (int(sizes[2]), int(sizes[3])), mode, ctm == "align_corners")
        if resized is not None:
            return resized
    rank = len(shape)
    dtype = np.dtype(B.dtype(x))
    # integers interpolate in float32 (then round); so does bfloat16, which numpy (on the host) only emulates
    bfloat16 = dtype.name == "bfloat16"
    floating = np.issubdtype(dtype, np.floating)
    work = dtype if (floating and not bfloat16) or mode == "nearest" else np.dtype(np.float32)
    y = B.astype(x, work) if work != dtype else x
    for axis in range(rank):
        in_w, out_w, scale = shape[axis], int(sizes[axis]), float(scales[axis])
        pair = None if roi is None else (float(roi[axis]), float(roi[axis + rank]))
        if np.isclose(scale, 1.0) and out_w == in_w and (pair is None or np.allclose(pair, (0.0, 1.0))):
            continue
        idx, w, outside = axis_taps(
            in_w, out_w, scale, mode, ctm, pair, antialias, a, exclude_outside, nearest_mode
        )
        n = idx.shape[1]
        if n == 1:
            y = B.take(y, B.asarray(idx[:, 0].astype(np.int32)), axis)
        elif not B.is_host and in_w <= MATRIX_ROWS_PER_TAP * n:
            y = _axis_product(B, y, axis, _tap_matrix(idx, w, in_w).astype(work))
        else:  # one gather per tap, multiply-added: element-wise work that fuses under mx.compile
            wshape = (out_w,) + (1,) * (rank - axis - 1)
            acc = None
            for k in range(n):
                part = B.take(y, B.asarray(idx[:, k].astype(np.int32)), axis)
                part = B.multiply(part, B.asarray(w[:, k].reshape(wshape).astype(work)))
                acc = part if acc is None else B.add(acc, part)
            y = acc
        if outside is not None and outside.any():
            mshape = (out_w,) + (1,) * (rank - axis - 1)
            y = B.where(B.asarray(outside.reshape(mshape)), B.full((), extrapolation_value, work), y)
    if work != dtype and bfloat16:
        y = B.astype(y, dtype)
    elif work != dtype:
        info = np.iinfo(dtype)
        y = B.astype(B.clip(B.round(y), info.min, info.max), dtype)
    return y


def _is_plain_2d(shape: tuple[int, ...], dtype: np.dtype, sizes: list[int], scales: list[float], mode: str, ctm: str,
                 roi: Any, antialias: int, a: float, exclude_outside: int) -> bool:
    """Whether the resize is what ``B.interpolate_2d`` computes: float32 (N, C, H, W) resized on H and W alone,
    linear or Keys cubic with a = -0.75 over clamped taps, half-pixel or align-corners coordinates, each resized
    axis's scale its sizes' ratio (torch derives it from the sizes) and longer than one (where pytorch_half_pixel
    and align_corners have special cases)."""
    if len(shape) != 4 or dtype != np.float32 or antialias or exclude_outside or roi is not None:
        return False
    if mode not in ("linear", "cubic") or (mode == "cubic" and a != -0.75):
        return False
    if ctm not in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        return False
    if list(sizes[:2]) != list(shape[:2]) or any(float(s) != 1.0 for s in scales[:2]):
        return False
    return all(int(sizes[i]) > 1 and float(scales[i]) * shape[i] == int(sizes[i]) for i in (2, 3))


@register("Resize", 10, static_inputs=(1,))
def resize_10(B: Any, x: Any, scales: Any, *, mode: str = "nearest") -> Any:
    """Version 10 is Upsample: asymmetric coordinates, nearest rounds down."""
    return _upsample(B, x, scales, _text(mode))


def _upsample(B: Any, x: Any, scales: Any, mode: str) -> Any:
    scales = [float(s) for s in np.asarray(scales).reshape(-1)]
    sizes = [int(np.floor(s * d)) for s, d in zip(scales, B.shape(x))]
    mode = "linear" if mode in ("linear", "bilinear", "trilinear") else mode
    return resize_nd(B, x, sizes, scales, mode=mode, ctm="asymmetric", nearest_mode="floor")


@register("Resize", 11, static_inputs=(1, 2, 3))
def resize_11(
    B: Any,
    x: Any,
    roi: Any = None,
    scales: Any = None,
    sizes: Any = None,
    *,
    antialias: int = 0,
    axes: list[int] | None = None,
    coordinate_transformation_mode: str = "half_pixel",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    keep_aspect_ratio_policy: str = "stretch",
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
) -> Any:
    """Versions 11-19 (antialias, axes and keep_aspect_ratio_policy arrived in 18)."""
    shape = B.shape(x)
    rank = len(shape)
    axes = [a % rank for a in axes] if axes else list(range(rank))
    ctm = _text(coordinate_transformation_mode)
    full_roi = None
    if ctm == "tf_crop_and_resize" and roi is not None and np.asarray(roi).size:
        r = np.asarray(roi, np.float64).reshape(-1)
        full_roi = np.array([0.0] * rank + [1.0] * rank)
        for i, a in enumerate(axes):
            full_roi[a], full_roi[rank + a] = r[i], r[len(axes) + i]
    out, fac = list(shape), [1.0] * rank
    if sizes is not None and np.asarray(sizes).size:
        sz = [int(v) for v in np.asarray(sizes).reshape(-1)]
        for a, s in zip(axes, sz):
            out[a], fac[a] = s, s / shape[a]
        policy = _text(keep_aspect_ratio_policy)
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(fac[a] for a in axes)
            for a in axes:
                fac[a], out[a] = s, int(s * shape[a] + 0.5)
    else:
        sc = [float(v) for v in np.asarray(scales).reshape(-1)]
        for a, s in zip(axes, sc):
            fac[a], out[a] = s, int(np.floor(s * shape[a]))
    return resize_nd(
        B, x, out, fac, mode=_text(mode), ctm=ctm, roi=full_roi, antialias=antialias, a=cubic_coeff_a,
        exclude_outside=exclude_outside, extrapolation_value=extrapolation_value, nearest_mode=_text(nearest_mode),
    )  # fmt: skip


@register("Upsample", 7)
def upsample_7(B: Any, x: Any, *, mode: str = "nearest", scales: list[float]) -> Any:
    return _upsample(B, x, scales, _text(mode))


@register("Upsample", 9, static_inputs=(1,))
def upsample_9(B: Any, x: Any, scales: Any, *, mode: str = "nearest") -> Any:
    return _upsample(B, x, scales, _text(mode))
