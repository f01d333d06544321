"""onnxruntime contrib ops (com.microsoft): fused norms, GELUs, bias adds, FusedMatMul, BERT embeddings.

Semantics follow onnxruntime's CPU kernels (docs/ContribOperators.md). Statistics of norms are
computed in float32 for half-precision inputs, as onnxruntime does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .activation import gelu_kernel
from .nn_norm import normalize
from .registry import MS_DOMAIN, IndexBound, register

_LOW_PRECISION = ("float16", "bfloat16")


def _upcast(B: Any, x: Any) -> tuple[Any, np.dtype]:
    """``x`` in float32 when it is a half type, and its original dtype."""
    dtype = B.dtype(x)
    return (B.astype(x, np.float32) if dtype.name in _LOW_PRECISION else x), dtype


def layer_norm(
    B: Any, x: Any, gamma: Any, beta: Any, epsilon: float, axis: int = -1, stats: bool = True
) -> tuple[Any, Any, Any]:
    """Layer norm over the axes from ``axis`` on; returns (y, mean, inv_std) with kept dims.

    Without ``stats`` over the last axis it is the backend's fused kernel, and mean/inv_std are None.
    """
    if not stats and axis in (-1, len(B.shape(x)) - 1):
        return B.layer_norm(x, gamma, beta, epsilon), None, None
    x, dtype = _upcast(B, x)
    y, mean, inv_std = normalize(B, x, tuple(range(axis % len(B.shape(x)), len(B.shape(x)))), epsilon)
    y = B.multiply(y, B.astype(gamma, B.dtype(x)))
    if beta is not None:
        y = B.add(y, B.astype(beta, B.dtype(x)))
    return B.astype(y, dtype), mean, inv_std


def rms_norm(
    B: Any, x: Any, gamma: Any, epsilon: float, axis: int = -1, stats: bool = True
) -> tuple[Any, Any]:
    """RMS norm (no centering) over the axes from ``axis`` on; returns (y, inv_std) (None without ``stats``)."""
    if not stats and axis in (-1, len(B.shape(x)) - 1):
        return B.rms_norm(x, gamma, epsilon), None
    x, dtype = _upcast(B, x)
    axes = tuple(range(axis % len(B.shape(x)), len(B.shape(x))))
    inv_std = B.reciprocal(B.sqrt(B.add(B.mean(B.multiply(x, x), axes, True), epsilon)))
    y = B.multiply(B.multiply(x, inv_std), B.astype(gamma, B.dtype(x)))
    return B.astype(y, dtype), inv_std


def _wants_stats(ctx: Any) -> bool:
    """Whether the node uses its mean/inv_std outputs (outputs 1 and 2)."""
    return any(ctx.step.outputs[1:3])


def _skip_sum(B: Any, x: Any, skip: Any, bias: Any) -> Any:
    s = B.add(x, skip)
    return s if bias is None else B.add(s, bias)


@register("SkipLayerNormalization", 1, MS_DOMAIN, context=True)
def skip_layer_normalization_1(
    B: Any,
    x: Any,
    skip: Any,
    gamma: Any,
    beta: Any = None,
    bias: Any = None,
    *,
    epsilon: float = 1e-12,
    ctx: Any,
) -> tuple[Any, ...]:
    s = _skip_sum(B, x, skip, bias)
    y, mean, inv_std = layer_norm(B, s, gamma, beta, epsilon, stats=_wants_stats(ctx))
    return y, mean, inv_std, s


@register("SkipSimplifiedLayerNormalization", 1, MS_DOMAIN, context=True)
def skip_simplified_layer_normalization_1(
    B: Any, x: Any, skip: Any, gamma: Any, bias: Any = None, *, epsilon: float = 1e-12, ctx: Any
) -> tuple[Any, ...]:
    s = _skip_sum(B, x, skip, bias)
    y, inv_std = rms_norm(B, s, gamma, epsilon, stats=_wants_stats(ctx))
    mean = None if inv_std is None else B.zeros(B.shape(inv_std), B.dtype(inv_std))  # onnxruntime's is zeros
    return y, mean, inv_std, s


@register("SimplifiedLayerNormalization", 1, context=True)
def simplified_layer_normalization_1(
    B: Any, x: Any, scale: Any, *, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1, ctx: Any
) -> tuple[Any, Any]:
    """onnxruntime's RMSNorm, registered in the default domain as onnxruntime does."""
    return rms_norm(B, x, scale, epsilon, axis, stats=any(ctx.step.outputs[1:]))


def _gelu_erf(B: Any, x: Any) -> Any:
    """``x * 0.5 * (1 + erf(x / sqrt(2)))`` (the backend's fused kernel), in float32 for half types."""
    x, dtype = _upcast(B, x)
    return B.astype(B.gelu(x), dtype)


