"""Default device backend on MLX (Metal on Apple silicon, CPU elsewhere)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from .base import BINARY, REDUCE, UNARY

_TO_MX = {
    np.dtype(np.bool_): mx.bool_,
    np.dtype(np.uint8): mx.uint8, np.dtype(np.uint16): mx.uint16,
    np.dtype(np.uint32): mx.uint32, np.dtype(np.uint64): mx.uint64,
    np.dtype(np.int8): mx.int8, np.dtype(np.int16): mx.int16,
    np.dtype(np.int32): mx.int32, np.dtype(np.int64): mx.int64,
    np.dtype(np.float16): mx.float16, np.dtype(np.float32): mx.float32,
    np.dtype(np.float64): mx.float64, np.dtype(np.complex64): mx.complex64,
}  # fmt: skip
try:
    import ml_dtypes

    _TO_MX[np.dtype(ml_dtypes.bfloat16)] = mx.bfloat16
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    pass
_TO_NP = {v: k for k, v in _TO_MX.items()}
_NATIVE = {n: n for n in UNARY + BINARY + REDUCE} | {"bitwise_not": "bitwise_invert"}
_NATIVE.pop("fmod")


class MlxBackend:
    """MLX implementation of the backend protocol."""

    name = "mlx"
    is_host = False

    def compile(self, fn: Any) -> Any:
        return mx.compile(fn)

    def asarray(self, x: Any, dtype: Any = None) -> mx.array:
        if isinstance(x, mx.array):
            return x if dtype is None else x.astype(_TO_MX[np.dtype(dtype)])
        a = np.asarray(x, dtype=dtype)
        if a.dtype == _BF16:
            return mx.array(a.view(np.uint16)).view(mx.bfloat16)
        return mx.array(a)

    def to_numpy(self, x: Any) -> np.ndarray:
        if isinstance(x, mx.array) and x.dtype == mx.bfloat16:
            return np.asarray(x.view(mx.uint16)).view(_BF16)
        return np.asarray(x)

    def is_array(self, x: Any) -> bool:
        return isinstance(x, mx.array)

    def shape(self, x: mx.array) -> tuple[int, ...]:
        return tuple(x.shape)

    def dtype(self, x: mx.array) -> np.dtype:
        return _TO_NP[x.dtype]

    def supports_dtype(self, dtype: Any) -> bool:
        return np.dtype(dtype) in _TO_MX

    def astype(self, x: mx.array, dtype: Any) -> mx.array:
        return x.astype(_TO_MX[np.dtype(dtype)])

    def zeros(self, shape: Sequence[int], dtype: Any) -> mx.array:
        return mx.zeros(tuple(shape), dtype=_TO_MX[np.dtype(dtype)])

    def full(self, shape: Sequence[int], value: Any, dtype: Any) -> mx.array:
        return mx.full(tuple(shape), value, dtype=_TO_MX[np.dtype(dtype)])

    def arange(self, start: Any, stop: Any, step: Any, dtype: Any) -> mx.array:
        return mx.arange(start, stop, step, dtype=_TO_MX[np.dtype(dtype)])

    def fmod(self, a: mx.array, b: mx.array) -> mx.array:
        return a - b * self.trunc_divide(a, b) if mx.issubdtype(a.dtype, mx.integer) else _fmod_float(a, b)

    def trunc_divide(self, a: mx.array, b: mx.array) -> mx.array:
        q = mx.floor_divide(a, b)
        # floor and trunc differ when the division is inexact and the signs differ
        fix = (mx.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return mx.where(fix, q + 1, q)

    def where(self, cond: Any, x: Any, y: Any) -> mx.array:
        return mx.where(cond, x, y)

    def clip(self, x: mx.array, lo: Any, hi: Any) -> mx.array:
        return mx.clip(x, lo, hi)

    def argmax(self, x: mx.array, axis: int, keepdims: bool) -> mx.array:
        return mx.argmax(x, axis=axis, keepdims=keepdims).astype(mx.int64)

    def argmin(self, x: mx.array, axis: int, keepdims: bool) -> mx.array:
        return mx.argmin(x, axis=axis, keepdims=keepdims).astype(mx.int64)

    def cumsum(self, x: mx.array, axis: int) -> mx.array:
        return mx.cumsum(x, axis=axis).astype(x.dtype)

    def cumprod(self, x: mx.array, axis: int) -> mx.array:
        return mx.cumprod(x, axis=axis).astype(x.dtype)

    def logsumexp(self, x: mx.array, axis: Any, keepdims: bool) -> mx.array:
        return mx.logsumexp(x, axis=axis, keepdims=keepdims)

    def softmax(self, x: mx.array, axis: int) -> mx.array:
        return mx.softmax(x, axis=axis, precise=True)

    def reshape(self, x: mx.array, shape: Sequence[int]) -> mx.array:
        return mx.reshape(x, tuple(shape))

    def transpose(self, x: mx.array, perm: Sequence[int]) -> mx.array:
        return mx.transpose(x, tuple(perm))

    def broadcast_to(self, x: mx.array, shape: Sequence[int]) -> mx.array:
        return mx.broadcast_to(x, tuple(shape))

    def expand_dims(self, x: mx.array, axes: Sequence[int]) -> mx.array:
        return mx.expand_dims(x, tuple(axes))

    def squeeze(self, x: mx.array, axes: Sequence[int]) -> mx.array:
        return mx.squeeze(x, tuple(axes)) if len(axes) else x

    def concatenate(self, xs: Sequence[mx.array], axis: int) -> mx.array:
        return mx.concatenate(list(xs), axis=axis)

    def stack(self, xs: Sequence[mx.array], axis: int) -> mx.array:
        return mx.stack(list(xs), axis=axis)

    def split(self, x: mx.array, sizes: Sequence[int], axis: int) -> list[mx.array]:
        return mx.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis)

    def slice(self, x: mx.array, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> mx.array:
        return x[tuple(slice(a, b, c) for a, b, c in zip(starts, stops, steps))]

    def flip(self, x: mx.array, axes: Sequence[int]) -> mx.array:
        index = [slice(None)] * x.ndim
        for a in axes:
            index[a] = slice(None, None, -1)
        return x[tuple(index)]

    def tile(self, x: mx.array, reps: Sequence[int]) -> mx.array:
        return mx.tile(x, tuple(reps))

    def pad(self, x: mx.array, pads: Sequence[tuple[int, int]], value: Any) -> mx.array:
        return mx.pad(x, [tuple(p) for p in pads], constant_values=value)

    def take(self, x: mx.array, indices: mx.array, axis: int) -> mx.array:
        return mx.take(x, indices, axis=axis)

    def take_along_axis(self, x: mx.array, indices: mx.array, axis: int) -> mx.array:
        return mx.take_along_axis(x, indices, axis=axis)

    def matmul(self, a: mx.array, b: mx.array) -> mx.array:
        return mx.matmul(a, b)

    def einsum(self, equation: str, *operands: mx.array) -> mx.array:
        return mx.einsum(equation, *operands)


def _fmod_float(a: mx.array, b: mx.array) -> mx.array:
    r = mx.remainder(a, b)
    # remainder takes the divisor's sign, fmod the dividend's
    return mx.where((r != 0) & ((r < 0) != (a < 0)), r - b, r)


def _bind(name: str, fn_name: str) -> None:
    fn = getattr(mx, fn_name)
    if name in REDUCE:
        setattr(MlxBackend, name, lambda self, x, axis=None, keepdims=False: fn(x, axis=axis, keepdims=keepdims))
    else:
        setattr(MlxBackend, name, lambda self, *args: fn(*args))


_BF16 = np.dtype(ml_dtypes.bfloat16)
for _name, _fn in _NATIVE.items():
    _bind(_name, _fn)
