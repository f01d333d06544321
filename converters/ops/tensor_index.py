"""Gather and scatter ops, and the selections whose result depends on values (NonZero, Unique...)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .registry import IndexBound, register
from .tensor_shape import normalize_axis


def _wrap(B: Any, indices: Any, n: Any) -> Any:
    """Negative indices count from the end, as in every ONNX gather/scatter."""
    if np.issubdtype(B.dtype(indices), np.unsignedinteger):
        return indices
    zero = B.zeros((), B.dtype(indices))
    return B.where(B.less(indices, zero), B.add(indices, B.asarray(n, B.dtype(indices))), indices)


def _along(rank: int, axis: int, n: int) -> list[int]:
    """The shape that puts a length-``n`` vector on ``axis`` of a rank-``rank`` array."""
    return [n if i == axis else 1 for i in range(rank)]


def _axis_bound(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
    """Input 1 indexes axis ``axis`` of input 0 (negative indices count from the end)."""
    shape = B.shape(args[0])
    axis = normalize_axis(attrs.get("axis", 0), len(shape))
    n = shape[axis]
    return [IndexBound(1, -n, n, f"axis {axis} of the data, of size {n}")]


def _tuple_bound(batched: bool) -> Any:
    """Input 1's last axis holds index tuples into the data axes after the ``batch_dims`` ones (GatherND)
    or from the first (ScatterND)."""

    def bounds(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
        b = attrs.get("batch_dims", 0) if batched else 0
        k = B.shape(args[1])[-1]
        dims = tuple(B.shape(args[0])[b : b + k])
        return [IndexBound(1, tuple(-d for d in dims), dims, f"data axes {b}..{b + k - 1} of sizes {list(dims)}")]

    return bounds


@register("Gather", 1, index_bounds=_axis_bound)
def gather_1(B: Any, data: Any, indices: Any, *, axis: int = 0) -> Any:
    axis = normalize_axis(axis, len(B.shape(data)))
    return B.take(data, _wrap(B, indices, B.shape(data)[axis]), axis)


@register("GatherElements", 11, index_bounds=_axis_bound)
def gather_elements_11(B: Any, data: Any, indices: Any, *, axis: int = 0) -> Any:
    axis = normalize_axis(axis, len(B.shape(data)))
    return B.take_along_axis(data, _wrap(B, indices, B.shape(data)[axis]), axis)


def _components(B: Any, indices: Any, dims: tuple[int, ...]) -> list[Any]:
    """The last axis of ``indices`` as one wrapped index array per indexed dimension."""
    k = len(dims)
    parts = B.split(indices, [1] * k, len(B.shape(indices)) - 1) if k else []
    return [_wrap(B, B.squeeze(p, [len(B.shape(p)) - 1]), d) for p, d in zip(parts, dims)]


def _gather_nd(B: Any, data: Any, indices: Any, batch_dims: int) -> Any:
    dshape, ishape = B.shape(data), B.shape(indices)
    b, k = batch_dims, ishape[-1]
    nb = math.prod(dshape[:b])
    block, rest = dshape[b : b + k], dshape[b + k :]
    # one flat index into data viewed as (batch * prod(block), *rest)
    flat = B.zeros(ishape[:-1], np.int64)
    for comp, n in zip(_components(B, B.astype(indices, np.int64), block), block):
        flat = B.add(B.multiply(flat, B.asarray(n, np.int64)), comp)
    flat = B.reshape(flat, (nb, -1))
    offsets = np.arange(nb, dtype=np.int64).reshape(nb, 1) * math.prod(block)
    flat = B.add(flat, B.asarray(offsets))
    out = B.take(B.reshape(data, (nb * math.prod(block),) + rest), flat, 0)
    return B.reshape(out, ishape[:-1] + rest)


@register("GatherND", 11, index_bounds=_tuple_bound(True))
def gather_nd_11(B: Any, data: Any, indices: Any) -> Any:
    return _gather_nd(B, data, indices, 0)


@register("GatherND", 12, index_bounds=_tuple_bound(True))
def gather_nd_12(B: Any, data: Any, indices: Any, *, batch_dims: int = 0) -> Any:
    return _gather_nd(B, data, indices, batch_dims)


def _scatter_elements(B: Any, data: Any, indices: Any, updates: Any, axis: int, reduction: str) -> Any:
    axis = normalize_axis(axis, len(B.shape(data)))
    indices = _wrap(B, indices, B.shape(data)[axis])
    return B.scatter_along_axis(data, indices, updates, axis, reduction)


@register("Scatter", 9, index_bounds=_axis_bound)
def scatter_9(B: Any, data: Any, indices: Any, updates: Any, *, axis: int = 0) -> Any:
    """Deprecated in opset 11: ScatterElements without a reduction."""
    return _scatter_elements(B, data, indices, updates, axis, "none")


@register("ScatterElements", 11, index_bounds=_axis_bound)
def scatter_elements_11(B: Any, data: Any, indices: Any, updates: Any, *, axis: int = 0) -> Any:
    return _scatter_elements(B, data, indices, updates, axis, "none")


@register("ScatterElements", 16, index_bounds=_axis_bound)
def scatter_elements_16(
    B: Any, data: Any, indices: Any, updates: Any, *, axis: int = 0, reduction: str = "none"
) -> Any:
    return _scatter_elements(B, data, indices, updates, axis, reduction)


def _scatter_nd(B: Any, data: Any, indices: Any, updates: Any, reduction: str) -> Any:
    dims = B.shape(data)[: B.shape(indices)[-1]]
    return B.index_update(data, _components(B, indices, dims), updates, reduction)


@register("ScatterND", 11, index_bounds=_tuple_bound(False))
def scatter_nd_11(B: Any, data: Any, indices: Any, updates: Any) -> Any:
    return _scatter_nd(B, data, indices, updates, "none")


@register("ScatterND", 16, index_bounds=_tuple_bound(False))
def scatter_nd_16(B: Any, data: Any, indices: Any, updates: Any, *, reduction: str = "none") -> Any:
    return _scatter_nd(B, data, indices, updates, reduction)


def _write_bound(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
    """A linear write of ``update`` starts where it still fits the cache (a circular one wraps)."""
    if attrs.get("mode", "linear") != "linear":
        return []
    axis = normalize_axis(attrs.get("axis", -2), len(B.shape(args[0])))
    room = B.shape(args[0])[axis] - B.shape(args[1])[axis]
    return [IndexBound(2, 0, room + 1, f"a write of {B.shape(args[1])[axis]} rows into {B.shape(args[0])[axis]}")]


@register("TensorScatter", 24, index_bounds=_write_bound)
def tensor_scatter_24(
    B: Any, past_cache: Any, update: Any, write_indices: Any = None, *, axis: int = -2, mode: str = "linear"
) -> Any:
    """Writes ``update`` into the cache at each batch row's write index along ``axis``."""
    shape, ushape = B.shape(past_cache), B.shape(update)
    rank = len(shape)
    axis = normalize_axis(axis, rank)
    seq = B.reshape(B.arange(0, ushape[axis], 1, np.int64), _along(rank, axis, ushape[axis]))
    if write_indices is not None:
        start = B.reshape(B.astype(write_indices, np.int64), _along(rank, 0, shape[0]))
        seq = B.add(seq, start)
    if mode == "circular":
        seq = B.remainder(seq, B.asarray(shape[axis], np.int64))
    elif mode != "linear":
        raise ValueError(f"unknown TensorScatter mode {mode!r}")
    return B.scatter_along_axis(past_cache, B.broadcast_to(seq, ushape), update, axis, "none")


