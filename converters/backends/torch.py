"""Backend on PyTorch (CPU here, CUDA where present), the same primitives as MLX."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .base import BINARY, REDUCE, UNARY

_TO_TORCH = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.uint8): torch.uint8, np.dtype(np.uint16): torch.uint16,
    np.dtype(np.uint32): torch.uint32, np.dtype(np.uint64): torch.uint64,
    np.dtype(np.int8): torch.int8, np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64, np.dtype(np.complex64): torch.complex64,
}  # fmt: skip
try:
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
    _TO_TORCH[_BF16] = torch.bfloat16
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    _BF16 = None
_HOST_UINTS = {np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.uint64)}
_TO_NP = {v: k for k, v in _TO_TORCH.items()}
_NATIVE = {n: n for n in UNARY + BINARY} | {
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh",
    "arctanh": "atanh", "power": "pow", "equal": "eq", "less": "lt", "less_equal": "le",
    "greater": "gt", "greater_equal": "ge", "left_shift": "bitwise_left_shift",
    "right_shift": "bitwise_right_shift", "divide": "true_divide",
}  # fmt: skip
_REDUCE = {"sum": "sum", "prod": "prod", "max": "amax", "min": "amin", "mean": "mean"}


class TorchBackend:
    """PyTorch implementation of the backend protocol."""

    name = "torch"
    is_host = False

    def __init__(self, device: str | None = None) -> None:
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))

    def compile(self, fn: Any) -> Any:
        return fn  # torch.compile costs more than it saves on graphs replayed a few times

    def asarray(self, x: Any, dtype: Any = None) -> torch.Tensor:
        if isinstance(x, torch.Tensor):
            return x if dtype is None else x.to(_TO_TORCH[np.dtype(dtype)])
        a = np.asarray(x, dtype=dtype)
        if a.dtype == _BF16:
            return torch.from_numpy(a.view(np.uint16).copy()).view(torch.bfloat16).to(self.device)
        return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def to_numpy(self, x: Any) -> np.ndarray:
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu()
            if x.dtype == torch.bfloat16:
                return x.view(torch.uint16).numpy().view(_BF16)
            return x.numpy()
        return np.asarray(x)

    def is_array(self, x: Any) -> bool:
        return isinstance(x, torch.Tensor)

    def shape(self, x: torch.Tensor) -> tuple[int, ...]:
        return tuple(x.shape)

    def dtype(self, x: torch.Tensor) -> np.dtype:
        return _TO_NP[x.dtype]

    def supports_dtype(self, dtype: Any) -> bool:
        # torch has uint16/32/64 tensors but few kernels for them: they stay on the host
        return np.dtype(dtype) in _TO_TORCH and np.dtype(dtype) not in _HOST_UINTS

    def astype(self, x: torch.Tensor, dtype: Any) -> torch.Tensor:
        return x.to(_TO_TORCH[np.dtype(dtype)])

    def zeros(self, shape: Sequence[int], dtype: Any) -> torch.Tensor:
        return torch.zeros(tuple(shape), dtype=_TO_TORCH[np.dtype(dtype)], device=self.device)

    def full(self, shape: Sequence[int], value: Any, dtype: Any) -> torch.Tensor:
        return torch.full(tuple(shape), value, dtype=_TO_TORCH[np.dtype(dtype)], device=self.device)

    def arange(self, start: Any, stop: Any, step: Any, dtype: Any) -> torch.Tensor:
        return torch.arange(start, stop, step, dtype=_TO_TORCH[np.dtype(dtype)], device=self.device)

    def _t(self, x: Any) -> torch.Tensor:
        return x if isinstance(x, torch.Tensor) else torch.as_tensor(x, device=self.device)

    def floor_divide(self, a: Any, b: Any) -> torch.Tensor:
        return torch.div(self._t(a), self._t(b), rounding_mode="floor")

    def trunc_divide(self, a: Any, b: Any) -> torch.Tensor:
        return torch.div(self._t(a), self._t(b), rounding_mode="trunc")

    def where(self, cond: Any, x: Any, y: Any) -> torch.Tensor:
        return torch.where(self._t(cond), self._t(x), self._t(y))

    def clip(self, x: torch.Tensor, lo: Any, hi: Any) -> torch.Tensor:
        return torch.clamp(x, lo, hi)

    def argmax(self, x: torch.Tensor, axis: int, keepdims: bool) -> torch.Tensor:
        return torch.argmax(x, dim=axis, keepdim=keepdims)

    def argmin(self, x: torch.Tensor, axis: int, keepdims: bool) -> torch.Tensor:
        return torch.argmin(x, dim=axis, keepdim=keepdims)

    def cumsum(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.cumsum(x, dim=axis, dtype=x.dtype)

    def cumprod(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.cumprod(x, dim=axis, dtype=x.dtype)

    def logsumexp(self, x: torch.Tensor, axis: Any, keepdims: bool) -> torch.Tensor:
        return torch.logsumexp(x, dim=_dims(axis, x.ndim), keepdim=keepdims)

    def softmax(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.softmax(x, dim=axis)

    def reshape(self, x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return torch.reshape(x, tuple(shape))

    def transpose(self, x: torch.Tensor, perm: Sequence[int]) -> torch.Tensor:
        return torch.permute(x, tuple(perm))

    def broadcast_to(self, x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        return torch.broadcast_to(self._t(x), tuple(shape))

    def expand_dims(self, x: torch.Tensor, axes: Sequence[int]) -> torch.Tensor:
        ndim = x.ndim + len(axes)
        for a in sorted(a % ndim for a in axes):
            x = torch.unsqueeze(x, a)
        return x

    def squeeze(self, x: torch.Tensor, axes: Sequence[int]) -> torch.Tensor:
        return torch.squeeze(x, tuple(axes)) if len(axes) else x

    def concatenate(self, xs: Sequence[torch.Tensor], axis: int) -> torch.Tensor:
        return torch.cat(list(xs), dim=axis)

    def stack(self, xs: Sequence[torch.Tensor], axis: int) -> torch.Tensor:
        return torch.stack(list(xs), dim=axis)

    def split(self, x: torch.Tensor, sizes: Sequence[int], axis: int) -> list[torch.Tensor]:
        return list(torch.split(x, list(sizes), dim=axis))

    def slice(self, x: torch.Tensor, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> torch.Tensor:
        # torch has no negative strides: take the positive-step slice, then flip it
        index, flips = [], []
        for axis, (a, b, c) in enumerate(zip(starts, stops, steps)):
            if c > 0:
                index.append(slice(a, b, c))
                continue
            n = x.shape[axis]
            first, count = _negative_slice(a, b, c, n)
            last = first - (count - 1) * (-c) if count else 0
            index.append(slice(last, first + 1 if count else 0, -c))
            flips.append(axis)
        out = x[tuple(index)]
        return torch.flip(out, flips) if flips else out

    def flip(self, x: torch.Tensor, axes: Sequence[int]) -> torch.Tensor:
        return torch.flip(x, tuple(axes))

    def tile(self, x: torch.Tensor, reps: Sequence[int]) -> torch.Tensor:
        return torch.tile(x, tuple(reps))

    def pad(self, x: torch.Tensor, pads: Sequence[tuple[int, int]], value: Any) -> torch.Tensor:
        flat = [v for p in reversed(list(pads)) for v in p]
        return torch.nn.functional.pad(x, flat, mode="constant", value=value)

    def take(self, x: torch.Tensor, indices: torch.Tensor, axis: int) -> torch.Tensor:
        indices = self._t(indices)
        axis = axis % x.ndim
        out = torch.index_select(x, axis, indices.reshape(-1).long())
        return out.reshape(x.shape[:axis] + indices.shape + x.shape[axis + 1 :])

    def take_along_axis(self, x: torch.Tensor, indices: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.take_along_dim(x, self._t(indices).long(), dim=axis)

    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)

    def einsum(self, equation: str, *operands: torch.Tensor) -> torch.Tensor:
        return torch.einsum(equation, *operands)


def _dims(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    return (axis,) if isinstance(axis, int) else tuple(axis)


def _negative_slice(start: int, stop: int | None, step: int, n: int) -> tuple[int, int]:
    """First index and element count of x[start:stop:step] for a negative step."""
    idx = range(n)[slice(start, stop, step)]
    return (idx[0] if len(idx) else 0), len(idx)


def _bind(name: str, fn_name: str) -> None:
    fn = getattr(torch, fn_name)

    def op(self: TorchBackend, *args: Any) -> torch.Tensor:
        args = tuple(self._t(a) if not isinstance(a, torch.Tensor) and i == 0 else a for i, a in enumerate(args))
        return fn(*args)

    setattr(TorchBackend, name, op)


def _bind_reduce(name: str, fn_name: str) -> None:
    fn = getattr(torch, fn_name)

    def op(self: TorchBackend, x: torch.Tensor, axis: Any = None, keepdims: bool = False) -> torch.Tensor:
        if name == "prod":  # torch.prod takes one dim at a time
            for a in sorted(_dims(axis, x.ndim), reverse=True):
                x = torch.prod(x, dim=a, keepdim=keepdims)
            return x
        dims = _dims(axis, x.ndim)
        if not dims:
            return x
        return fn(x, dim=dims, keepdim=keepdims)

    setattr(TorchBackend, name, op)


for _name, _fn in _NATIVE.items():
    if _name not in ("floor_divide",):
        _bind(_name, _fn)
for _name, _fn in _REDUCE.items():
    _bind_reduce(_name, _fn)
