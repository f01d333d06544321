"""Pooling: AveragePool, MaxPool (with Indices), LpPool, their Global forms, and MaxUnpool.

A pool pads its input, takes the sliding windows over the spatial axes (a strided view on the
device) and reduces them. Everything that depends only on shapes (the divisors of an average
that excludes padding, the input index of each window element) is computed on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backends import HOST
from ._window import outputs_used, spatial_pads
from .registry import IndexBound, register


def _padded(B: Any, x: Any, kernel_shape: Any, strides: Any, dilations: Any, pads: Any, auto_pad: Any,
            ceil_mode: int, fill: Any) -> tuple[Any, list, list, list, list]:  # fmt: skip
    """``x`` padded with ``fill`` (the ONNX pads plus ceil_mode's end padding), and the geometry."""
    space = B.shape(x)[2:]
    pairs, strides, dilations, extra = spatial_pads(
        space, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode
    )
    full = [(lo, hi + e) for (lo, hi), e in zip(pairs, extra)]
    if any(lo or hi for lo, hi in full):
        x = B.pad(x, [(0, 0), (0, 0)] + full, fill)
    return x, pairs, strides, dilations, extra


_MAX_UNROLL = 64  # kernels up to this many elements reduce strided slices; larger ones a window view


def _reduce(
    B: Any, xp: Any, kernel: Any, strides: list, dilations: list, reduce: str, each: Any = None
) -> Any:
    """Reduce (``"max"`` or ``"sum"``) every pooling window of the padded ``xp``, ``each`` applied first.

    Small kernels combine one strided slice per kernel element: element-wise ops that fuse under
    ``mx.compile`` and never materialise the windows.
    """
    n = len(kernel)
    if int(np.prod(kernel)) > _MAX_UNROLL:
        win = B.sliding_window(xp, list(kernel), strides, dilations)
        return getattr(B, reduce)(win if each is None else each(win), _window_axes(n), False)
    shape = B.shape(xp)
    out = [(s - d * (k - 1) - 1) // t + 1 for s, k, t, d in zip(shape[2:], kernel, strides, dilations)]
    combine = B.maximum if reduce == "max" else B.add
    acc = None
    for kk in np.ndindex(*kernel):
        starts = [k * d for k, d in zip(kk, dilations)]
        stops = [a + (o - 1) * t + 1 for a, o, t in zip(starts, out, strides)]
        part = B.slice(xp, [0, 0, *starts], [*shape[:2], *stops], [1, 1, *strides])
        part = part if each is None else each(part)
        acc = part if acc is None else combine(acc, part)
    return acc


def _window_axes(n: int) -> tuple[int, ...]:
    return tuple(range(2 + n, 2 + 2 * n))


def _lowest(dtype: np.dtype) -> Any:
    return np.iinfo(dtype).min if np.issubdtype(dtype, np.integer) else -np.inf


@register("AveragePool", 1)
def average_pool_1(
    B: Any,
    x: Any,
    *,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    dilations: list[int] | None = None,
    kernel_shape: list[int],
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Any:
    n = len(kernel_shape)
    xp, pairs, strides, dilations, extra = _padded(
        B, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, 0
    )
    total = _reduce(B, xp, kernel_shape, strides, dilations, "sum")
    # the divisor counts the input (and the explicit pads when count_include_pad), never the
    # end padding that ceil_mode adds
    mask = np.pad(np.ones(B.shape(x)[2:], np.float64), pairs, constant_values=float(count_include_pad))
    mask = np.pad(mask, [(0, e) for e in extra])
    count = HOST.sliding_window(mask, kernel_shape, strides, dilations).sum(axis=tuple(range(n, 2 * n)))
    return B.divide(total, B.asarray(count.astype(B.dtype(x))))


def _max_indices(B: Any, win: Any, space: tuple, pairs: list, kernel: Any, strides: Any, dilations: Any,
                 storage_order: int) -> Any:  # fmt: skip
    """The flat input index (N, C and spatial, as ONNX numbers them) of each window's maximum."""
    n = len(space)
    shape = B.shape(win)
    lead, out = shape[:2], shape[2 : 2 + n]
    k = int(np.prod(kernel))
    arg = B.argmax(B.reshape(win, (*lead, *out, k)), -1, False)
    # host table: output position x window element -> spatial index in the unpadded input
    coords = []
    for i in range(n):
        start = np.arange(out[i]) * strides[i] - pairs[i][0]
        coords.append(start[:, None] + np.arange(kernel[i])[None, :] * dilations[i])
    index = np.zeros((*out, *kernel), np.int64)
    scale = 1  # row-major, or column-major for storage_order=1
    for i in reversed(range(n)) if storage_order == 0 else range(n):
        view = [1] * (2 * n)
        view[i], view[n + i] = out[i], kernel[i]
        index = index + coords[i].reshape(view) * scale
        scale *= space[i]
    table = index.reshape(-1)
    base = (np.arange(int(np.prod(out))) * k).reshape(out)
    flat = B.take(B.asarray(table), B.add(arg, B.asarray(base)), 0)
    offset = (np.arange(lead[0] * lead[1], dtype=np.int64) * int(np.prod(space))).reshape(*lead, *[1] * n)
    return B.add(flat, B.asarray(offset))


@register("MaxPool", 1, context=True)
def max_pool_1(
    B: Any,
    x: Any,
    *,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    kernel_shape: list[int],
    pads: list[int] | None = None,
    storage_order: int = 0,
    strides: list[int] | None = None,
    ctx: Any,
) -> Any:
    space = B.shape(x)[2:]
    low = _lowest(B.dtype(x))
    xp, pairs, strides, dilations, _ = _padded(
        B, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, low
    )
    if outputs_used(ctx) < 2:
        return _reduce(B, xp, kernel_shape, strides, dilations, "max")
    win = B.sliding_window(xp, list(kernel_shape), strides, dilations)
    y = B.max(win, _window_axes(len(kernel_shape)), False)
    return y, _max_indices(B, win, space, pairs, kernel_shape, strides, dilations, storage_order)


@register("LpPool", 1)
def lp_pool_1(
    B: Any,
    x: Any,
    *,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    kernel_shape: list[int],
    p: int = 2,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Any:
    xp, _, strides, dilations, _ = _padded(
        B, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, 0
    )
    total = _reduce(B, xp, kernel_shape, strides, dilations, "sum", lambda v: _lp_power(B, v, p))
    return _lp_root(B, total, p)


def _lp_power(B: Any, x: Any, p: Any) -> Any:
    if p == 2:
        return B.multiply(x, x)
    return B.abs(x) if p == 1 else B.power(B.abs(x), float(p))


def _lp_root(B: Any, total: Any, p: Any) -> Any:
    if p == 2:
        return B.sqrt(total)
    return total if p == 1 else B.power(total, 1.0 / p)


def _lp(B: Any, x: Any, axes: tuple[int, ...], p: Any, keepdims: bool) -> Any:
    return _lp_root(B, B.sum(_lp_power(B, x, p), axes, keepdims), p)


@register("GlobalAveragePool", 1)
def global_average_pool_1(B: Any, x: Any) -> Any:
    return B.mean(x, tuple(range(2, len(B.shape(x)))), True)


@register("GlobalMaxPool", 1)
def global_max_pool_1(B: Any, x: Any) -> Any:
    return B.max(x, tuple(range(2, len(B.shape(x)))), True)


@register("GlobalLpPool", 2)
def global_lp_pool_2(B: Any, x: Any, *, p: int = 2) -> Any:
    return _lp(B, x, tuple(range(2, len(B.shape(x)))), p, True)


def _unpool_bound(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
    """The flat positions lie in the output (its shape given, or derived as in ``max_unpool_9``)."""
    N, C, *space = B.shape(args[0])
    n = len(space)
    strides = list(attrs.get("strides") or [1] * n)
    pads = list(attrs.get("pads") or [0] * (2 * n))
    if len(args) > 2 and args[2] is not None:
        size = int(np.prod([int(v) for v in args[2]]))
    else:
        size = N * C * int(np.prod([(s - 1) * st - pads[i] - pads[i + n] + k
                                    for i, (s, st, k) in enumerate(zip(space, strides, attrs["kernel_shape"]))]))
    return [IndexBound(1, 0, size, f"the {size} positions of the output")]


@register("MaxUnpool", 9, static_inputs=(2,), index_bounds=_unpool_bound)
def max_unpool_9(
    B: Any,
    x: Any,
    indices: Any,
    output_shape: Any = None,
    *,
    kernel_shape: list[int],
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Any:
    """Scatter ``x`` to the flat positions ``indices`` of a zero tensor (MaxPool's Indices)."""
    N, C, *space = B.shape(x)
    n = len(space)
    strides = list(strides or [1] * n)
    pads = list(pads or [0] * (2 * n))
    if output_shape is not None:
        shape = [int(v) for v in output_shape]
    else:
        shape = [N, C] + [(s - 1) * st - pads[i] - pads[i + n] + k
                          for i, (s, st, k) in enumerate(zip(space, strides, kernel_shape))]  # fmt: skip
    size = int(np.prod(shape))
    flat = B.zeros((size,), B.dtype(x))
    flat = B.index_update(flat, (B.reshape(indices, (-1,)),), B.reshape(x, (-1,)))
    return B.reshape(flat, shape)
