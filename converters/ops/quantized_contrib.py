"""Block-quantized weights of onnxruntime (com.microsoft): MatMulNBits, GatherBlockQuantized.

The weights, scales and zero points are initializers (host values). They are re-laid out once per
backend and cached by the identity of the initializer arrays, so every traced signature reuses
the same device arrays: for MatMulNBits the packed codes go to ``B.quantized_matmul_weight`` as they are
(ONNX packs codes low-first along K, which read as little-endian uint32 is MLX's layout), with
MLX's affine form ``w = scale * code + bias``, ``bias = -scale * zero_point``.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from ..backends.base import unpack_quantized
from .quantized import FLOAT8, expand_param
from .registry import MS_DOMAIN, register

# how MatMulNBits holds its weights: "packed" or "dense" (keep_packed); "bf16": as if every file allowed bfloat16
# activations (bf16_allowed), for int4 exports that leave accuracy_level unset
NBITS_ENV = "TRANSMUTER_MLX_NBITS"

F32 = np.dtype(np.float32)
_CACHE: dict[tuple, Any] = {}


def cached_per_weight(B: Any, arrays: tuple[Any, ...], extra: tuple, build: Callable[[], Any]) -> Any:
    """``build()`` once per backend and set of initializer arrays (dropped when the first one dies)."""
    key = (B.name, id(B), *(id(a) for a in arrays), *extra)
    if key not in _CACHE:
        _CACHE[key] = build()
        weakref.finalize(arrays[0], _CACHE.pop, key, None)
    return _CACHE[key]


def _unpack_bytes(data: np.ndarray, bits: int) -> np.ndarray:
    """Codes packed low-first in uint8 bytes (..., n) -> (..., n * 8 / bits) uint8."""
    if bits == 8:
        return np.asarray(data, np.uint8)
    data = np.ascontiguousarray(data, np.uint8)
    if 8 % bits == 0:  # 2 and 4 bits: no code spans two bytes, so shift bytes (a uint32 a code cost 8x the memory)
        per, mask = 8 // bits, np.uint8((1 << bits) - 1)
        codes = np.empty(data.shape + (per,), np.uint8)
        for j in range(per):
            np.bitwise_and(np.right_shift(data, np.uint8(bits * j)), mask, out=codes[..., j])
        return codes.reshape(*data.shape[:-1], -1)
    pad = (-data.shape[-1]) % 4
    if pad:
        data = np.pad(data, [(0, 0)] * (data.ndim - 1) + [(0, pad)])
    codes = unpack_quantized(data.view("<u4"), bits)
    return codes[..., : (data.shape[-1] - pad) * 8 // bits]


def _nbits_params(scales, zero_points, K, N, bits, block_size):
    """Scales and zero points (N, k_blocks), float32."""
    k_blocks = -(-K // block_size)
    s = np.asarray(scales, F32).reshape(N, k_blocks)
    if zero_points is None:
        zp = np.full((N, k_blocks), 2 ** (bits - 1), F32)
    elif zero_points.dtype == np.uint8:
        zp = _unpack_bytes(np.reshape(zero_points, (N, -1)), bits)[:, :k_blocks].astype(F32)
    else:
        zp = np.asarray(zero_points, F32).reshape(N, k_blocks)
    return s, zp


def keep_packed(B: Any, bits: int = 4, bf16_activations: bool = False) -> bool:
    """Whether block-quantized weights stay packed (``quantized_matmul``) or are dequantized once to the compute
    dtype (a plain matmul, 4-8x the memory): ``TRANSMUTER_MLX_NBITS=packed`` or ``dense``, else packed where the
    backend's packed kernel is the faster: GPUs, and torch's CPU int4 kernel where the file allows bfloat16
    activations (``B.packed_matmul_is_fast``); dense on MLX's CPU (at SmolLM2-135M's shape, int4 decoding ran 5
    tokens/s packed, against 10 for its fp32 export)."""
    choice = os.environ.get(NBITS_ENV, "").strip().lower()
    if choice in ("packed", "dense"):
        return choice == "packed"
    return B.packed_matmul_is_fast(bits, bf16_activations)


def bf16_allowed(accuracy_level: int) -> bool:
    """MatMulNBits' ``accuracy_level`` is the lowest precision the file accepts for A: 1 float32, 2 float16, 3
    bfloat16, 4 int8 (onnxruntime's CPU kernel then quantizes A to int8 per block: ~5e-3 of the largest output);
    0 is unset, which onnxruntime computes in float32. ``TRANSMUTER_MLX_NBITS=bf16`` allows it everywhere."""
    return accuracy_level >= 3 or os.environ.get(NBITS_ENV, "").strip().lower() == "bf16"


def _nbits_plan(B, A_dtype, Bq, scales, zero_points, g_idx, K, N, bits, block_size, accuracy_level):
    k_blocks = -(-K // block_size)
    s, zp = _nbits_params(scales, zero_points, K, N, bits, block_size)
    natural = g_idx is None or np.array_equal(np.asarray(g_idx).reshape(-1), np.arange(K) // block_size)
    group = block_size if block_size in (32, 64, 128) else 128 if block_size > 128 else 0
    bf16 = bf16_allowed(accuracy_level)
    if natural and bits in (2, 4, 8) and group and keep_packed(B, bits, bf16):
        rep = block_size // group
        scale_g = np.repeat(s, rep, axis=1)
        bias_g = np.repeat(-s * zp, rep, axis=1)
        words = np.ascontiguousarray(np.reshape(Bq, (N, -1))).view("<u4")
        weight = B.quantized_matmul_weight(words, scale_g.astype(A_dtype), bias_g.astype(A_dtype), group, bits, bf16)
        return ("packed", weight, k_blocks * block_size)
    # dense, or a layout the packed kernel lacks: dequantize once on the host to (N, K), which the matmul reads
    # transposed (BLAS's own flag: no copy; ``B.matmul_weight`` of its transpose). In place, block by block:
    # Qwen3-0.6B's 151936 x 1024 head took 6-11 s and 2.5 GB above the codes with a transposed copy and
    # temporaries; now ~1 s and the weight alone.
    codes = _unpack_bytes(np.reshape(Bq, (N, -1)), bits)  # (N, k_blocks * block_size)
    if natural:
        w = codes.reshape(N, k_blocks, block_size).astype(F32)
        w -= zp[:, :, None]
        w *= s[:, :, None]
        w = w.reshape(N, k_blocks * block_size)[:, :K]
    else:
        idx = np.asarray(g_idx).reshape(-1)[:K]
        w = (codes[:, :K].astype(F32) - zp[:, idx]) * s[:, idx]
    # (K, N), a linear layer's weight, which only ``B.matmul`` reads
    return ("dense", B.matmul_weight(w.astype(A_dtype, copy=False).T, only_matmul=True))


def _plan(B: Any, dt: np.dtype, Bq: Any, scales: Any, zero_points: Any, g_idx: Any, K: int, N: int, bits: int,
          block_size: int, accuracy_level: int) -> tuple:
    """``_nbits_plan`` for these weights and compute dtype, made once (cached by the arrays' identity)."""
    return cached_per_weight(B, (Bq, scales, zero_points, g_idx), (dt.str, K, N, bits, block_size, accuracy_level),
                             lambda: _nbits_plan(B, dt, Bq, scales, zero_points, g_idx, K, N, bits, block_size,
                                                 accuracy_level))  # fmt: skip


def _product(B: Any, A: Any, plan: tuple, K: int) -> Any:
    """A by the plan's weight: a matmul on the dense one; ``quantized_matmul`` on the packed one, A's last axis
    padded with zeros to whole blocks."""
    if plan[0] == "dense":
        return B.matmul(A, plan[1])
    _, weight, padded_k = plan
    if padded_k != K:  # the last block's padding meets zeros
        A = B.pad(A, [(0, 0)] * (len(B.shape(A)) - 1) + [(0, padded_k - K)], 0.0)
    return B.quantized_matmul(A, weight)


def _nbits_kernel(B: Any, A: Any, Bq: Any, scales: Any, zero_points: Any = None, g_idx: Any = None, bias: Any = None,
                  *, K: int, N: int, block_size: int, bits: int = 4, accuracy_level: int = 0,
                  weight_prepacked: int = 0) -> Any:  # fmt: skip
    """The product as a function of the op's inputs that holds the prepared weight, without the plan lookup of
    each call; else None."""
    if weight_prepacked or Bq.size == 0:
        return None
    plan = _plan(B, np.dtype(B.dtype(A)), Bq, scales, zero_points, g_idx, K, N, bits, block_size, accuracy_level)

    def kernel(A: Any, *rest: Any) -> Any:
        y = _product(B, A, plan, K)
        return y if len(rest) < 5 or rest[4] is None else B.add(y, rest[4])

    return kernel


@register("MatMulNBits", 1, domain=MS_DOMAIN, static_inputs=(1, 2, 3, 4), specialise=_nbits_kernel)
def matmul_nbits_1(
    B: Any, A: Any, Bq: Any, scales: Any, zero_points: Any = None, g_idx: Any = None, bias: Any = None, *,
    K: int, N: int, block_size: int, bits: int = 4, accuracy_level: int = 0, weight_prepacked: int = 0,
) -> Any:  # fmt: skip
    """``A @ dequantize(B).T + bias`` for weights block-quantized along K; ``accuracy_level`` 3 or 4 lets A be
    rounded to bfloat16 where the backend's fast kernel wants it (``bf16_allowed``)."""
    if weight_prepacked:
        raise NotImplementedError("MatMulNBits with weight_prepacked (an execution provider's layout)")
    dt = np.dtype(B.dtype(A))
    if Bq.size == 0:  # an omitted projection: zeros (plus bias)
        y = B.zeros(B.shape(A)[:-1] + (N,), dt)
    else:
        y = _product(B, A, _plan(B, dt, Bq, scales, zero_points, g_idx, K, N, bits, block_size, accuracy_level), K)
    return y if bias is None else B.add(y, bias)


def _gbq_tables(data, scales, zero_points, bits, block_size, quantize_axis):
    """Unpacked codes (uint8/int8, or float32 for float8/float4), scales, zero points (float32)."""
    dt = np.dtype(data.dtype)
    fp = dt in FLOAT8 or dt == np.dtype(ml_dtypes.float4_e2m1fn)
    if fp:
        return data.astype(F32), np.asarray(scales, F32), None
    if dt == np.uint8:
        codes = _unpack_bytes(data, bits)
        default = 2 ** (bits - 1)
    else:  # int4 / uint4
        codes, default = data.astype(np.int8), 0
    if zero_points is None:
        zp = np.full(np.shape(scales), default, F32)
    elif zero_points.dtype == np.uint8 and bits < 8:  # packed along the last axis, like data
        zp = _unpack_bytes(zero_points, bits)[..., : np.shape(scales)[-1]].astype(F32)
    else:
        zp = zero_points.astype(np.int8 if zero_points.dtype.kind == "V" else zero_points.dtype).astype(F32)
    return codes, np.asarray(scales, F32), zp


@register("GatherBlockQuantized", 1, domain=MS_DOMAIN, static_inputs=(0, 2, 3))
def gather_block_quantized_1(
    B: Any, data: Any, indices: Any, scales: Any, zero_points: Any = None, *,
    bits: int = 4, block_size: int = 128, gather_axis: int = 0, quantize_axis: int = 1,
) -> Any:  # fmt: skip
    """Gather of block-quantized ``data``, dequantized to the scales' type; out-of-range rows are zero."""
    out_dtype = np.dtype(scales.dtype)
    codes, s, zp = cached_per_weight(B, (data, scales, zero_points), (bits, block_size, quantize_axis), lambda: tuple(
        None if t is None else B.asarray(t)
        for t in _gbq_tables(data, scales, zero_points, bits, block_size, quantize_axis)))  # fmt: skip
    shape = B.shape(codes)
    r = len(shape)
    ga, qa = gather_axis % r, quantize_axis % r
    size = shape[ga]
    idx = B.astype(indices, np.int64) if np.dtype(B.dtype(indices)) != np.int64 else indices
    idx = B.where(B.less(idx, 0), B.add(idx, size), idx)
    valid = B.logical_and(B.greater_equal(idx, 0), B.less(idx, size))
    idx = B.where(valid, idx, B.zeros((), np.int64))
    q = len(B.shape(indices))
    out_shape = shape[:ga] + B.shape(indices) + shape[ga + 1 :]
    y = B.astype(B.take(codes, idx, ga), F32)
    qa_out = qa if qa < ga else qa + q - 1
    block = block_size or shape[qa]

    def _param(p: Any) -> Any:
        if B.shape(p)[ga] == size and size != 1:
            p = B.take(p, idx, ga)
        else:  # broadcast along the gather axis: one dim per index dim
            p = B.reshape(p, B.shape(p)[:ga] + (1,) * q + B.shape(p)[ga + 1 :])
        if B.shape(p)[qa_out] == 1 and out_shape[qa_out] != 1:
            return p
        return expand_param(B, p, out_shape, qa_out, block)

    if zp is not None:
        y = B.subtract(y, _param(zp))
    y = B.multiply(y, _param(s))
    mask = B.reshape(valid, (1,) * ga + B.shape(indices) + (1,) * (r - ga - 1))
    return B.astype(B.where(mask, y, B.zeros((), F32)), out_dtype)
