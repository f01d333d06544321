"""Default device backend on MLX (Metal on Apple silicon, CPU elsewhere)."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from . import mlx_conv
from . import mlx_fastmath as fastmath
from .base import BINARY, REDUCE, UNARY, transposed
from .threads import track_thread

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
# on the CPU device these come from mlx_fastmath (the wheel's own are scalar libm-bound loops)
_FAST = ("exp", "erf", "tanh", "sigmoid")
_SQRT1_2 = 0.7071067811865476
_SQRT_2_PI = 0.7978845608028654  # sqrt(2 / pi), the tanh GELU's factor
for _name in _FAST:
    _NATIVE.pop(_name)

# MLX's Linux CPU allocator keeps only 32 MB of freed buffers (Metal keeps up to its memory limit), so a
# larger activation is unmapped after each use and page-faulted in again at the next call: ViT-base at
# batch 16 took 1.26 M minor faults a call and ran 1.4x slower than with a 2 GB cache. On the CPU device the
# cache may hold a sixteenth of the machine's memory (at most 4 GB), unless the user set a limit already.
MLX_CPU_DEFAULT_CACHE_LIMIT = 32 << 20


def _cpu_cache_limit() -> int:
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows)
        memory = 8 << 30
    return max(MLX_CPU_DEFAULT_CACHE_LIMIT, min(4 << 30, memory // 16))


_cpu_cache_size = MLX_CPU_DEFAULT_CACHE_LIMIT
if mx.default_device() == mx.cpu:
    _cpu_cache_size = _cpu_cache_limit()
    _previous = mx.set_cache_limit(_cpu_cache_size)
    if _previous != MLX_CPU_DEFAULT_CACHE_LIMIT:
        _cpu_cache_size = _previous
        mx.set_cache_limit(_previous)  # the user's own

# That cache keeps a freed buffer only while there is room under its limit, and never evicts one to make room:
# once a model's buffers fill it, another model's allocations miss at every call (AST after wav2vec2-base on the
# CPU: 6.3 s a call, against 4.1 s after a clear and 3.9 alone). So a model that starts on a nearly full cache that
# another model filled clears it first, and its own buffers fill it (``prepare_thread``).
_cpu_cache_owner: list[int | None] = [None]
NEARLY_FULL = 0.9

# MLX computes float32 matmuls, convolutions and attention in TF32 (10-bit mantissa) on GPUs that have it
# (CUDA, Apple's M5) unless MLX_ENABLE_TF32=0; transformers and onnxruntime compute float32 in float32, and so
# do we unless the user chose (on an H200, MiniLM's hidden states moved 7.5e-4 from onnxruntime's under TF32).
# MLX reads the variable at its first GPU matmul, so this holds where no matmul ran before the import.
os.environ.setdefault("MLX_ENABLE_TF32", "0")


class MlxBackend:
    """MLX implementation of the backend protocol."""

    name = "mlx"
    is_host = False
    traces = True  # whether ``compile`` traces (so a replay differs from a plain walk)

    def compile(self, fn: Any) -> Any:
        return mx.compile(fn)

    def start(self, *arrays: Any) -> None:
        mx.async_eval(*[a for a in arrays if isinstance(a, mx.array)])

    def prepare_thread(self, model: object = None) -> None:
        track_thread()
        if model is not None and mx.default_device() == mx.cpu:
            _claim_cpu_cache(id(model))

    def retry_place(self, error: Exception) -> Any:
        # The float64 ops of a graph (rare: ONNX's double tests, a preprocessing step) run on the CPU stream, the
        # rest stays on the GPU; Apple silicon's memory is shared, so nothing is copied there.
        if isinstance(error, ValueError) and "float64" in str(error) and mx.default_device() != mx.cpu:
            return mx.stream(mx.cpu)
        return None

    def asarray(self, x: Any, dtype: Any = None) -> mx.array:
        if isinstance(x, mx.array):
            return x if dtype is None else x.astype(_TO_MX[np.dtype(dtype)])
        a = np.asarray(x, dtype=dtype)
        if a.dtype == _BF16:
            return mx.array(a.view(np.uint16)).view(mx.bfloat16)
        return mx.array(a, dtype=_TO_MX.get(a.dtype))  # without a dtype, mlx makes float64 float32

    def to_numpy(self, x: Any) -> np.ndarray:
        if isinstance(x, mx.array) and x.dtype == mx.bfloat16:
            return np.asarray(x.view(mx.uint16)).view(_BF16)
        return np.asarray(x)

    def matmul_weight(self, w: np.ndarray, only_matmul: bool = False) -> mx.array:
        # held (N, K) and read transposed, as mlx-lm's Linear holds its weight (x @ W.T): on the CPU's BLAS a
        # decode step of a few rows streams each weight once (SmolLM2-135M's layers: 8% faster at batch 1,
        # 17% at batch 8, the same at a 128-token prompt)
        weight = self.asarray(transposed(w)).T
        mx.eval(weight)  # a view now, not a pending op: an op runs on the stream of the thread that made it
        return weight

    def conv_weight(self, w: np.ndarray) -> mx.array:
        return self.asarray(w)

    def host_view(self, x: Any) -> np.ndarray | None:
        # MLX's memory is the host's on the CPU and on Apple silicon (unified), not under CUDA
        on_cuda = mx.default_device() == mx.gpu and not mx.metal.is_available()
        if on_cuda or x.dtype == mx.bfloat16:
            return None
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

    def bitcast(self, x: mx.array, dtype: Any) -> mx.array:
        return x.view(_TO_MX[np.dtype(dtype)])

    def argmax(self, x: mx.array, axis: int, keepdims: bool) -> mx.array:
        return mx.argmax(x, axis=axis, keepdims=keepdims).astype(mx.int64)

    def argmin(self, x: mx.array, axis: int, keepdims: bool) -> mx.array:
        return mx.argmin(x, axis=axis, keepdims=keepdims).astype(mx.int64)

    def cumsum(self, x: mx.array, axis: int) -> mx.array:
        return mx.cumsum(x, axis=axis).astype(x.dtype)

    def cumprod(self, x: mx.array, axis: int) -> mx.array:
        return mx.cumprod(x, axis=axis).astype(x.dtype)

    def logsumexp(self, x: mx.array, axis: Any, keepdims: bool) -> mx.array:
        if fastmath.applies(x):
            return fastmath.logsumexp(x, axis, keepdims)
        return mx.logsumexp(x, axis=axis, keepdims=keepdims)

    def softmax(self, x: mx.array, axis: int) -> mx.array:
        if fastmath.applies(x):
            return fastmath.softmax(x, axis)
        return mx.softmax(x, axis=axis, precise=True)

    def argsort(self, x: mx.array, axis: int) -> mx.array:
        return mx.argsort(x, axis=axis).astype(mx.int64)  # mlx's sort is stable

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

    def contiguous(self, x: mx.array) -> mx.array:
        return mx.contiguous(x)

    def pad(self, x: mx.array, pads: Sequence[tuple[int, int]], value: Any) -> mx.array:
        return mx.pad(x, [tuple(p) for p in pads], constant_values=value)

    def take(self, x: mx.array, indices: mx.array, axis: int) -> mx.array:
        return mx.take(x, indices, axis=axis)

    def take_along_axis(self, x: mx.array, indices: mx.array, axis: int) -> mx.array:
        return mx.take_along_axis(x, indices, axis=axis)

    def scatter_along_axis(
        self, x: Any, indices: Any, updates: Any, axis: int, reduction: str = "none"
    ) -> mx.array:
        indices, updates = mx.array(indices), mx.array(updates)
        if reduction == "none":
            return mx.put_along_axis(x, indices, updates.astype(x.dtype), axis=axis)
        axis %= indices.ndim
        rank = indices.ndim
        grid = [
            mx.arange(n).reshape([-1 if d == i else 1 for d in range(rank)])
            for i, n in enumerate(indices.shape)
        ]
        grid[axis] = indices
        return self.index_update(x, grid, updates, reduction)

    def index_update(self, x: Any, index: Sequence[Any], updates: Any, reduction: str = "none") -> mx.array:
        index, updates = tuple(mx.array(i) for i in index), mx.array(updates).astype(x.dtype)
        if reduction == "none":
            out = mx.array(x)  # a copy: item assignment replaces the array it is applied to
            out[index] = updates
            return out
        at = x.at[index]
        return {"add": at.add, "mul": at.multiply, "max": at.maximum, "min": at.minimum}[reduction](updates)

    def matmul(self, a: mx.array, b: mx.array) -> mx.array:
        return mx.matmul(a, b)

    def einsum(self, equation: str, *operands: mx.array) -> mx.array:
        return mx.einsum(equation, *operands)

    def linear(self, x: mx.array, weight: mx.array, bias: mx.array, gelu: str | None = None) -> mx.array:
        y = mx.matmul(x, weight) + bias  # mx.addmm is no faster on the CPU, and compile fuses the add
        return y if gelu is None else self.gelu(y, gelu)

    def int8_matmul_weight(self, w: np.ndarray) -> None:
        return None  # MLX has no integer GEMM: its integer matmuls run in a generic loop

    def int8_matmul(self, a: mx.array, w: Any) -> mx.array:
        raise NotImplementedError("MLX has no int8 GEMM (int8_matmul_weight is None)")

    def interpolate_2d(self, x: mx.array, size: tuple[int, int], mode: str, align_corners: bool) -> None:
        return None  # MLX has no resize kernel (mlx.nn.Upsample gathers too): the taps fuse under mx.compile

    def dynamic_quantize_uint8(self, x: mx.array) -> None:
        return None  # mx.compile fuses the op's element-wise formula already

    def packed_matmul_is_fast(self, bits: int = 4, bf16_activations: bool = False) -> bool:
        # Metal and CUDA have quantized kernels; the CPU's is scalar (and slower still in bfloat16)
        return mx.default_device() != mx.cpu

    def quantized_matmul_weight(
        self, words: np.ndarray, scales: np.ndarray, biases: np.ndarray, group_size: int, bits: int,
        bf16_activations: bool = False,
    ) -> tuple:  # fmt: skip
        return (mx.array(words), mx.array(scales), mx.array(biases), group_size, bits)

    def quantized_matmul(self, x: mx.array, w: tuple) -> mx.array:
        words, scales, biases, group_size, bits = w
        return mx.quantized_matmul(x, words, scales, biases, transpose=True, group_size=group_size, bits=bits)

    def det(self, x: mx.array) -> mx.array:
        # LU with partial pivoting (CPU stream: mlx has no GPU LU): product of U's diagonal,
        # negated once per row swap
        lu, pivots = mx.linalg.lu_factor(x, stream=mx.cpu)
        swaps = mx.sum(pivots != mx.arange(x.shape[-1], dtype=pivots.dtype), axis=-1)
        sign = 1 - 2 * (swaps % 2).astype(x.dtype)
        return sign * mx.prod(mx.diagonal(lu, axis1=-2, axis2=-1), axis=-1)

    def sdpa(self, q: mx.array, k: mx.array, v: mx.array, scale: float, mask: Any = None,
             zero_nan: bool = False) -> mx.array:
        additive = mask is None or isinstance(mask, mx.array) and mask.dtype == q.dtype
        if fastmath.applies(q) and q.dtype == mx.float32 and additive:
            # the CPU's fused kernel runs the scalar mx.softmax: composed with ours it is ~1.7x faster
            out = _attention_in_pieces(q, k, v, scale, mask)
        else:
            out = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
        return mx.where(mx.isnan(out), mx.array(0, out.dtype), out) if zero_nan else out

    def sliding_window(self, x: mx.array, window: Any, strides: Any, dilations: Any) -> mx.array:
        n, lead = len(window), x.shape[: x.ndim - len(window)]
        rowstrides = [int(np.prod(x.shape[i + 1 :])) for i in range(x.ndim)]
        space = x.shape[x.ndim - n :]
        out = mlx_conv.window_count(space, window, strides, dilations)
        sp = rowstrides[x.ndim - n :]
        shape = (*lead, *out, *window)
        steps = [a * s for a, s in zip(sp, strides)] + [a * d for a, d in zip(sp, dilations)]
        st = (*rowstrides[: x.ndim - n], *steps)
        return mx.as_strided(x, shape, st)

    def conv(self, x: mx.array, w: mx.array, strides: Any, pads: Any, dilations: Any, groups: int) -> Any:
        if mx.default_device() == mx.cpu:
            y = mlx_conv.conv(x, w, strides, pads, dilations, groups)  # MLX's CPU kernel is slow for these
            if y is not None:
                return y
        # mlx convolves channels-last: (N, *S, C) with (O, *K, C/groups)
        n = len(strides)
        last = (0, *range(2, n + 2), 1)
        y = mx.conv_general(
            mx.transpose(x, last), mx.transpose(w, last), stride=list(strides),
            padding=([p[0] for p in pads], [p[1] for p in pads]), kernel_dilation=list(dilations),
            groups=groups,
        )  # fmt: skip
        return mx.transpose(y, (0, n + 1, *range(1, n + 1)))

    def fused_conv(self, x: Any, w: Any, bias: Any, add: Any, clip: Any, strides: Any, pads: Any, dilations: Any,
                   groups: int) -> None:
        return None  # the ops one after the other: mx.compile fuses the element-wise ones into one kernel

    def conv_transpose(self, x: mx.array, w: mx.array, strides: Any, dilations: Any, groups: int) -> mx.array:
        # a flipped convolution of the stride-dilated input, with (C, O/g, *K) regrouped to (O, *K, C/g)
        (C, Og, *K), n = w.shape, len(strides)
        wg = mx.reshape(w, (groups, C // groups, Og, *K))
        wg = mx.reshape(mx.transpose(wg, (0, 2, *range(3, n + 3), 1)), (groups * Og, *K, C // groups))
        full = [d * (k - 1) for k, d in zip(K, dilations)]
        x = mx.transpose(x, (0, *range(2, n + 2), 1))
        if mx.default_device() != mx.cpu and any(s > 1 for s in strides):
            # mlx-cuda's conv_general with input_dilation > 1 gave wrong values (5 strided ConvTranspose cases of
            # the node suite on an H200, off by up to 34): the zeros go in here instead
            x, strides = _dilate(x, strides), [1] * n
        y = mx.conv_general(
            x, wg, stride=1, padding=(full, full),
            kernel_dilation=list(dilations), input_dilation=list(strides), groups=groups, flip=True,
        )  # fmt: skip
        return mx.transpose(y, (0, n + 1, *range(1, n + 1)))

    def random_split(self, keys: mx.array, num: int) -> mx.array:
        return _per_key(keys, *_random("split", num)).astype(mx.int64)

    def gumbel(self, keys: mx.array, count: int) -> mx.array:
        return _per_key(keys, *_random("gumbel", count))

    def silu(self, x: mx.array) -> mx.array:
        return x * self.sigmoid(x)  # fastmath's on the CPU (the wheel's mx.sigmoid is scalar); a compiled replay fuses

    def gelu(self, x: mx.array, approximate: str = "none") -> mx.array:
        if approximate == "tanh":
            return x * (1 + self.tanh(_SQRT_2_PI * (x + 0.044715 * x * x * x))) / 2
        if fastmath.applies(x):
            return fastmath.gelu(x)
        return x * (1 + mx.erf(x * _SQRT1_2)) / 2

    def layer_norm(self, x: mx.array, weight: Any, bias: Any, eps: float) -> mx.array:
        return mx.fast.layer_norm(x, weight, bias, eps)

    def rms_norm(self, x: mx.array, weight: Any, eps: float) -> mx.array:
        return mx.fast.rms_norm(x, weight, eps)

    def group_norm(self, x: mx.array, groups: int, weight: Any, bias: Any, eps: float) -> mx.array:
        y = mx.fast.layer_norm(mx.reshape(x, (x.shape[0], groups, -1)), None, None, eps).reshape(x.shape)
        return _per_channel(y, weight, bias)

    def rotate_half_embedding(self, x: mx.array, cos: mx.array, sin: mx.array) -> mx.array:
        # not mx.fast.rope: it makes its own angles from positions, and these come from the model (scaled)
        half = x.shape[-1] // 2
        rotated = mx.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rotated * sin


#: bytes of float32 scores one piece of an attention computes at a time on the CPU (``_attention_in_pieces``): within
#: a server CPU's L3 (Whisper's encoder at 3 windows: 4 MB pieces 2.59 s, 16 MB 2.53, 64 MB 4.97, whole 3.1-4.8)
SCORES_PER_PIECE = 16 << 20


def _attention_in_pieces(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array | None) -> mx.array:
    """``_grouped_attention`` one sequence and a block of query rows at a time, each block's scores at most
    ``SCORES_PER_PIECE`` bytes: the ~10 element-wise passes of the softmax then stay in the CPU's cache. Whisper
    tiny.en's encoder (6 heads, 1,500 x 1,500 scores a head) at 3 windows: 3.1-4.8 -> 2.5 s; at one window 0.76 ->
    0.78 s (docs/performance.md). MLX evaluates each piece's chain before the next, in one trace."""
    b, h, rows, _ = q.shape
    step = max(1, SCORES_PER_PIECE // (4 * h * k.shape[2]))
    if b * rows * h * k.shape[2] * 4 <= SCORES_PER_PIECE:
        return _grouped_attention(q, k, v, scale, mask)
    if mask is not None:
        mask = mx.reshape(mask, (1,) * (4 - mask.ndim) + mask.shape)
    sequences = []
    for i in range(b):
        one = slice(i, i + 1)
        pieces = []
        for j in range(0, rows, step):
            block = slice(j, j + step)
            piece_mask = None if mask is None else mask[one if mask.shape[0] > 1 else slice(0, 1), :,
                                                        block if mask.shape[2] > 1 else slice(0, 1)]
            pieces.append(_grouped_attention(q[one, :, block], k[one], v[one], scale, piece_mask))
        sequences.append(mx.concatenate(pieces, axis=2) if len(pieces) > 1 else pieces[0])
    return mx.concatenate(sequences, axis=0)


def _grouped_attention(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: mx.array | None) -> mx.array:
    """softmax(q k^T * scale + mask) v, where query head i reads kv head i // n (n = query heads / kv heads).

    The n query heads of a group are rows of one product with their kv head, so the cache is read as it is, never
    repeated n times (SmolLM2-135M's 9 / 3 heads at 8 rows, a 64-key decode step: 411 -> 189 us a layer).
    """
    b, h, rows, d = q.shape
    groups, keys = k.shape[1], k.shape[2]
    n = h // groups
    scores = mx.matmul(mx.reshape(q * scale, (b, groups, n * rows, d)), mx.swapaxes(k, -1, -2))
    if mask is not None:
        mask = mx.reshape(mask, (1,) * (4 - mask.ndim) + mask.shape)
        if mask.shape[1] not in (1, h):  # raises, as the product of all heads would (a kv head's count is no match)
            mask = mx.broadcast_to(mask, (mask.shape[0], h, *mask.shape[2:]))
        # (b, h, rows, keys) masks split the heads as the query does; (b, 1, rows, keys) ones reach every head
        mask = mx.reshape(mask, (mask.shape[0], groups, n, *mask.shape[2:])) if mask.shape[1] == h else mask[:, :, None]
        scores = mx.reshape(mx.reshape(scores, (b, groups, n, rows, keys)) + mask, scores.shape)
    return mx.reshape(mx.matmul(fastmath.softmax(scores, -1), v), (b, h, rows, v.shape[-1]))


def _per_channel(y: mx.array, weight: Any, bias: Any) -> mx.array:
    """``y * weight + bias`` with (C,) vectors on the channel axis of (N, C, *S) ``y`` (inside mx.compile, one pass)."""
    channel = (-1,) + (1,) * (y.ndim - 2)
    y = y if weight is None else y * mx.reshape(weight, channel)
    return y if bias is None else y + mx.reshape(bias, channel)


def _claim_cpu_cache(owner: int) -> None:
    """Clear MLX's CPU buffer cache when it is nearly full of buffers that another model left there."""
    if _cpu_cache_owner[0] != owner:
        if _cpu_cache_owner[0] is not None and mx.get_cache_memory() >= NEARLY_FULL * _cpu_cache_size:
            mx.clear_cache()
        _cpu_cache_owner[0] = owner


def _dilate(x: mx.array, strides: Sequence[int]) -> mx.array:
    """Channels-last ``x`` (N, *spatial, C) with ``stride - 1`` zeros between neighbours along each spatial axis."""
    for axis, s in enumerate(strides, start=1):
        if s > 1:
            shape = list(x.shape)
            x = mx.expand_dims(x, axis + 1)
            x = mx.pad(x, [(0, s - 1) if a == axis + 1 else (0, 0) for a in range(x.ndim)])
            x = mx.reshape(x, [*shape[:axis], shape[axis] * s, *shape[axis + 1:]])
            x = x[(slice(None),) * axis + (slice(0, (shape[axis] - 1) * s + 1),)]
    return x


def _fmod_float(a: mx.array, b: mx.array) -> mx.array:
    r = mx.remainder(a, b)
    # remainder takes the divisor's sign, fmod the dividend's
    return mx.where((r != 0) & ((r < 0) != (a < 0)), r - b, r)


def _per_key(keys: mx.array, draw: Any, draw_each: Any) -> mx.array:
    """``draw`` (of one uint32 key) of each key of int64 ``keys`` (..., 2); ``draw_each`` is it vmapped."""
    keys = keys.astype(mx.uint32)
    if keys.shape == (1, 2):  # a single row decoding: without vmap, whose graph costs ~20 us more per step
        return draw(keys[0])[None]
    out = draw_each(keys.reshape(-1, 2))
    return out.reshape(*keys.shape[:-1], *out.shape[1:])


@functools.lru_cache(maxsize=128)
def _random(kind: str, size: int) -> tuple[Any, Any]:
    """mx.random itself, the bits threefry.py reproduces elsewhere: ``split(key, size)`` or
    ``gumbel((size,), key=key)`` of one key, and the same vmapped over keys."""
    if kind == "split":
        def draw(key: mx.array) -> mx.array:
            return mx.random.split(key, size)
    else:
        def draw(key: mx.array) -> mx.array:
            return mx.random.gumbel((size,), key=key)
    return draw, mx.vmap(draw)


def _bind_fast(name: str) -> None:
    fast, native = getattr(fastmath, name), getattr(mx, name)
    setattr(MlxBackend, name, lambda self, x: fast(x) if fastmath.applies(x) else native(x))


def _bind(name: str, fn_name: str) -> None:
    fn = getattr(mx, fn_name)
    if name in REDUCE:
        setattr(MlxBackend, name, lambda self, x, axis=None, keepdims=False: fn(x, axis=axis, keepdims=keepdims))
    else:
        setattr(MlxBackend, name, lambda self, *args: fn(*args))


_BF16 = np.dtype(ml_dtypes.bfloat16)
for _name, _fn in _NATIVE.items():
    _bind(_name, _fn)
for _name in _FAST:
    _bind_fast(_name)
