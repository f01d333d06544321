"""Reductions (Reduce*, ArgMax/ArgMin), scans (CumSum, CumProd) and TopK.

Reduce ops take ``axes`` as an attribute up to opset 17 (ReduceSum: 12) and as a static input
after. A reduction over an empty set of elements gives the reduction's identity (0 for sums,
1 for products, -inf for max and log-sums), computed from the static shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .registry import register


def _identity(kind: str, dtype: np.dtype) -> Any:
    """The value a reduction over no elements gives."""
    if kind in ("max", "min"):
        if dtype == np.bool_:
            return kind == "min"
        sign = -1 if kind == "max" else 1
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            return info.min if kind == "max" else info.max
        return sign * np.inf
    if kind in ("logsum", "logsumexp"):
        return -np.inf
    if kind == "mean":
        return np.nan
    return 1 if kind == "prod" else 0


def _reduce_prim(kind: str) -> str:
    return {"logsumexp": "sum", "logsum": "sum", "l1": "sum", "l2": "sum", "sumsquare": "sum"}.get(kind, kind)


def _before(B: Any, kind: str, x: Any) -> Any:
    """The element-wise step applied before the reduction."""
    if kind == "l1":
        return B.abs(x)
    if kind in ("l2", "sumsquare"):
        return B.multiply(x, x)
    return x


def _after(B: Any, kind: str, y: Any) -> Any:
    """The element-wise step applied after the reduction."""
    if kind == "l2":
        return B.sqrt(y)
    if kind == "logsum":
        return B.log(y)
    return y


def _reduce(B: Any, kind: str, x: Any, axes: Any, keepdims: int, noop_with_empty_axes: int) -> Any:
    shape = B.shape(x)
    ndim = len(shape)
    axes = None if axes is None else tuple(int(a) % max(ndim, 1) for a in np.asarray(axes).reshape(-1))
    if not axes:
        if noop_with_empty_axes:
            # no reduction: only the element-wise parts apply (ReduceL2 gives |x|, ...)
            return _after(B, kind, _before(B, kind, x)) if kind != "logsumexp" else x
        axes = tuple(range(ndim))
    out_shape = tuple(1 if a in axes else d for a, d in enumerate(shape) if keepdims or a not in axes)
    if any(shape[a] == 0 for a in axes):
        return B.full(out_shape, _identity(kind, B.dtype(x)), B.dtype(x))
    if kind == "logsumexp":
        return B.logsumexp(x, axes, bool(keepdims))
    y = getattr(B, _reduce_prim(kind))(_before(B, kind, x), axes, bool(keepdims))
    return _after(B, kind, y)


def _define(op_type: str, kind: str, attr_until: int, input_since: int) -> None:
    """Register ``op_type`` with axes as an attribute (opset 1) and as an input (``input_since``)."""

    def with_attr(B: Any, x: Any, *, axes: Any = None, keepdims: int = 1) -> Any:
        return _reduce(B, kind, x, axes, keepdims, 0)

    def with_input(
        B: Any, x: Any, axes: Any = None, *, keepdims: int = 1, noop_with_empty_axes: int = 0
    ) -> Any:
        return _reduce(B, kind, x, axes, keepdims, noop_with_empty_axes)

    for fn, since, static in ((with_attr, attr_until, ()), (with_input, input_since, (1,))):
        fn.__name__ = fn.__qualname__ = f"{op_type.lower()}_{since}"
        register(op_type, since, static_inputs=static)(fn)


REDUCE_OPS = {
    "ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
    "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSum": "logsum",
    "ReduceLogSumExp": "logsumexp", "ReduceSumSquare": "sumsquare",
}  # fmt: skip
for _op, _kind in REDUCE_OPS.items():
    _define(_op, _kind, 1, 13 if _op == "ReduceSum" else 18)


# -- ArgMax / ArgMin -----------------------------------------------------------------------


def _arg(B: Any, prim: str, x: Any, axis: int, keepdims: int, select_last_index: int) -> Any:
    if not select_last_index:
        return getattr(B, prim)(x, axis, bool(keepdims))
    # the last extreme is the first one of the flipped axis
    n = B.shape(x)[axis]
    first = getattr(B, prim)(B.flip(x, [axis]), axis, bool(keepdims))
    return B.subtract(B.full((), n - 1, np.int64), first)


@register("ArgMax", 1)
def argmax_1(B: Any, x: Any, *, axis: int = 0, keepdims: int = 1) -> Any:
    return _arg(B, "argmax", x, axis, keepdims, 0)


@register("ArgMax", 12)
def argmax_12(B: Any, x: Any, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Any:
    return _arg(B, "argmax", x, axis, keepdims, select_last_index)


@register("ArgMin", 1)
def argmin_1(B: Any, x: Any, *, axis: int = 0, keepdims: int = 1) -> Any:
    return _arg(B, "argmin", x, axis, keepdims, 0)


@register("ArgMin", 12)
def argmin_12(B: Any, x: Any, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Any:
    return _arg(B, "argmin", x, axis, keepdims, select_last_index)


# -- CumSum / CumProd ----------------------------------------------------------------------


def _scan(
    B: Any, prim: Callable[[Any, int], Any], identity: int, x: Any, axis: Any, exclusive: int, reverse: int
) -> Any:
    shape = B.shape(x)
    axis = int(np.asarray(axis).reshape(-1)[0]) % len(shape)
    if reverse:
        x = B.flip(x, [axis])
    if exclusive:
        # shift by one: the identity first, then every element but the last
        n = shape[axis]
        head = B.full([1 if a == axis else d for a, d in enumerate(shape)], identity, B.dtype(x))
        starts, stops = [0] * len(shape), list(shape)
        stops[axis] = max(n - 1, 0)
        x = B.concatenate([head, B.slice(x, starts, stops, [1] * len(shape))], axis)
    y = prim(x, axis)
    return B.flip(y, [axis]) if reverse else y


@register("CumSum", 11, static_inputs=(1,))
def cumsum_11(B: Any, x: Any, axis: Any, *, exclusive: int = 0, reverse: int = 0) -> Any:
    return _scan(B, B.cumsum, 0, x, axis, exclusive, reverse)


@register("CumProd", 26, static_inputs=(1,))
def cumprod_26(B: Any, x: Any, axis: Any, *, exclusive: int = 0, reverse: int = 0) -> Any:
    return _scan(B, B.cumprod, 1, x, axis, exclusive, reverse)


# -- TopK ----------------------------------------------------------------------------------


def _topk(B: Any, x: Any, k: int, axis: int, largest: int) -> tuple[Any, Any]:
    """The k largest (or smallest) along ``axis``, sorted; equal values keep index order."""
    shape = B.shape(x)
    axis = axis % len(shape)
    n = shape[axis]
    starts, stops, steps = [0] * len(shape), list(shape), [1] * len(shape)
    stops[axis] = k
    if largest:
        # a stable ascending sort of the reversed axis, read backwards, is descending with
        # ties in increasing index order
        order = B.flip(B.argsort(B.flip(x, [axis]), axis), [axis])
        order = B.subtract(B.full((), n - 1, np.int64), B.slice(order, starts, stops, steps))
    else:
        order = B.slice(B.argsort(x, axis), starts, stops, steps)
    return B.take_along_axis(x, order, axis), order


@register("TopK", 1)
def topk_1(B: Any, x: Any, *, k: int, axis: int = -1) -> tuple[Any, Any]:
    return _topk(B, x, k, axis, 1)


@register("TopK", 10, static_inputs=(1,))
def topk_10(B: Any, x: Any, k: Any, *, axis: int = -1) -> tuple[Any, Any]:
    return _topk(B, x, int(np.asarray(k).reshape(-1)[0]), axis, 1)


@register("TopK", 11, static_inputs=(1,))
def topk_11(B: Any, x: Any, k: Any, *, axis: int = -1, largest: int = 1, sorted: int = 1) -> tuple[Any, Any]:  # noqa: A002
    """``sorted=0`` allows any order; the sorted order is one of them."""
    return _topk(B, x, int(np.asarray(k).reshape(-1)[0]), axis, largest)
