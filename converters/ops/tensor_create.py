"""Ops that make tensors: Constant, ConstantOfShape, Range, OneHot, EyeLike, Trilu."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..values import np_dtype
from .registry import register
from .tensor_shape import normalize_axis

_LOW_FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


@register("Constant", 1)
def constant_1(
    B: Any,
    *,
    value: np.ndarray | None = None,
    sparse_value: np.ndarray | None = None,
    value_float: float | None = None,
    value_floats: list[float] | None = None,
    value_int: int | None = None,
    value_ints: list[int] | None = None,
    value_string: str | None = None,
    value_strings: list[str] | None = None,
) -> np.ndarray:
    """Exactly one attribute is set; a sparse value arrives already densified."""
    given = {
        "value": value,
        "sparse_value": sparse_value,
        "value_float": None if value_float is None else np.array(value_float, np.float32),
        "value_floats": None if value_floats is None else np.array(value_floats, np.float32),
        "value_int": None if value_int is None else np.array(value_int, np.int64),
        "value_ints": None if value_ints is None else np.array(value_ints, np.int64),
        "value_string": None if value_string is None else np.array(value_string, dtype=object),
        "value_strings": None if value_strings is None else np.array(value_strings, dtype=object),
    }
    set_ = [v for v in given.values() if v is not None]
    if len(set_) != 1:
        raise ValueError(f"Constant needs exactly one value attribute, got {len(set_)}")
    return set_[0]


@register("ConstantOfShape", 9, static_inputs=(0,))
def constant_of_shape_9(B: Any, input: np.ndarray, *, value: np.ndarray | None = None) -> Any:
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    shape = tuple(int(d) for d in np.asarray(input).reshape(-1))
    return B.full(shape, value.reshape(-1)[0].item(), value.dtype)


@register("Range", 11, static_inputs=(0, 1, 2))
def range_11(B: Any, start: np.ndarray, limit: np.ndarray, delta: np.ndarray, *, stash_type: int = 1) -> Any:
    """The length depends on the values, so all three are host scalars; float16 steps in float32."""
    dtype = np.asarray(start).dtype
    work = np.float32 if dtype in _LOW_FLOATS and stash_type == 1 else dtype
    s, lim, d = (np.asarray(v).reshape(()).astype(work) for v in (start, limit, delta))
    if np.issubdtype(dtype, np.integer):
        n = max(-((int(s) - int(lim)) // int(d)), 0)  # exact ceil division
    else:
        n = max(int(np.ceil((float(lim) - float(s)) / float(d))), 0)
    out = (s + np.arange(n, dtype=work) * d).astype(dtype)
    return B.asarray(out)


@register("OneHot", 9, static_inputs=(1,))
def one_hot_9(B: Any, indices: Any, depth: np.ndarray, values: Any, *, axis: int = -1) -> Any:
    depth = int(np.asarray(depth).reshape(-1)[0])
    rank = len(B.shape(indices)) + 1
    axis = normalize_axis(axis, rank)
    idx = B.astype(indices, np.int64)
    zero = B.zeros((), np.int64)
    idx = B.where(B.less(idx, zero), B.add(idx, B.asarray(depth, np.int64)), idx)
    classes = B.reshape(B.arange(0, depth, 1, np.int64), [depth if i == axis else 1 for i in range(rank)])
    hot = B.equal(B.expand_dims(idx, [axis]), classes)  # out-of-range indices match no class
    off, on = B.split(B.reshape(values, (2,)), [1, 1], 0)
    return B.where(hot, B.reshape(on, ()), B.reshape(off, ()))


@register("EyeLike", 9)
def eye_like_9(B: Any, input: Any, *, dtype: int | None = None, k: int = 0) -> Any:
    n, m = B.shape(input)
    out_dtype = B.dtype(input) if dtype is None else np_dtype(dtype)
    return B.asarray(np.eye(n, m, k, dtype=out_dtype))


@register("Trilu", 14, static_inputs=(1,))
def trilu_14(B: Any, input: Any, k: np.ndarray | None = None, *, upper: int = 1) -> Any:
    shape = B.shape(input)
    k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    rows, cols = np.indices(shape[-2:], sparse=True)
    keep = (cols - rows >= k) if upper else (cols - rows <= k)
    return B.where(B.asarray(keep), input, B.zeros((), B.dtype(input)))
