"""Host backend on numpy: constant folding, shape arithmetic, and dtypes no device holds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import BINARY, REDUCE, UNARY

_erf = np.vectorize(math.erf, otypes=[np.float64])
_NATIVE = {n: n for n in UNARY + BINARY + REDUCE} | {"bitwise_not": "invert"}
_NATIVE.pop("erf")
_NATIVE.pop("sigmoid")


class NumpyBackend:
    """Numpy implementation of the backend protocol (the reference semantics)."""

    name = "numpy"
    is_host = True

    def compile(self, fn: Any) -> Any:
        return fn

    def asarray(self, x: Any, dtype: Any = None) -> np.ndarray:
        return np.asarray(x, dtype=dtype)

    def to_numpy(self, x: Any) -> np.ndarray:
        return np.asarray(x)

    def is_array(self, x: Any) -> bool:
        return isinstance(x, np.ndarray | np.generic)

    def shape(self, x: np.ndarray) -> tuple[int, ...]:
        return tuple(np.shape(x))

    def dtype(self, x: np.ndarray) -> np.dtype:
        return np.asarray(x).dtype

    def supports_dtype(self, dtype: Any) -> bool:
        return True

    def astype(self, x: np.ndarray, dtype: Any) -> np.ndarray:
        return np.asarray(x).astype(dtype)

    def zeros(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        return np.zeros(tuple(shape), dtype=dtype)

    def full(self, shape: Sequence[int], value: Any, dtype: Any) -> np.ndarray:
        return np.full(tuple(shape), value, dtype=dtype)

    def arange(self, start: Any, stop: Any, step: Any, dtype: Any) -> np.ndarray:
        return np.arange(start, stop, step, dtype=dtype)

    def erf(self, x: np.ndarray) -> np.ndarray:
        return _erf(x).astype(x.dtype)

    def sigmoid(self, x: np.ndarray) -> np.ndarray:
        return (1 / (1 + np.exp(-x))).astype(x.dtype)

    def trunc_divide(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        q = np.trunc(np.true_divide(a, b))
        return q.astype(np.result_type(a, b))

    def where(self, cond: Any, x: Any, y: Any) -> np.ndarray:
        return np.where(cond, x, y)

    def clip(self, x: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
        return np.clip(x, lo, hi)

    def argmax(self, x: np.ndarray, axis: int, keepdims: bool) -> np.ndarray:
        return np.argmax(x, axis=axis, keepdims=keepdims)

    def argmin(self, x: np.ndarray, axis: int, keepdims: bool) -> np.ndarray:
        return np.argmin(x, axis=axis, keepdims=keepdims)

    def cumsum(self, x: np.ndarray, axis: int) -> np.ndarray:
        return np.cumsum(x, axis=axis, dtype=x.dtype)

    def cumprod(self, x: np.ndarray, axis: int) -> np.ndarray:
        return np.cumprod(x, axis=axis, dtype=x.dtype)

    def logsumexp(self, x: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
        m = np.max(x, axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
        return out if keepdims else np.squeeze(out, axis=axis)

    def softmax(self, x: np.ndarray, axis: int) -> np.ndarray:
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)

    def reshape(self, x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
        return np.reshape(x, tuple(shape))

    def transpose(self, x: np.ndarray, perm: Sequence[int]) -> np.ndarray:
        return np.transpose(x, tuple(perm))

    def broadcast_to(self, x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
        return np.broadcast_to(x, tuple(shape))

    def expand_dims(self, x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
        return np.expand_dims(x, tuple(axes))

    def squeeze(self, x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
        return np.squeeze(x, tuple(axes))

    def concatenate(self, xs: Sequence[np.ndarray], axis: int) -> np.ndarray:
        return np.concatenate(xs, axis=axis)

    def stack(self, xs: Sequence[np.ndarray], axis: int) -> np.ndarray:
        return np.stack(xs, axis=axis)

    def split(self, x: np.ndarray, sizes: Sequence[int], axis: int) -> list[np.ndarray]:
        return np.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis)

    def slice(self, x: np.ndarray, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> np.ndarray:
        return x[tuple(slice(a, b, c) for a, b, c in zip(starts, stops, steps))]

    def flip(self, x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
        return np.flip(x, tuple(axes))

    def tile(self, x: np.ndarray, reps: Sequence[int]) -> np.ndarray:
        return np.tile(x, tuple(reps))

    def pad(self, x: np.ndarray, pads: Sequence[tuple[int, int]], value: Any) -> np.ndarray:
        return np.pad(x, [tuple(p) for p in pads], mode="constant", constant_values=value)

    def take(self, x: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
        return np.take(x, indices, axis=axis)

    def take_along_axis(self, x: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
        return np.take_along_axis(x, indices, axis=axis)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.matmul(a, b)

    def einsum(self, equation: str, *operands: np.ndarray) -> np.ndarray:
        return np.einsum(equation, *operands)


def _bind(name: str, fn_name: str) -> None:
    fn = getattr(np, fn_name)
    if name in REDUCE:
        setattr(NumpyBackend, name, lambda self, x, axis=None, keepdims=False: fn(x, axis=axis, keepdims=keepdims))
    else:
        setattr(NumpyBackend, name, lambda self, *args: fn(*args))


for _name, _fn in _NATIVE.items():
    _bind(_name, _fn)
