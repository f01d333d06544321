"""Resizes, each equal to the one its transformers processor runs.

>>> import numpy as np
>>> image = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
>>> pil_resize(image, (2, 2), 2).shape                      # the slow processors: Pillow
(2, 2, 3)
>>> torch_resize(image, (2, 2), 3).dtype                    # the fast ones: torch's antialiased resize
dtype('uint8')
>>> skimage_resize(image / np.float32(255), (2, 2)).shape    # OWLv2: blur, then linear interpolation
(2, 2, 3)

- :func:`pil_resize`: the slow processors' ``image_transforms.resize`` on a uint8 image, Pillow's
  ``Image.resize`` with the configured filter (bit-equal by construction).
- :func:`torch_resize`: the fast processors' ``torchvision.transforms.v2.functional.resize`` on a uint8
  image (``antialias=True``), ATen's separable antialiased kernels in numpy: bicubic (and bilinear where
  torchvision uses the native uint8 kernel, on AVX2 CPUs) with Pillow-style filters but int16 fixed-point
  weights of a per-axis precision; bilinear elsewhere (Apple silicon, AVX-512) in float32 and rounded;
  nearest as ATen's ``nearest-exact``. The width is resized first, then the height, through uint8.
- :func:`skimage_resize`: ``Owlv2ImageProcessor.resize``, scikit-image's anti-aliased resize that
  transformers runs with scipy (``ndimage.gaussian_filter`` with sigma ``(in / out - 1) / 2`` on
  each shrunk axis, mode "mirror", then ``ndimage.zoom(order=1, grid_mode=True)``), in float64 sums
  stored float32 at the same points as scipy.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

__all__ = ["FILTERS", "TORCH_FILTERS", "pil_resize", "skimage_resize", "torch_resize"]

#: Pillow's resampling filters by the integer a config holds (PILImageResampling)
FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
#: the filters torchvision resizes a tensor with (the fast processors map NEAREST to NEAREST_EXACT)
TORCH_FILTERS = (0, 2, 3)


def pil_resize(image: np.ndarray, size: tuple[int, int], resample: int) -> np.ndarray:
    """A uint8 ``(height, width, 3)`` image resized to ``size`` = (height, width) with Pillow's ``resample``."""
    height, width = int(size[0]), int(size[1])
    if height <= 0 or width <= 0:
        raise ValueError(f"cannot resize a {image.shape[0]}x{image.shape[1]} image to {height}x{width}")
    return np.asarray(Image.fromarray(image).resize((width, height), resample=Image.Resampling(resample)))


