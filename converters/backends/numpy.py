"""Host backend on numpy: constant folding, shape arithmetic, and dtypes no device holds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import threefry
from .base import BINARY, REDUCE, UNARY, unpack_quantized

_erf = np.vectorize(math.erf, otypes=[np.float64])
_NATIVE = {n: n for n in UNARY + BINARY + REDUCE} | {"bitwise_not": "invert"}
_NATIVE.pop("erf")
_NATIVE.pop("sigmoid")
_SCATTER_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


class NumpyBackend:
    """Numpy implementation of the backend protocol (the reference semantics)."""

    name = "numpy"
    is_host = True
    traces = False  # whether ``compile`` traces (so a replay differs from a plain walk)

    def compile(self, fn: Any) -> Any:
        return fn

    def host_view(self, x: Any) -> np.ndarray:
        return np.asarray(x)

    def start(self, *arrays: Any) -> None:
        pass  # computed when made

    def prepare_thread(self, model: object = None) -> None:
        pass

    def retry_place(self, error: Exception) -> None:
        return None

    def asarray(self, x: Any, dtype: Any = None) -> np.ndarray:
        return np.asarray(x, dtype=dtype)

    def matmul_weight(self, w: np.ndarray, only_matmul: bool = False) -> np.ndarray:
        return np.asarray(w)

    def conv_weight(self, w: np.ndarray) -> np.ndarray:
        return np.asarray(w)

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

    def gelu(self, x: np.ndarray, approximate: str = "none") -> np.ndarray:
        if approximate == "tanh":
            return (x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))) / 2).astype(x.dtype)
        return (x * (1 + _erf(x / math.sqrt(2))) / 2).astype(x.dtype)

    def sigmoid(self, x: np.ndarray) -> np.ndarray:
        return (1 / (1 + np.exp(-x))).astype(x.dtype)

    def silu(self, x: np.ndarray) -> np.ndarray:
        return x * self.sigmoid(x)

    def trunc_divide(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        q = np.trunc(np.true_divide(a, b))
        return q.astype(np.result_type(a, b))

    def where(self, cond: Any, x: Any, y: Any) -> np.ndarray:
        return np.where(cond, x, y)

    def clip(self, x: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
        return np.clip(x, lo, hi)

    def bitcast(self, x: np.ndarray, dtype: Any) -> np.ndarray:
        return np.asarray(x).view(dtype)

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

    def argsort(self, x: np.ndarray, axis: int) -> np.ndarray:
        return np.argsort(x, axis=axis, kind="stable").astype(np.int64)

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

    def contiguous(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x)

    def pad(self, x: np.ndarray, pads: Sequence[tuple[int, int]], value: Any) -> np.ndarray:
        return np.pad(x, [tuple(p) for p in pads], mode="constant", constant_values=value)

    def take(self, x: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
        return np.take(x, indices, axis=axis)

    def take_along_axis(self, x: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
        return np.take_along_axis(x, indices, axis=axis)

    def scatter_along_axis(
        self, x: Any, indices: Any, updates: Any, axis: int, reduction: str = "none"
    ) -> np.ndarray:
        indices = np.asarray(indices)
        grid = list(np.indices(indices.shape, sparse=True))
        grid[axis % indices.ndim] = indices
        return self.index_update(x, grid, updates, reduction)

    def index_update(self, x: Any, index: Sequence[Any], updates: Any, reduction: str = "none") -> np.ndarray:
        out, index = np.array(x, copy=True), tuple(np.asarray(i) for i in index)
        if reduction == "none":
            out[index] = updates
        else:
            _SCATTER_UFUNC[reduction].at(out, index, updates)
        return out

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.matmul(a, b)
        # ml_dtypes' bfloat16 matmul answers float32: the product keeps its operands' dtype, as on the device
        return out.astype(a.dtype) if a.dtype == b.dtype and out.dtype != a.dtype else out

    def linear(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray, gelu: str | None = None) -> np.ndarray:
        y = self.matmul(x, weight) + bias
        return y if gelu is None else self.gelu(y, gelu)

    def einsum(self, equation: str, *operands: np.ndarray) -> np.ndarray:
        dtypes = {np.asarray(o).dtype for o in operands}
        if len(dtypes) == 1 and dtypes.pop().name == "bfloat16":  # numpy's einsum has no bfloat16 loop
            return np.einsum(equation, *(np.asarray(o, np.float32) for o in operands)).astype(operands[0].dtype)
        return np.einsum(equation, *operands)

    def int8_matmul_weight(self, w: np.ndarray) -> None:
        return None  # numpy's integer matmul is a generic loop, far slower than BLAS on float32

    def int8_matmul(self, a: np.ndarray, w: Any) -> np.ndarray:
        raise NotImplementedError("numpy has no int8 GEMM (int8_matmul_weight is None)")

    def interpolate_2d(self, x: np.ndarray, size: tuple[int, int], mode: str, align_corners: bool) -> None:
        return None  # the taps are numpy's own gathers already

    def dynamic_quantize_uint8(self, x: np.ndarray) -> None:
        return None  # the host runs the formula (no dispatch cost to save)

    def packed_matmul_is_fast(self, bits: int = 4, bf16_activations: bool = False) -> bool:
        return False  # quantized_matmul dequantizes at every call

    def quantized_matmul_weight(
        self, words: np.ndarray, scales: np.ndarray, biases: np.ndarray, group_size: int, bits: int,
        bf16_activations: bool = False,
    ) -> tuple:  # fmt: skip
        return (words, scales, biases, group_size, bits)

    def quantized_matmul(self, x: Any, w: tuple) -> np.ndarray:
        words, scales, biases, group_size, bits = w
        codes = unpack_quantized(words, bits).astype(np.float32)
        s, b = (np.repeat(np.asarray(v, np.float32), group_size, axis=-1) for v in (scales, biases))
        return np.matmul(np.asarray(x, np.float32), (codes * s + b).T).astype(x.dtype)

    def det(self, x: np.ndarray) -> np.ndarray:
        return np.linalg.det(x).astype(x.dtype)

    def sdpa(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, mask: Any = None,
             zero_nan: bool = False) -> np.ndarray:
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.matmul(q * q.dtype.type(scale), np.swapaxes(k, -1, -2))
        if isinstance(mask, str):  # "causal", aligned to the bottom-right corner
            mask = np.tril(np.ones(s.shape[-2:], dtype=bool), s.shape[-1] - s.shape[-2])
        if mask is not None:
            s = np.where(mask, s, s.dtype.type(-np.inf)) if mask.dtype == np.bool_ else s + mask
        with np.errstate(invalid="ignore"):
            out = np.matmul(self.softmax(s, -1).astype(q.dtype), v)
        return np.where(np.isnan(out), out.dtype.type(0), out) if zero_nan else out

    def sliding_window(self, x: Any, window: Any, strides: Any, dilations: Any) -> Any:
        n = len(window)
        span = [d * (k - 1) + 1 for k, d in zip(window, dilations)]
        v = np.lib.stride_tricks.sliding_window_view(x, span, axis=tuple(range(x.ndim - n, x.ndim)))
        lead = [slice(None)] * (x.ndim - n)
        steps = [slice(None, None, s) for s in strides] + [slice(None, None, d) for d in dilations]
        return v[tuple(lead + steps)]

    def conv(self, x: Any, w: Any, strides: Any, pads: Any, dilations: Any, groups: int) -> np.ndarray:
        n, (N, C), (Co, _, *K) = len(strides), x.shape[:2], w.shape
        x = np.pad(x, [(0, 0), (0, 0)] + [tuple(p) for p in pads])
        win = self.sliding_window(x, K, strides, dilations)
        win = win.reshape(N, groups, C // groups, *win.shape[2:])
        sp, ks = "xyz"[:n], "ijk"[:n]
        wg = w.reshape(groups, Co // groups, C // groups, *K)
        out = np.einsum(f"ngc{sp}{ks},goc{ks}->ngo{sp}", win, wg, optimize=True)
        return out.reshape(N, Co, *out.shape[3:]).astype(x.dtype)

    def fused_conv(self, x: Any, w: Any, bias: Any, add: Any, clip: Any, strides: Any, pads: Any, dilations: Any,
                   groups: int) -> None:
        return None

    def conv_transpose(self, x: Any, w: Any, strides: Any, dilations: Any, groups: int) -> np.ndarray:
        (N, C, *S), (_, Og, *K) = x.shape, w.shape
        full = [(s - 1) * st + d * (k - 1) + 1 for s, st, d, k in zip(S, strides, dilations, K)]
        out = np.zeros((N, groups, Og, *full), dtype=np.result_type(x, w))
        xg, wg = x.reshape(N, groups, C // groups, *S), w.reshape(groups, C // groups, Og, *K)
        for kk in np.ndindex(*K):
            part = np.einsum("ngc...,gco->ngo...", xg, wg[(Ellipsis, *kk)])
            starts = [k * d for k, d in zip(kk, dilations)]
            at = tuple(slice(a, a + (s - 1) * t + 1, t) for a, s, t in zip(starts, S, strides))
            out[(slice(None), slice(None), slice(None), *at)] += part
        return out.reshape(N, groups * Og, *full)

    def random_split(self, keys: Any, num: int) -> np.ndarray:
        return threefry.random_split(self, np.asarray(keys, np.int64), num)

    def gumbel(self, keys: Any, count: int) -> np.ndarray:
        with np.errstate(divide="ignore"):  # a word of 0 draws -inf, as on MLX
            return threefry.gumbel(self, np.asarray(keys, np.int64), count)

    def layer_norm(self, x: Any, weight: Any, bias: Any, eps: float) -> np.ndarray:
        xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
        mean = xf.mean(-1, keepdims=True)
        y = (xf - mean) / np.sqrt(((xf - mean) ** 2).mean(-1, keepdims=True) + eps)
        y = y if weight is None else y * weight
        return (y if bias is None else y + bias).astype(x.dtype)

    def group_norm(self, x: Any, groups: int, weight: Any, bias: Any, eps: float) -> np.ndarray:
        y = self.layer_norm(x.reshape(x.shape[0], groups, -1), None, None, eps).reshape(x.shape)
        channel = (-1,) + (1,) * (x.ndim - 2)
        y = y if weight is None else y * weight.reshape(channel)
        return (y if bias is None else y + bias.reshape(channel)).astype(x.dtype)

    def rms_norm(self, x: Any, weight: Any, eps: float) -> np.ndarray:
        xf = x.astype(np.float32) if x.dtype.itemsize < 4 else x
        y = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + eps)
        return (y if weight is None else y * weight).astype(x.dtype)

    def rotate_half_embedding(self, x: Any, cos: Any, sin: Any) -> np.ndarray:
        first, second = np.split(x, 2, axis=-1)
        return x * cos + np.concatenate([-second, first], axis=-1) * sin


def _bind(name: str, fn_name: str) -> None:
    fn = getattr(np, fn_name)
    if name in REDUCE:
        setattr(NumpyBackend, name, lambda self, x, axis=None, keepdims=False: fn(x, axis=axis, keepdims=keepdims))
    else:
        setattr(NumpyBackend, name, lambda self, *args: fn(*args))


for _name, _fn in _NATIVE.items():
    _bind(_name, _fn)