def _gelu_tanh(B: Any, x: Any) -> Any:
    """GELU's tanh approximation (the backend's fused kernel), in float32 for half types."""
    x, dtype = _upcast(B, x)
    return B.astype(B.gelu(x, "tanh"), dtype)


def _fast_gelu_kernel(B: Any, x: Any, bias: Any = None) -> Any:
    """``B.gelu(x, "tanh")`` itself where there is no bias and ``x`` is float32/float64, else None."""
    return gelu_kernel(B, x, approximate="tanh") if bias is None else None


@register("Gelu", 1, MS_DOMAIN, specialise=gelu_kernel)
def gelu_1(B: Any, x: Any) -> Any:
    return _gelu_erf(B, x)


@register("BiasGelu", 1, MS_DOMAIN)
def bias_gelu_1(B: Any, a: Any, bias: Any) -> Any:
    return _gelu_erf(B, B.add(a, bias))


@register("FastGelu", 1, MS_DOMAIN, specialise=_fast_gelu_kernel)
def fast_gelu_1(B: Any, x: Any, bias: Any = None) -> Any:
    """The tanh approximation of GELU, after an optional bias."""
    return _gelu_tanh(B, x if bias is None else B.add(x, bias))


@register("QuickGelu", 1, MS_DOMAIN)
def quick_gelu_1(B: Any, x: Any, *, alpha: float = 1.702) -> Any:
    return B.multiply(x, B.sigmoid(B.multiply(x, alpha)))


@register("BiasAdd", 1, MS_DOMAIN)
def bias_add_1(B: Any, x: Any, bias: Any, skip: Any) -> Any:
    return B.add(B.add(x, bias), skip)


def _fused_operand(B: Any, x: Any, trans: int, trans_batch: int) -> Any:
    """Apply FusedMatMul's transposes: ``transBatch`` moves dim 0 behind the batch dims."""
    rank = len(B.shape(x))
    if rank < 2 or not (trans or trans_batch):
        return x
    if rank == 2 or not trans_batch:
        perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    else:
        last = [rank - 1, 0] if trans else [0, rank - 1]
        perm = list(range(1, rank - 1)) + last
    return B.transpose(x, perm)


@register("FusedMatMul", 1, MS_DOMAIN)
def fused_matmul_1(
    B: Any,
    a: Any,
    b: Any,
    *,
    alpha: float = 1.0,
    transA: int = 0,
    transB: int = 0,
    transBatchA: int = 0,
    transBatchB: int = 0,
) -> Any:
    y = B.matmul(_fused_operand(B, a, transA, transBatchA), _fused_operand(B, b, transB, transBatchB))
    return y if alpha == 1.0 else B.multiply(y, alpha)


def _embedding_bounds(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
    """input_ids, segment_ids and position_ids pick rows of their tables (inputs 2, 4, 3)."""
    bounds = []
    for index, table, what in ((0, 2, "word"), (1, 4, "segment"), (8, 3, "position")):
        if len(args) > max(index, table) and args[index] is not None and args[table] is not None:
            rows = B.shape(args[table])[0]
            bounds.append(IndexBound(index, 0, rows, f"the {rows} rows of the {what} embedding"))
    return bounds


@register("EmbedLayerNormalization", 1, MS_DOMAIN, index_bounds=_embedding_bounds)
def embed_layer_normalization_1(
    B: Any,
    input_ids: Any,
    segment_ids: Any,
    word_embedding: Any,
    position_embedding: Any,
    segment_embedding: Any,
    gamma: Any,
    beta: Any,
    mask: Any = None,
    position_ids: Any = None,
    *,
    epsilon: float = 1e-12,
    mask_index_type: int = 1,
) -> tuple[Any, Any, Any]:
    """BERT embeddings (word + position + segment) and a layer norm; mask_index counts mask ones."""
    batch, seq = B.shape(input_ids)
    emb = B.take(word_embedding, input_ids, 0)
    if position_ids is None:
        pos = B.expand_dims(B.slice(position_embedding, [0], [seq], [1]), [0])
    else:
        pos = B.take(position_embedding, position_ids, 0)
    emb = B.add(emb, pos)
    if segment_ids is not None and segment_embedding is not None:
        emb = B.add(emb, B.take(segment_embedding, segment_ids, 0))
    y, _, _ = layer_norm(B, emb, gamma, beta, epsilon, stats=False)
    dtype = B.dtype(input_ids)
    if mask is None:
        mask_index = B.zeros((batch,), dtype)
    else:
        nonzero = B.logical_not(B.equal(mask, B.zeros((), B.dtype(mask))))
        mask_index = B.sum(B.astype(nonzero, dtype), -1, False)
    return y, mask_index, emb