# ------------------------------------------------------------------------------------------ torch
def _triangle(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


def _keys(x: np.ndarray) -> np.ndarray:
    """ATen's antialiasing bicubic filter (Pillow's, a = -0.5), in ATen's operation order."""
    a = -0.5
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _aa_taps(in_size: int, out_size: int, resample: int, dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``HelperInterpBase::_compute_indices_weights_aa``: each output's first source index, span and
    normalised filter weights (zero past the span), computed in ``dtype`` as ATen does for that dtype."""
    taps, fn = (2, _triangle) if resample == 2 else (4, _keys)
    # ATen mixes `dtype` (float or double) with double literals: each step below rounds where it does
    scale = dtype(dtype(in_size) / dtype(out_size))
    support = dtype(taps * 0.5 * np.float64(scale)) if scale >= 1.0 else dtype(taps * 0.5)
    invscale = dtype(1.0 / np.float64(scale)) if scale >= 1.0 else dtype(1.0)
    width = int(np.ceil(support)) * 2 + 1
    center = (np.float64(scale) * (np.arange(out_size) + 0.5)).astype(dtype)
    xmin = np.maximum(np.trunc((center - support).astype(np.float64) + 0.5).astype(np.int64), 0)
    xsize = np.minimum(np.trunc((center + support).astype(np.float64) + 0.5).astype(np.int64), in_size) - xmin
    j = np.arange(width)
    offset = (j[None, :] + xmin[:, None]).astype(dtype) - center[:, None]  # int - float in `dtype`
    weights = fn(((offset.astype(np.float64) + 0.5) * np.float64(invscale)).astype(dtype)).astype(dtype)
    weights = np.where(j[None, :] < xsize[:, None], weights, dtype(0))
    total = np.zeros(out_size, dtype)
    for k in range(width):  # ATen sums the weights one by one
        total = total + weights[:, k]
    weights = np.where(total[:, None] != 0, weights / np.where(total == 0, 1, total)[:, None], weights)
    return xmin, xsize, weights.astype(dtype)


def _int16_weights(weights: np.ndarray) -> tuple[np.ndarray, int]:
    """``_compute_indices_int16_weights_aa``: weights scaled by the largest power of two that keeps the
    biggest one under 2**15, rounded half away from zero."""
    w_max = float(weights.max())
    precision = 0
    while precision < 22 and int(0.5 + w_max * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = weights * float(1 << precision)
    return np.trunc(np.where(weights < 0, scaled - 0.5, scaled + 0.5)).astype(np.int64), precision


def _gather(image: np.ndarray, axis: int, xmin: np.ndarray, k: int) -> np.ndarray:
    index = np.minimum(xmin + k, image.shape[axis] - 1)  # past the span the weight is 0
    return np.take(image, index, axis=axis)


def _resample_axis(image: np.ndarray, axis: int, out_size: int, resample: int, integer: bool) -> np.ndarray:
    shape = [1] * image.ndim
    shape[axis] = out_size
    if integer:
        xmin, _, weights = _aa_taps(image.shape[axis], out_size, resample, np.float64)
        weights, precision = _int16_weights(weights)
        acc = np.full(1, 1 << (precision - 1), np.int64)
        for k in range(weights.shape[1]):
            acc = acc + weights[:, k].reshape(shape) * _gather(image, axis, xmin, k).astype(np.int64)
        return np.clip(acc >> precision, 0, 255).astype(np.uint8)
    xmin, xsize, weights = _aa_taps(image.shape[axis], out_size, resample, np.float32)
    # ATen's `output = x0 * w0; output += xj * wj` as x86 builds of torch compile it: the taps after the
    # first in blocks of 4 as rounded products added in order, the rest fused (one rounding)
    blocked = ((xsize - 1) // 4 * 4).reshape(shape)
    acc = _gather(image, axis, xmin, 0) * weights[:, 0].reshape(shape)
    for k in range(1, weights.shape[1]):
        x, w = _gather(image, axis, xmin, k), weights[:, k].reshape(shape)
        fused = (x.astype(np.float64) * w + acc).astype(np.float32)
        acc = np.where(k <= blocked, acc + x * w, fused)  # past the span w = 0 leaves acc as it is
    return acc


def _nearest_exact(in_size: int, out_size: int) -> np.ndarray:
    scale = np.float32(np.float32(in_size) / np.float32(out_size))
    source = ((np.arange(out_size) + 0.5) * np.float64(scale)).astype(np.float32)
    return np.minimum(np.floor(source).astype(np.int64), in_size - 1)


def torch_resize(image: np.ndarray, size: tuple[int, int], resample: int, bilinear_uint8: bool = False) -> np.ndarray:
    """A uint8 ``(height, width, channels)`` image resized to ``size`` as torchvision resizes a uint8 tensor
    (``antialias=True``) with Pillow filter ``resample`` (0 nearest-exact, 2 bilinear, 3 bicubic);
    ``bilinear_uint8`` picks the native uint8 bilinear kernel (AVX2 CPUs) over the float32 one."""
    height, width = int(size[0]), int(size[1])
    if resample not in TORCH_FILTERS:
        raise ValueError(f"torchvision resizes tensors with nearest, bilinear or bicubic only, not {FILTERS.get(resample)}")
    if height <= 0 or width <= 0:
        raise ValueError(f"cannot resize a {image.shape[0]}x{image.shape[1]} image to {height}x{width}")
    if resample == 0:
        rows, cols = _nearest_exact(image.shape[0], height), _nearest_exact(image.shape[1], width)
        return image[rows][:, cols]
    integer = resample == 3 or bilinear_uint8
    out = image if integer else image.astype(np.float32)
    if out.shape[1] != width:
        out = _resample_axis(out, 1, width, resample, integer)
    if out.shape[0] != height:
        out = _resample_axis(out, 0, height, resample, integer)
    if integer:
        return out
    return np.clip(np.round(out), 0, 255).astype(np.uint8)  # round half to even, as torch.round_


# ------------------------------------------------------------------------------------------ scikit-image
def _mirror(index: np.ndarray, size: int) -> np.ndarray:
    """scipy.ndimage's "mirror" extension of integer indices (d c b | a b c d | c b a)."""
    if size == 1:
        return np.zeros_like(index)
    period = 2 * size - 2
    index = np.mod(index, period)
    return np.where(index >= size, period - index, index)


def _gaussian_rows(image: np.ndarray, sigma: float, rows: np.ndarray, block: int = 256) -> np.ndarray:
    """``ndimage.gaussian_filter1d`` (truncate 4, mode "mirror") of float32 ``image`` along axis 0, at
    rows ``rows`` only, summed as scipy's symmetric correlation: ``x0 * w0 + sum (x-j + x+j) * wj`` from
    the outermost tap in, in float64, stored float32 (in blocks of columns, to bound the float64 copy)."""
    radius = int(4.0 * sigma + 0.5)
    x = np.arange(-radius, radius + 1)
    phi = np.exp(-0.5 / (sigma * sigma) * x**2)
    weights = phi / phi.sum()
    size = image.shape[0]
    taps = [(_mirror(rows - j, size), _mirror(rows + j, size), weights[radius - j]) for j in range(radius, 0, -1)]
    out = np.empty((len(rows),) + image.shape[1:], np.float32)
    for start in range(0, image.shape[1], block):
        column = image[:, start:start + block].astype(np.float64)
        acc = column[rows] * weights[radius]
        for before, after, weight in taps:
            acc += (column[before] + column[after]) * weight
        out[:, start:start + block] = acc
    return out


def _linear_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``NI_ZoomShift`` with order 1, grid_mode and mode "mirror" along one axis: both source indices and
    weights of each output (``w1 = 1 - w0``, as scipy's spline weights)."""
    zoom = in_size / out_size
    cc = (np.arange(out_size) + 0.5) * zoom - 0.5
    if in_size == 1:
        cc = np.zeros_like(cc)
    else:  # map_coordinate, mode mirror
        period = 2 * in_size - 2
        low = cc < 0
        cc = np.where(low, -(period * np.trunc(-cc / period) + cc), cc)
        high = cc > in_size - 1
        folded = cc - period * np.trunc(cc / period)
        cc = np.where(high, np.where(folded >= in_size, period - folded, folded), cc)
    start = np.floor(cc).astype(np.int64)
    w0 = 1.0 - (cc - start)
    return _mirror(start, in_size), _mirror(start + 1, in_size), w0, 1.0 - w0


def skimage_resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A float32 ``(height, width, channels)`` image resized to ``size`` as ``Owlv2ImageProcessor.resize``
    does (anti-aliasing gaussian on the axes it shrinks, linear interpolation, clipped to the input's range)."""
    height, width = int(size[0]), int(size[1])
    if height <= 0 or width <= 0:
        raise ValueError(f"cannot resize a {image.shape[0]}x{image.shape[1]} image to {height}x{width}")
    taps = [_linear_taps(image.shape[0], height), _linear_taps(image.shape[1], width)]
    if (image.shape[0], image.shape[1]) == (height, width):
        return image.copy()  # scipy's zoom returns the input when every factor is 1
    # blur only the rows, then the columns, that the interpolation reads (the filter is separable)
    needed = [np.unique(np.concatenate(t[:2])) for t in taps]
    filtered = image
    for axis in (0, 1):
        sigma = max(0.0, (image.shape[axis] / size[axis] - 1) / 2)
        if sigma > 1e-15:
            rows = filtered if axis == 0 else filtered.transpose(1, 0, 2)
            filtered = _gaussian_rows(rows, sigma, needed[axis])
            filtered = filtered if axis == 0 else filtered.transpose(1, 0, 2)
        else:
            filtered = np.take(filtered, needed[axis], axis=axis)
        position = np.searchsorted(needed[axis], np.arange(image.shape[axis]))
        taps[axis] = (position[taps[axis][0]], position[taps[axis][1]], taps[axis][2], taps[axis][3])
    (r0, r1, a0, a1), (c0, c1, b0, b1) = taps
    x = filtered.astype(np.float64)
    a0, a1, b0, b1 = a0[:, None, None], a1[:, None, None], b0[None, :, None], b1[None, :, None]
    out = x[r0][:, c0] * a0 * b0 + x[r0][:, c1] * a0 * b1 + x[r1][:, c0] * a1 * b0 + x[r1][:, c1] * a1 * b1
    return np.clip(out.astype(np.float32), image.min(), image.max())
