"""Padding and cropping: Pad (constant/reflect/edge/wrap), CenterCropPad, and Col2Im."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from .registry import register


def _source_index(n: int, begin: int, end: int, mode: str) -> np.ndarray:
    """For each output position along an axis padded by ``begin``/``end``, the input index it copies."""
    i = np.arange(-begin, n + end)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return i % n
    if mode == "reflect":  # mirror without repeating the edge: period 2(n - 1)
        if n == 1:
            return np.zeros_like(i)
        m = np.abs(i) % (2 * n - 2)
        return np.where(m >= n, 2 * n - 2 - m, m)
    raise ValueError(f"unknown Pad mode {mode!r}")


def _pad(B: Any, x: Any, pads: list[int], axes: list[int] | None, mode: str, value: Any) -> Any:
    shape = B.shape(x)
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad needs {2 * len(axes)} pads for axes {axes}, got {len(pads)}")
    per_axis = [(0, 0)] * rank
    for i, a in enumerate(axes):
        per_axis[a] = (pads[i], pads[i + len(axes)])
    # negative pads crop first (as onnxruntime does), then every mode pads the cropped tensor
    starts = [max(-b, 0) for b, _ in per_axis]
    stops = [n - max(-e, 0) for n, (_, e) in zip(shape, per_axis)]
    if starts != [0] * rank or stops != list(shape):
        x = B.slice(x, starts, stops, [1] * rank)
    widths = [(max(b, 0), max(e, 0)) for b, e in per_axis]
    if mode == "constant":
        return B.pad(x, widths, value) if any(w != (0, 0) for w in widths) else x
    for a, (b, e) in enumerate(widths):
        if b or e:
            x = B.take(x, B.asarray(_source_index(stops[a] - starts[a], b, e, mode).astype(np.int64)), a)
    return x


def _scalar(B: Any, value: Any, dtype: np.dtype) -> Any:
    v = np.asarray(value, dtype=dtype).reshape(-1)
    return v[0].item() if v.size else np.zeros((), dtype).item()


@register("Pad", 2)
def pad_2(B: Any, data: Any, *, pads: list[int], mode: str = "constant", value: float = 0.0) -> Any:
    return _pad(B, data, list(pads), None, mode, _scalar(B, value, B.dtype(data)))


@register("Pad", 11, static_inputs=(1, 2, 3))
def pad_11(
    B: Any,
    data: Any,
    pads: np.ndarray,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
    *,
    mode: str = "constant",
) -> Any:
    """Opset 18 adds ``axes`` and 19 the ``wrap`` mode; both are optional extensions of this form."""
    value = _scalar(B, 0 if constant_value is None else constant_value, B.dtype(data))
    axes_ = None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    return _pad(B, data, [int(p) for p in np.asarray(pads).reshape(-1)], axes_, mode, value)


@register("CenterCropPad", 18, static_inputs=(1,))
def center_crop_pad_18(B: Any, input_data: Any, shape: np.ndarray, *, axes: list[int] | None = None) -> Any:
    dims = B.shape(input_data)
    rank = len(dims)
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    target = [int(d) for d in np.asarray(shape).reshape(-1)]
    starts, stops, widths = [0] * rank, list(dims), [(0, 0)] * rank
    for a, t in zip(axes, target):
        diff = t - dims[a]
        if diff < 0:  # crop: the window starts half a pixel left of centre when odd
            starts[a] = -diff // 2
            stops[a] = starts[a] + t
        elif diff > 0:  # pad: the extra pixel goes right
            widths[a] = (diff // 2, diff - diff // 2)
    x = B.slice(input_data, starts, stops, [1] * rank)
    return B.pad(x, widths, 0) if any(w != (0, 0) for w in widths) else x


@register("Col2Im", 18, static_inputs=(1, 2))
def col2im_18(
    B: Any,
    input: Any,
    image_shape: np.ndarray,
    block_shape: np.ndarray,
    *,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Any:
    """Sums every column block into its place in the padded image (a scatter-add), then crops the pads."""
    image = [int(d) for d in np.asarray(image_shape).reshape(-1)]
    block = [int(d) for d in np.asarray(block_shape).reshape(-1)]
    nd = len(image)
    dilations = list(dilations or [1] * nd)
    strides = list(strides or [1] * nd)
    pads = list(pads or [0] * (2 * nd))
    padded = [image[i] + pads[i] + pads[i + nd] for i in range(nd)]
    counts = [(padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    n, ck, length = B.shape(input)
    k = math.prod(block)
    if length != math.prod(counts) or ck % k:
        raise ValueError(f"Col2Im input {B.shape(input)} does not match blocks {block} over {counts}")
    c = ck // k
    # the flat padded-image position of (kernel offset, block position), host arithmetic
    pos = np.zeros((k, length), dtype=np.int64)
    for kk, offset in enumerate(itertools.product(*(range(b) for b in block))):
        coords = np.indices(counts).reshape(nd, -1)
        flat = np.zeros(length, dtype=np.int64)
        for i in range(nd):
            flat = flat * padded[i] + coords[i] * strides[i] + offset[i] * dilations[i]
        pos[kk] = flat
    index = B.broadcast_to(B.asarray(pos.reshape(1, 1, -1)), (n, c, k * length))
    cols = B.reshape(input, (n, c, k * length))
    out = B.scatter_along_axis(B.zeros((n, c, math.prod(padded)), B.dtype(input)), index, cols, 2, "add")
    out = B.reshape(out, [n, c] + padded)
    starts = [0, 0] + pads[:nd]
    stops = [n, c] + [pads[i] + image[i] for i in range(nd)]
    return B.slice(out, starts, stops, [1] * (nd + 2))
