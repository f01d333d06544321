"""Backend on PyTorch (CPU here, CUDA where present), the same primitives as MLX."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import platform
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as _F

from . import threefry
from .base import BINARY, UNARY, transposed

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
# oneDNN's linear on weights blocked at load (torch.compile's CPU path with freezing uses the same two ops);
# the blocking is chosen for a few rows (decode steps) and serves any count. TRANSMUTER_MLX_ONEDNN=off keeps
# torch's own matmul (MKL: PyTorch eager's summation order, bit for bit)
_ONEDNN_LINEAR = (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
                  and platform.machine().lower() in ("x86_64", "amd64")
                  and os.environ.get("TRANSMUTER_MLX_ONEDNN", "").lower() not in ("0", "off", "false", "no"))
_ROWS_HINT = 8
# rows x K x N of a float32 linear layer at or below which MKL's plain GEMM beats oneDNN's call, whose ~15 us floor
# (a 64 x 64 weight at one row: 15 against 3 us; 576 x 192 at one row 20 against 10, at two 21 against 18)
_PLAIN_WORK = 1 << 18
_ONEDNN_CONV = _ONEDNN_LINEAR and hasattr(torch.ops.mkldnn, "_convolution_pointwise")
_ANY_SIZE = "any"  # ``conv_weight``'s weight after calls of two input sizes: plain again, for good
_REDUCE = {"sum": "sum", "prod": "prod", "max": "amax", "min": "amin", "mean": "mean"}
_SCATTER_REDUCE = {"mul": "prod", "max": "amax", "min": "amin"}


def _symmetric_pads(x: torch.Tensor, pads: Any) -> tuple[torch.Tensor, list[int]]:
    """``x`` and one padding amount a spatial axis, as torch's convolutions take it: where the two ends of an axis
    differ, ``x`` is padded here and the convolution pads nothing."""
    if all(lo == hi for lo, hi in pads):
        return x, [lo for lo, _ in pads]
    return _F.pad(x, [v for p in reversed(list(pads)) for v in p]), [0] * len(pads)


class TorchBackend:
    """PyTorch implementation of the backend protocol."""

    name = "torch"
    is_host = False
    traces = False  # whether ``compile`` traces (so a replay differs from a plain walk)

    def __init__(self, device: str | None = None) -> None:
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self._mask_facts: tuple[Any, tuple[bool, int, int, bool, bool]] = (None, (False, 0, 0, False, False))  # last
        # float32 weights in oneDNN's blocked layout, by the id of the tensor ``matmul_weight`` returned (while it lives)
        self._onednn: dict[int, torch.Tensor] = {}
        # the plain (N, K) copies of small blocked weights that only matmul reads, made at their first few-row call
        self._plain: dict[int, torch.Tensor] = {}
        # conv_weight's stand-ins -> (the weight, the input size of its oneDNN layout; None before the first call,
        # _ANY_SIZE once plain for good)
        self._onednn_conv: dict[int, tuple[torch.Tensor, Any]] = {}

    def compile(self, fn: Any) -> Any:
        # not torch.compile: 1.01-1.04x on BGE-base at 11-13 s a shape, and it cannot trace the oneDNN path, which
        # alone gives 1.63x (docs/performance.md, "2026-12-05, evening"). Inference
        # mode skips autograd's bookkeeping of every op (a decode step runs ~9% faster).
        @functools.wraps(fn)
        def replay(*arrays: Any) -> Any:
            with torch.inference_mode():
                return fn(*arrays)

        return replay

    def start(self, *arrays: Any) -> None:
        pass  # eager: computed when made (CUDA queues them already)

    def prepare_thread(self, model: object = None) -> None:
        pass

    def retry_place(self, error: Exception) -> None:
        return None

    def asarray(self, x: Any, dtype: Any = None) -> torch.Tensor:
        if isinstance(x, torch.Tensor):
            return x if dtype is None else x.to(_TO_TORCH[np.dtype(dtype)])
        a = np.asarray(x, dtype=dtype)
        if a.dtype == _BF16:
            return torch.from_numpy(a.view(np.uint16).copy()).view(torch.bfloat16).to(self.device)
        if not a.flags.writeable or not a.flags.c_contiguous:
            a = np.array(a)  # torch wants a writable, contiguous buffer
        return torch.from_numpy(a).to(self.device)

    def matmul_weight(self, w: np.ndarray, only_matmul: bool = False) -> torch.Tensor:
        # held (N, K) and read transposed (BLAS's flag), as nn.Linear holds its weight: a decode step of a few rows
        # then streams each weight once, without packing it (SmolLM2-135M's layers at batch 8: 20% faster on MKL;
        # the same at batch 1 and at a 128-token prompt). cuBLAS reads either layout alike.
        if self.device.type != "cpu":
            return self.asarray(w)
        held = self.asarray(transposed(w))
        if held.dtype != torch.float32 or not _ONEDNN_LINEAR:
            return held.t()
        blocked = torch.ops.mkldnn._reorder_linear_weight(held, _ROWS_HINT)
        # read by matmul and linear alone: the blocked copy is the weight, and a zero-strided stand-in of its shape
        # the key to it (SmolLM2-135M's fp32 export on torch: 470 MB less after load, peak 340 MB less)
        weight = torch.zeros((), dtype=held.dtype).expand(held.shape[::-1]) if only_matmul else held.t()
        self._onednn[id(weight)] = blocked
        weakref.finalize(weight, self._onednn.pop, id(weight), None)
        return weight

    def conv_weight(self, w: np.ndarray) -> torch.Tensor:
        # oneDNN's own layout of the weight, made once (torch.compile's frozen CPU convolutions do the same): from a
        # plain weight oneDNN reorders it at every call, 10-30% of MobileNetV2's convolutions (a 1 x 1 from 160 to 960
        # channels at 7 x 7: 168 -> 129 us). The layout depends on the input's size: one chosen without it ran DETR's
        # 1 x 1 from 512 to 2048 channels at 25 x 34 3.5x slower, one for 25 x 34 ran it at 20 x 30 4x slower, and
        # one made at each new size slowed DETR fed two sizes in turn by 2-10%. So it is made for the first input's
        # size (``_packed``), and a call of another size puts the plain weight back for good: a model fed one size
        # (a classifier's 224 x 224) gains, one fed many (DETR's images) runs as before. Held alone either way, behind
        # a zero-strided stand-in of the weight's shape (``matmul_weight``)
        held = self.asarray(w)
        if not (_ONEDNN_CONV and held.ndim == 4 and held.dtype == torch.float32 and self.device.type == "cpu"):
            return held
        weight = torch.zeros((), dtype=held.dtype).expand(held.shape)
        self._onednn_conv[id(weight)] = (held, None)  # the weight, and the input size it is laid out for
        weakref.finalize(weight, self._onednn_conv.pop, id(weight), None)
        return weight

    def _packed(self, w: torch.Tensor, x: torch.Tensor, padding: list[int], strides: Any, dilations: Any,
                groups: int) -> torch.Tensor:
        """The weight a oneDNN convolution of ``x`` reads: ``conv_weight``'s layout for this input size (made at the
        first call), the plain weight (after a call of another size), or ``w`` itself."""
        entry = self._onednn_conv.get(id(w)) if self._onednn_conv else None
        if entry is None:
            return w
        held, size = entry
        if size is None:
            held = torch.ops.mkldnn._reorder_convolution_weight(held, padding, list(strides), list(dilations), groups,
                                                                list(x.shape))
            self._onednn_conv[id(w)] = (held, x.shape)
        elif size not in (x.shape, _ANY_SIZE):
            held = held.to_dense()
            self._onednn_conv[id(w)] = (held, _ANY_SIZE)
        return held

    def host_view(self, x: Any) -> np.ndarray | None:
        if x.device.type != "cpu" or x.dtype == torch.bfloat16:
            return None
        return x.detach().numpy()

    def to_numpy(self, x: Any) -> np.ndarray:
        if isinstance(x, torch.Tensor):
            if self._onednn and id(x) in self._onednn and not any(x.stride()):
                return self._onednn[id(x)].to_dense().numpy().T  # a stand-in (``matmul_weight``): the blocked values
            if self._onednn_conv and id(x) in self._onednn_conv and not any(x.stride()):
                held, size = self._onednn_conv[id(x)]  # a stand-in (``conv_weight``): its plain or laid-out values
                return (held if size in (None, _ANY_SIZE) else held.to_dense()).numpy()
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

    def bitcast(self, x: torch.Tensor, dtype: Any) -> torch.Tensor:
        return x.view(_TO_TORCH[np.dtype(dtype)])

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

    def argsort(self, x: torch.Tensor, axis: int) -> torch.Tensor:
        return torch.argsort(x, dim=axis, stable=True)

    def reshape(self, x: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        y = torch.reshape(x, tuple(shape))
        if y.dim() > 1 and y.shape[0] == 1 and not y.is_contiguous():
            # a view's unit leading axis gets whatever stride reshape picks, and torch's kernels read the strides
            # as a dimension order: an export's Transpose + Reshape of (1, 4096, 256) to (1, 256, 64, 64) is
            # channels-last memory with batch stride 256, which the bilinear resize read as a strided NCHW image
            # (SegFormer-b0's four upsamplings 18.5 -> 1.6-8.8 ms each) and the convolutions after it as NCHW
            # too. The stride of the channels-last (or any dense) layout instead, the same addresses.
            y = y.as_strided(y.shape, (max(n * s for n, s in zip(y.shape[1:], y.stride()[1:])), *y.stride()[1:]))
        return y

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

    def contiguous(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous()

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

    def scatter_along_axis(
        self, x: Any, indices: Any, updates: Any, axis: int, reduction: str = "none"
    ) -> torch.Tensor:
        x = self._t(x)
        indices, updates = self._t(indices).long(), self._t(updates).to(x.dtype)
        if reduction == "none":
            return torch.scatter(x, axis, indices, updates)
        if reduction == "add":
            return torch.scatter_add(x, axis, indices, updates)
        return torch.scatter_reduce(x, axis, indices, updates, _SCATTER_REDUCE[reduction], include_self=True)

    def index_update(
        self, x: Any, index: Sequence[Any], updates: Any, reduction: str = "none"
    ) -> torch.Tensor:
        x = self._t(x)
        index = torch.broadcast_tensors(*(self._t(i).long() for i in index))
        rest = x.shape[len(index) :]
        updates = torch.broadcast_to(self._t(updates).to(x.dtype), index[0].shape + rest)
        if reduction in ("none", "add"):
            return x.index_put(tuple(index), updates, accumulate=reduction == "add")
        # no index_put with prod/amax/amin: scatter_reduce rows of the flattened leading axes
        flat = torch.zeros_like(index[0])
        for i, n in zip(index, x.shape):
            flat = flat * n + i
        width = int(np.prod(rest, dtype=np.int64))
        src = updates.reshape(flat.numel(), width)
        rows = flat.reshape(-1, 1).expand(src.shape)
        rows_x = x.reshape(x.numel() // max(width, 1), width)
        out = torch.scatter_reduce(rows_x, 0, rows, src, _SCATTER_REDUCE[reduction])
        return out.reshape(x.shape)

    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        packed = self._blocked(b, a)
        if packed is not None and self._few_rows(a, packed):
            return torch.nn.functional.linear(a, self._plain_of(b, packed))
        if packed is not None:
            # a linear layer's weight, blocked for oneDNN at load: its JIT kernels use the CPU's widest vectors
            # whoever made it (MKL takes its AVX2 path on AMD: 2-3x slower at 8 rows and at 4096)
            return _onednn_linear(a, packed, None) if a.dim() > 1 else _onednn_linear(a[None], packed, None)[0]
        if a.dim() > 2 and b.dim() == 2 and not a.is_contiguous():
            # rows of a strided view (the last position of each sequence): torch.matmul would broadcast b to a
            # batched product (2x the time at a 49k-word head); the rows as one matrix make a single GEMM
            return torch.matmul(a.reshape(-1, a.shape[-1]), b).view(*a.shape[:-1], b.shape[-1])
        if a.dim() == b.dim() > 2 and b.shape[0] == 1 < a.shape[0] and a.shape[1:-2] == b.shape[1:-2]:
            return _rows_over_shared(a, b)
        return torch.matmul(a, b)

    def _blocked(self, weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
        """oneDNN's blocked copy of a float32 linear weight (``matmul_weight``) for float32 rows ``x``, else None."""
        return self._onednn.get(id(weight)) if self._onednn and x.dtype == torch.float32 else None

    @staticmethod
    def _few_rows(x: torch.Tensor, blocked: torch.Tensor) -> bool:
        """Whether x's rows times the blocked weight are little enough work for the plain GEMM (``_PLAIN_WORK``)."""
        return x.numel() // max(x.shape[-1], 1) * blocked.numel() <= _PLAIN_WORK

    def _plain_of(self, weight: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
        """The (N, K) plain weight of ``matmul_weight``'s ``weight``: its own transpose, or for a zero-strided stand-in
        a dense copy of the blocked one, made once (at most ``_PLAIN_WORK`` values)."""
        if any(weight.stride()):
            return weight.t()
        plain = self._plain.get(id(weight))
        if plain is None:
            plain = self._plain[id(weight)] = blocked.to_dense()
            weakref.finalize(weight, self._plain.pop, id(weight), None)
        return plain

    def einsum(self, equation: str, *operands: torch.Tensor) -> torch.Tensor:
        return torch.einsum(equation, *operands)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, gelu: str | None = None) -> torch.Tensor:
        packed = self._blocked(weight, x)
        if packed is not None and self._few_rows(x, packed):
            y = torch.nn.functional.linear(x, self._plain_of(weight, packed), bias)
            return y if gelu is None else self.gelu(y, gelu)
        if packed is not None:  # the GELU as oneDNN's post-op, in the GEMM's pass over its output
            return _onednn_linear(x, packed, bias, gelu)
        if x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16):
            y = torch.matmul(x, weight) + bias  # the CPU's half addmm rounds differently from the product's
        else:
            y = torch.addmm(bias, x.reshape(-1, x.shape[-1]), weight).view(*x.shape[:-1], weight.shape[-1])
        return y if gelu is None else self.gelu(y, gelu)

    def interpolate_2d(self, x: torch.Tensor, size: tuple[int, int], mode: str,
                       align_corners: bool) -> torch.Tensor:
        # one pass over the image, where the taps are two gathers, multiplies and adds an axis (Depth Anything
        # small's 5 bilinear resizes at 350 x 518: ~135 -> 5-10 ms on the CPU)
        kind = {"linear": "bilinear", "cubic": "bicubic"}[mode]
        return torch.nn.functional.interpolate(x, size=size, mode=kind, align_corners=align_corners)

    def int8_matmul_weight(self, w: np.ndarray) -> torch.Tensor | None:
        # torch's CPU _int_mm is oneDNN's s8/s8 GEMM on a CPU with AVX-512 VNNI: a q8 weight streams a quarter of
        # float32's bytes. Held (N, K) and read transposed: at one row 6 against 15 us for 576 x 1536 (float32 on
        # oneDNN 39), 0.16 against 0.74 ms for SmolLM2's 576 x 49,152 head. Without VNNI it is a scalar loop (an AMD
        # EPYC with AVX2 alone: 310 us against float32's 77 at one row, 2.5 ms at 8 rows; q8 decoding 10 tokens/s),
        # so the integers are multiplied in float32 there. CUDA's wants more than 16 rows, which a decode step has not.
        if self.device.type != "cpu" or not hasattr(torch, "_int_mm") or not _HAS_INT8_GEMM_CPU:
            return None
        return torch.from_numpy(np.ascontiguousarray(np.asarray(w, np.int8).T)).t()

    def int8_matmul(self, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = torch._int_mm(a.reshape(-1, a.shape[-1]), w)
        return out.view(*a.shape[:-1], w.shape[1])

    def dynamic_quantize_uint8(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        # a q8 decode step quantizes every linear layer's input (121 times a SmolLM2-135M step): the op's formula
        # is ~17 dispatches on scalars, 65 us at one row (24 here). On a CPU the range comes to the host (no device
        # sync there) and the scale and zero point are worked out in Python floats, each result rounded to float32:
        # the float32 operation's own result (a double holds a float32 sum or quotient before its last rounding)
        if x.device.type != "cpu" or x.dtype != torch.float32 or x.numel() == 0:
            return None
        lo, hi = torch.aminmax(x)
        lo, hi = min(lo.item(), 0.0), max(hi.item(), 0.0)
        if not math.isfinite(hi - lo):
            return None  # inf or NaN in x: the formula's own NaN and inf arithmetic
        span = _float32(hi - lo) or 1.0
        scale = _float32(span / 255.0)
        zero_point = round(min(max(_float32(-lo / scale), 0.0), 255.0))  # round: half to even, as the op's
        codes = torch.div(x, torch.scalar_tensor(scale)).round_().add_(zero_point).clamp_(0, 255).to(torch.uint8)
        return codes, torch.scalar_tensor(scale), torch.scalar_tensor(zero_point, dtype=torch.uint8)

    def packed_matmul_is_fast(self, bits: int = 4, bf16_activations: bool = False) -> bool:
        # On a CPU the int4 kernel loses to BLAS on weights dequantized once when it reads float32 activations;
        # with bfloat16 ones it is its fast path (AVX-512 or AVX2), and the weights stay an eighth of float32's
        return self.device.type != "cpu" or (bf16_activations and bits == 4 and _HAS_INT4_CPU)

    def quantized_matmul_weight(
        self, words: np.ndarray, scales: np.ndarray, biases: np.ndarray, group_size: int, bits: int,
        bf16_activations: bool = False,
    ) -> _PackedWeight:  # fmt: skip
        int4 = None
        if bits == 4 and self.device.type == "cpu" and _HAS_INT4_CPU:
            int4 = _int4_for_cpu(words, scales, biases, torch.bfloat16 if bf16_activations else torch.float32)
            if bf16_activations:  # the int4 kernel at any length: no codes besides its layout
                return _PackedWeight(group_size, bits, int4=int4)
        # float32 activations take the int4 kernel only at decode steps; longer inputs dequantize the codes
        return _PackedWeight(group_size, bits, int4=int4, codes=tuple(self.asarray(a) for a in (words, scales, biases)))

    def quantized_matmul(self, x: Any, w: _PackedWeight) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if w.int4 is not None and (w.codes is None or rows <= _INT4_MAX_ROWS):
            # torch's CPU int4 kernel reads the packed weights: in bfloat16 at any length (1024 x 3072 at one row
            # 0.13 against 0.87 ms for float32 on BLAS, 23 against 26 ms at 512 rows); in float32 it is 4x faster
            # than dequantizing at one row, and its cost grows with the rows
            packed, scales_and_zeros, n = w.int4
            flat = x.reshape(-1, x.shape[-1]).to(scales_and_zeros.dtype)
            y = torch._weight_int4pack_mm_for_cpu(flat, packed, w.group_size, scales_and_zeros)[:, :n]
            return y.reshape(*x.shape[:-1], n).to(x.dtype)
        words, scales, biases = w.codes
        s, b = (v.float().repeat_interleave(w.group_size, dim=-1) for v in (scales, biases))
        return torch.matmul(x, (_codes(words, w.bits).float() * s + b).T.to(x.dtype))

    def det(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.det(x)

    def sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: Any = None,
             zero_nan: bool = False) -> Any:
        no_nan, causal = mask is None and q.dtype == torch.float32, False
        if isinstance(mask, str):  # "causal" aligned to the bottom-right corner (torch's is_causal is top-left)
            L, S = q.shape[-2], k.shape[-2]
            mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(S - L)
        elif (mask is not None and (mask.is_floating_point() or mask.dtype == torch.bool) and mask.device.type == "cpu"
              and mask.numel() <= 1 << 20):
            # facts of the mask, found once per mask tensor (every layer reads the same one): the first key any query
            # sees (a decoder's fixed buffer keeps its free rows first, masked with the dtype's lowest value: their
            # exp is exactly 0, so they are left out); all zero from there (an encoder without padding, a decode step
            # of unpadded rows: torch's CPU kernel then reads no mask, ~1.5x faster, as transformers drops an
            # all-ones attention_mask); causal from there (a prompt without padding: torch's causal kernel skips the
            # blocks above the diagonal, as transformers' sdpa path does); whether a softmax row can be NaN. The keys
            # after the last one any query sees are left out too (a GQA buffer's free rows, after the valid ones)
            checked, facts = self._mask_facts
            if checked is not mask:
                facts = _mask_facts(mask)
                self._mask_facts = (mask, facts)
            zero, start, end, no_nan, causal = facts
            fits = mask.shape[-1] == k.shape[-2]  # else it broadcasts over the keys: read as it is
            whole = start == 0 and end == mask.shape[-1]
            if fits and not whole:
                k, v, mask = k[..., start:end, :], v[..., start:end, :], mask[..., start:end]
            causal = causal and fits and q.shape[-2] == k.shape[-2]  # torch's is_causal is aligned top-left
            if causal or zero and (fits or whole):
                mask = None
        gqa = q.shape[1] != k.shape[1]
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, is_causal=causal,
                                                               enable_gqa=gqa)
        if zero_nan and not causal and not no_nan:
            out = torch.where(torch.isnan(out), torch.zeros((), dtype=out.dtype, device=out.device), out)
        return out

    def sliding_window(self, x: torch.Tensor, window: Any, strides: Any, dilations: Any) -> torch.Tensor:
        lead = x.ndim - len(window)
        for i, (k, s, d) in enumerate(zip(window, strides, dilations)):
            x = x.unfold(lead + i, d * (k - 1) + 1, s)  # appends the window axis at the end
        return x[(Ellipsis, *(slice(None, None, d) for d in dilations))]

    def conv(self, x: Any, w: Any, strides: Any, pads: Any, dilations: Any, groups: int) -> torch.Tensor:
        if self._onednn_conv and id(w) in self._onednn_conv:  # held in oneDNN's layout (``conv_weight``)
            return self.fused_conv(x, w, None, None, None, strides, pads, dilations, groups)  # with no post-op
        n = len(strides)
        fn = (_F.conv1d, _F.conv2d, _F.conv3d)[n - 1]
        x, padding = _symmetric_pads(self._channels_last(x), pads)
        return fn(x, w, None, tuple(strides), tuple(padding), tuple(dilations), groups)

    def _channels_last(self, x: torch.Tensor) -> torch.Tensor:
        # oneDNN convolves channels-last memory fastest, and reorders NCHW into it and back at every call: DETR's
        # ResNet-50 at 800 x 1066, 1.36x (docs/performance.md). The output stays channels-last through the
        # element-wise ops after it, so only a network's first convolution copies its input.
        if _ONEDNN_CONV and x.ndim == 4 and x.dtype == torch.float32 and x.device.type == "cpu":
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def fused_conv(self, x: Any, w: Any, bias: Any, add: Any, clip: Any, strides: Any, pads: Any, dilations: Any,
                   groups: int) -> torch.Tensor | None:
        # oneDNN's convolution with the bias, residual and ReLU (or ReLU6) as post-ops, the call torch.compile's CPU
        # path makes: one pass over the output for four (DETR's 1 x 1 from 64 to 256 channels at 200 x 267: 93 -> 31 ms)
        relu = clip is not None and clip[0] == 0 and math.isinf(clip[1])
        if not (_ONEDNN_CONV and x.ndim == 4 and x.device.type == "cpu" and (clip is None or relu or add is None)
                and all(v.dtype == torch.float32 for v in (x, w, bias, add) if v is not None)):
            return None
        x, padding = _symmetric_pads(x, pads)
        geometry = (padding, list(strides), list(dilations), groups)
        x = self._channels_last(x)
        w = self._packed(w, x, padding, strides, dilations, groups)
        if add is None:
            unary, scalars = ("none", []) if clip is None else ("relu", []) if relu else ("hardtanh", list(clip))
            return torch.ops.mkldnn._convolution_pointwise(x, w, bias, *geometry, unary, scalars, "")
        add = add.contiguous(memory_format=torch.channels_last)
        return torch.ops.mkldnn._convolution_pointwise(x, add, w, bias, *geometry, "add", 1.0, "relu" if relu else None,
                                                       [], "")

    def conv_transpose(self, x: Any, w: Any, strides: Any, dilations: Any, groups: int) -> torch.Tensor:
        fn = (_F.conv_transpose1d, _F.conv_transpose2d, _F.conv_transpose3d)[len(strides) - 1]
        return fn(x, w, None, tuple(strides), 0, 0, groups, tuple(dilations))

    def random_split(self, keys: Any, num: int) -> torch.Tensor:
        with torch.inference_mode():  # ~140 small integer ops: skip autograd's bookkeeping of each
            return threefry.random_split(self, self._t(keys).long(), num)

    def gumbel(self, keys: Any, count: int) -> torch.Tensor:
        with torch.inference_mode():
            return threefry.gumbel(self, self._t(keys).long(), count)

    def gelu(self, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
        return _F.gelu(x, approximate=approximate)

    def silu(self, x: torch.Tensor) -> torch.Tensor:
        return _F.silu(x)  # one pass (x * sigmoid(x) is two, and torch's CPU sigmoid alone costs 5x its silu)

    def layer_norm(self, x: torch.Tensor, weight: Any, bias: Any, eps: float) -> torch.Tensor:
        return _F.layer_norm(x, x.shape[-1:], weight, bias, eps)

    def group_norm(self, x: torch.Tensor, groups: int, weight: Any, bias: Any, eps: float) -> torch.Tensor:
        # not F.group_norm: it computes x * a + b with a = rstd * weight and b = bias - mean * a, which loses digits
        # where |mean| is many times the spread (an instance norm of one position: 2.5e-5 off in 0.5). The layer norm
        # of each group, then the channels' multiply-add in place: 33 ms for 512 channels x 32,000 frames (its 24)
        rows = x.reshape(x.shape[0], groups, -1)
        y = _F.layer_norm(rows, rows.shape[-1:], None, None, eps).view(x.shape)
        channel = (-1,) + (1,) * (x.dim() - 2)
        if weight is not None:
            y.mul_(weight.view(channel))
        return y if bias is None else y.add_(bias.view(channel))

    def rms_norm(self, x: torch.Tensor, weight: Any, eps: float) -> torch.Tensor:
        return _F.rms_norm(x, x.shape[-1:], weight, eps)

    def rotate_half_embedding(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        first, second = x.chunk(2, -1)
        return x * cos + torch.cat((second.neg(), first), -1) * sin


def _rows_over_shared(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for ``a`` (n, ..., m, k) and ``b`` (1, ..., k, p): b shared by the n leading rows (beams reading one
    input's cross-attention cache). torch.matmul would copy b n times and multiply each copy; a's n rows go next to
    its m instead, so b is read once (Whisper tiny.en's cross attention at 5 beams: 4.2 -> 1.9 ms a step)."""
    n, m, k = a.shape[0], a.shape[-2], a.shape[-1]
    lead = a.shape[1:-2]
    rows = a.movedim(0, -3).reshape(*lead, n * m, k)  # (..., n * m, k)
    out = torch.matmul(rows, b[0])  # (..., n * m, p)
    return out.view(*lead, n, m, out.shape[-1]).movedim(-3, 0)


def _float32(v: float) -> float:
    """``v`` rounded to the nearest float32."""
    return float(np.float32(v))


def _mask_facts(mask: torch.Tensor) -> tuple[bool, int, int, bool, bool]:
    """Facts of an additive or boolean (True: attend) mask: (nothing masked from ``start`` to ``end``; ``start`` and
    ``end``: the first key column some query attends to and one past the last; no softmax row NaN from finite scores;
    causal between them: as many keys as queries, kept on and below the diagonal and masked (the dtype's lowest value,
    -inf or False) above it, in every row of the batch: a prompt without padding). Found in numpy on the tensor's
    memory: a third of the time of the same ten torch ops (9 against 29 us for a decode step's mask; T5 computes a
    mask in every layer)."""
    if mask.dtype == torch.bool:
        m = kept = mask.numpy()
    else:
        low = torch.finfo(mask.dtype).min
        m = (mask.float() if mask.dtype == torch.bfloat16 else mask).numpy()  # bfloat16 -> float32 is exact
        kept = m > low
    covered = bool(kept.any(-1).all())  # every query sees a key: the keys none sees weigh exactly 0 in every row
    seen = kept.reshape(-1, m.shape[-1]).any(0)
    start, end = (int(seen.argmax()), m.shape[-1] - int(seen[::-1].argmax())) if covered else (0, m.shape[-1])
    rest, kept = m[..., start:end], kept[..., start:end]  # (a row that sees none spreads over all)
    if kept.all() if m.dtype == bool else not rest.any():  # an encoder's unpadded batch; an unpadded decode step
        return True, start, end, True, False
    causal = False
    if rest.shape[-1] == rest.shape[-2] > 1:
        causal = bool((kept == np.tri(rest.shape[-2], dtype=bool)).all())
        causal = causal and (m.dtype == bool or not np.where(kept, rest, 0).any())
    # a softmax row of finite scores is NaN only where its query sees no key (or, in half types, where the scores
    # plus the mask overflow to -inf)
    no_nan = covered or mask.dtype == torch.float32 and bool(np.isfinite(m).all())
    return False, start, end, no_nan, causal


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


_HAS_INT4_CPU = hasattr(torch, "_weight_int4pack_mm_for_cpu")
_HAS_INT8_GEMM_CPU = getattr(torch.cpu, "_is_vnni_supported", lambda: False)()  # oneDNN behind _int_mm (else a loop)
_INT4_MAX_ROWS = 4  # past ~5 rows torch's CPU int4 kernel is slower than dequantizing (2048 x 2048, 2 cores)


def _codes(w: torch.Tensor, bits: int) -> torch.Tensor:
    """The (N, K) int32 codes of ``pack_quantized`` words (N, K * bits / 32)."""
    words = w.view(torch.int32) if w.dtype == torch.uint32 else w  # int32 has the shift kernels
    shifts = torch.arange(0, 32, bits, dtype=torch.int32, device=w.device)
    return ((words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)).reshape(*w.shape[:-1], -1)


@dataclasses.dataclass(frozen=True)
class _PackedWeight:
    """``quantized_matmul_weight``: torch's CPU int4 layout (packed codes, scales and zeros, N) and/or the
    ``pack_quantized`` codes with their scales and biases, which a product dequantizes at each call."""

    group_size: int
    bits: int
    int4: tuple[torch.Tensor, torch.Tensor, int] | None = None
    codes: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None


def _int4_for_cpu(
    words: np.ndarray, scales: np.ndarray, biases: np.ndarray, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """4-bit ``pack_quantized`` words (N, K / 8) and the affine ``scale * code + bias`` per group as
    ``_weight_int4pack_mm_for_cpu`` takes them: packed codes, (K / group, N', 2) scales and zeros in the
    activations' ``dtype`` with ``w = (code - 8) * scale + zero``, and N. The kernel wants N a multiple of 16:
    extra rows of zero weight make N'. Its layout keeps blocks of 64 rows apart, so the int32 codes it reads are
    made a few MB at a time in one buffer, and what stays is allocated first: per-weight temporaries between the
    weights that stay had left glibc's heap holding ~2 MB of freed memory per weight (Qwen3-0.6B: 0.5 GB)."""
    n, k = words.shape[0], words.shape[1] * 8
    pad = -n % 16
    scales, biases = np.asarray(scales, np.float32), np.asarray(biases, np.float32)
    affine = np.stack([scales.T, (biases + 8 * scales).T], -1)
    scales_and_zeros = torch.from_numpy(np.pad(affine, ((0, 0), (0, pad), (0, 0)))).to(dtype)
    packed = torch.empty((n + pad, k // 2), dtype=torch.uint8)
    step = max(64, (1 << 20) // k // 64 * 64)  # rows of ~4 MB of int32 codes
    codes = np.empty((min(step, n + pad), k // 8, 8), np.int32)
    shifts = np.arange(0, 32, 4, dtype=np.uint32)
    for i in range(0, n + pad, step):
        rows, real = min(step, n + pad - i), max(0, min(step, n - i))
        np.right_shift(words[i:i + real, :, None], shifts, out=codes[:real], casting="unsafe")
        np.bitwise_and(codes[:real], 15, out=codes[:real])
        codes[real:rows] = 0  # padding rows: zero codes, scales and zeros
        packed[i:i + rows] = torch._convert_weight_to_int4pack_for_cpu(torch.from_numpy(codes[:rows].reshape(rows, k)), 1)
    return packed, scales_and_zeros.contiguous(), n


def _onednn_linear(x: torch.Tensor, blocked: torch.Tensor, bias: torch.Tensor | None,
                   gelu: str | None = None) -> torch.Tensor:
    """``x @ weight (+ bias)`` over x's rows as one matrix, the weight blocked for oneDNN (``matmul_weight``), and
    GELU of it with the ``gelu`` approximation ("none" or "tanh") where given."""
    attr = ("none", "") if gelu is None else ("gelu", gelu)
    rows = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), blocked, bias, attr[0], [], attr[1])
    return rows.view(*x.shape[:-1], rows.shape[-1])