@register("Compress", 9, static_inputs=(1,))
def compress_9(B: Any, input: Any, condition: np.ndarray, *, axis: int | None = None) -> Any:
    if axis is None:
        input, axis = B.reshape(input, (-1,)), 0
    axis = normalize_axis(axis, len(B.shape(input)))
    # a condition shorter than the axis selects from its first entries only
    keep = np.nonzero(np.asarray(condition, dtype=bool).reshape(-1)[: B.shape(input)[axis]])[0]
    return B.take(input, B.asarray(keep.astype(np.int64)), axis)


def _length_bound(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
    t = B.shape(args[0])[attrs.get("time_axis", 0)]
    return [IndexBound(1, 0, t + 1, f"lengths of at most the {t} time steps")]


@register("ReverseSequence", 10, index_bounds=_length_bound)
def reverse_sequence_10(
    B: Any, input: Any, sequence_lens: Any, *, batch_axis: int = 1, time_axis: int = 0
) -> Any:
    """Reverses the first ``sequence_lens[b]`` steps of every batch row: one gather along time."""
    shape = B.shape(input)
    rank = len(shape)
    t = B.reshape(B.arange(0, shape[time_axis], 1, np.int64), _along(rank, time_axis, shape[time_axis]))
    lens = B.reshape(B.astype(sequence_lens, np.int64), _along(rank, batch_axis, shape[batch_axis]))
    src = B.where(B.less(t, lens), B.subtract(B.subtract(lens, B.asarray(1, np.int64)), t), t)
    return B.take_along_axis(input, B.broadcast_to(src, shape), time_axis)


@register("NonZero", 9, host=True)
def nonzero_9(B: Any, X: Any) -> np.ndarray:
    x = np.asarray(X)
    return np.array(np.nonzero(x.reshape(1) if x.ndim == 0 else x), dtype=np.int64)


@register("Unique", 11, host=True)
def unique_11(B: Any, X: Any, *, axis: int | None = None, sorted: int = 1) -> tuple[np.ndarray, ...]:
    x = np.asarray(X)
    if axis is not None:
        axis = normalize_axis(axis, x.ndim)
    y, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not sorted:  # order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y, first, counts, inverse = (
            np.take(y, order, axis=axis or 0),
            first[order],
            counts[order],
            rank[inverse],
        )
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)
