"""Normalisations: Batch, Instance, Layer, Group, RMS, Lp, MeanVariance and LRN.

LayerNormalization and RMSNormalization map onto the backends' fused last-axis kernels
(``mx.fast.layer_norm``/``rms_norm``) after a reshape of the normalised axes into one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._window import outputs_used
from .registry import register


def _channel(B: Any, v: Any, rank: int) -> Any:
    """A per-channel (or, for spatial=0, per-activation) vector shaped to broadcast on (N, C, ...)."""
    shape = B.shape(v)
    return B.reshape(v, (1, *shape) + (1,) * (rank - 1 - len(shape)))


def _stash(B: Any, x: Any, stash_type: int) -> Any:
    """``x`` in the computation dtype: float32 for half types when stash_type is 1 (float)."""
    if stash_type == 1 and np.dtype(B.dtype(x)).itemsize < 4:
        return B.astype(x, np.float32)
    return x


def _batch_norm(B: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any, epsilon: float) -> Any:
    rank = len(B.shape(x))
    dt = B.dtype(x)
    # fold into one multiply-add: y = x * a + (bias - mean * a), a = scale / sqrt(var + eps)
    a = B.divide(B.astype(scale, dt), B.sqrt(B.add(B.astype(var, dt), B.asarray(np.asarray(epsilon, dt)))))
    c = B.subtract(B.astype(bias, dt), B.multiply(B.astype(mean, dt), a))
    return B.add(B.multiply(x, _channel(B, a, rank)), _channel(B, c, rank))


def _batch_stats(B: Any, x: Any) -> tuple[Any, Any]:
    axes = tuple(a for a in range(len(B.shape(x))) if a != 1)
    m = B.mean(x, axes, True)
    d = B.subtract(x, m)
    return B.reshape(m, (-1,)), B.reshape(B.mean(B.multiply(d, d), axes, True), (-1,))


def _batch_train(B: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any, epsilon: float, momentum: float):
    m, v = _batch_stats(B, x)
    y = _batch_norm(B, x, scale, bias, m, v, epsilon)
    mom = B.asarray(np.asarray(momentum, B.dtype(mean)))
    run_m = B.add(B.multiply(mean, mom), B.multiply(B.astype(m, B.dtype(mean)), B.subtract(1, mom)))
    run_v = B.add(B.multiply(var, mom), B.multiply(B.astype(v, B.dtype(var)), B.subtract(1, mom)))
    return y, run_m, run_v, m, v


@register("BatchNormalization", 1, context=True)
def batch_normalization_1(B: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any, *, consumed_inputs: Any = None,
                          epsilon: float = 1e-5, is_test: int = 0, momentum: float = 0.9, spatial: int = 1,
                          ctx: Any) -> Any:  # fmt: skip
    """Versions 1-7: optional training outputs (mean, var, saved_mean, saved_var)."""
    if outputs_used(ctx) == 1:
        return _batch_norm(B, x, scale, bias, mean, var, epsilon)
    return _batch_train(B, x, scale, bias, mean, var, epsilon, momentum)[: outputs_used(ctx)]


@register("BatchNormalization", 7, context=True)
def batch_normalization_7(B: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any, *, epsilon: float = 1e-5,
                          momentum: float = 0.9, spatial: int = 1, ctx: Any) -> Any:  # fmt: skip
    return batch_normalization_1(B, x, scale, bias, mean, var, epsilon=epsilon, momentum=momentum, ctx=ctx)


@register("BatchNormalization", 9, context=True)
def batch_normalization_9(B: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any, *, epsilon: float = 1e-5,
                          momentum: float = 0.9, ctx: Any) -> Any:  # fmt: skip
    return batch_normalization_1(B, x, scale, bias, mean, var, epsilon=epsilon, momentum=momentum, ctx=ctx)


@register("BatchNormalization", 14)
def batch_normalization_14(B: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any, *, epsilon: float = 1e-5,
                           momentum: float = 0.9, training_mode: int = 0) -> Any:  # fmt: skip
    """Version 14: with training_mode, the outputs are (Y, running_mean, running_var)."""
    if not training_mode:
        return _batch_norm(B, x, scale, bias, mean, var, epsilon)
    return _batch_train(B, x, scale, bias, mean, var, epsilon, momentum)[:3]


def normalize(B: Any, x: Any, axes: tuple[int, ...], epsilon: float) -> tuple[Any, Any, Any]:
    """(x - mean) * inv_std over ``axes``, and the mean and inv_std (keepdims)."""
    m = B.mean(x, axes, True)
    d = B.subtract(x, m)
    var = B.mean(B.multiply(d, d), axes, True)
    inv = B.reciprocal(B.sqrt(B.add(var, B.asarray(np.asarray(epsilon, B.dtype(x))))))
    return B.multiply(d, inv), m, inv


@register("InstanceNormalization", 1)
def instance_normalization_1(B: Any, x: Any, scale: Any, bias: Any, *, consumed_inputs: Any = None,
                             epsilon: float = 1e-5) -> Any:  # fmt: skip
    rank = len(B.shape(x))
    if rank > 2 and np.dtype(B.dtype(x)) == np.float32:
        # the backend's group norm of one channel a group, scale and bias included, where the formula is ~8 passes
        # over x and the scale and bias two more (512 channels x 32,000 frames on torch: 60 -> 33 ms)
        return B.group_norm(x, B.shape(x)[1], scale, bias, epsilon)
    y, _, _ = normalize(B, x, tuple(range(2, rank)), epsilon)
    return B.add(B.multiply(y, _channel(B, scale, rank)), _channel(B, bias, rank))


def _layer_norm_kernel(B: Any, x: Any, scale: Any, bias: Any = None, *, axis: int = -1, epsilon: float = 1e-5,
                      stash_type: int = 1, ctx: Any) -> Any:  # fmt: skip
    """``B.layer_norm`` itself where the node normalises the last axis with 1-D weights of x's dtype and its mean and
    inv_std outputs are unread (an encoder's every norm), else None."""
    width = B.shape(x)[-1]
    vectors = [v for v in (scale, bias) if v is not None]
    if outputs_used(ctx) == 1 and axis % len(B.shape(x)) == len(B.shape(x)) - 1 and all(
        B.shape(v) == (width,) and B.dtype(v) == B.dtype(x) for v in vectors
    ):
        return lambda x, scale, bias=None: B.layer_norm(x, scale, bias, epsilon)
    return None


@register("LayerNormalization", 17, context=True, specialise=_layer_norm_kernel)
def layer_normalization_17(B: Any, x: Any, scale: Any, bias: Any = None, *, axis: int = -1, epsilon: float = 1e-5,
                           stash_type: int = 1, ctx: Any) -> Any:  # fmt: skip
    shape = B.shape(x)
    axis = axis % len(shape)
    inner = shape[axis:]
    flat = (*shape[:axis], int(np.prod(inner)))
    if outputs_used(ctx) == 1:
        w = B.reshape(B.broadcast_to(scale, inner), (-1,))
        b = None if bias is None else B.reshape(B.broadcast_to(bias, inner), (-1,))
        return B.reshape(B.layer_norm(B.reshape(x, flat), w, b, epsilon), shape)
    xs = _stash(B, B.reshape(x, flat), stash_type)
    y, m, inv = normalize(B, xs, (len(flat) - 1,), epsilon)
    y = B.reshape(B.astype(y, B.dtype(x)), shape)
    y = B.multiply(y, scale)
    y = y if bias is None else B.add(y, bias)
    stats = (*shape[:axis],) + (1,) * len(inner)
    return (y, B.reshape(m, stats), B.reshape(inv, stats))[: outputs_used(ctx)]


@register("RMSNormalization", 23)
def rms_normalization_23(B: Any, x: Any, scale: Any, *, axis: int = -1, epsilon: float = 1e-5,
                         stash_type: int = 1) -> Any:  # fmt: skip
    shape = B.shape(x)
    axis = axis % len(shape)
    inner = shape[axis:]
    w = B.reshape(B.broadcast_to(scale, inner), (-1,))
    return B.reshape(B.rms_norm(B.reshape(x, (*shape[:axis], -1)), w, epsilon), shape)


def _group_norm(B: Any, x: Any, num_groups: int, epsilon: float, stash_type: int) -> Any:
    shape = B.shape(x)
    xs = _stash(B, B.reshape(x, (shape[0], num_groups, -1)), stash_type)
    y, _, _ = normalize(B, xs, (2,), epsilon)
    return B.reshape(B.astype(y, B.dtype(x)), shape)


@register("GroupNormalization", 18)
def group_normalization_18(
    B: Any, x: Any, scale: Any, bias: Any, *, epsilon: float = 1e-5, num_groups: int
) -> Any:
    """Version 18: scale and bias hold one value per group."""
    shape = B.shape(x)
    y = B.reshape(_group_norm(B, x, num_groups, epsilon, 1), (shape[0], num_groups, -1))
    s, b = (B.reshape(v, (1, num_groups, 1)) for v in (scale, bias))
    return B.reshape(B.add(B.multiply(y, s), b), shape)


@register("GroupNormalization", 21)
def group_normalization_21(B: Any, x: Any, scale: Any, bias: Any, *, epsilon: float = 1e-5, num_groups: int,
                           stash_type: int = 1) -> Any:  # fmt: skip
    """Version 21: scale and bias hold one value per channel."""
    rank = len(B.shape(x))
    y = _group_norm(B, x, num_groups, epsilon, stash_type)
    return B.add(B.multiply(y, _channel(B, scale, rank)), _channel(B, bias, rank))


@register("LpNormalization", 1)
def lp_normalization_1(B: Any, x: Any, *, axis: int = -1, p: int = 2) -> Any:
    if p == 1:
        norm = B.sum(B.abs(x), axis, True)
    else:
        norm = B.sqrt(B.sum(B.multiply(x, x), axis, True))
    zero = B.equal(norm, B.zeros((), B.dtype(x)))
    return B.divide(x, B.where(zero, B.full((), 1, B.dtype(x)), norm))  # an all-zero vector stays zero


@register("MeanVarianceNormalization", 9)
def mean_variance_normalization_9(B: Any, x: Any, *, axes: list[int] | None = None) -> Any:
    axes = tuple(axes) if axes is not None else (0, 2, 3)
    m = B.mean(x, axes, True)
    d = B.subtract(x, m)
    std = B.sqrt(B.mean(B.multiply(d, d), axes, True))
    return B.divide(d, B.add(std, B.asarray(np.asarray(1e-9, B.dtype(x)))))


@register("LRN", 1)
def lrn_1(B: Any, x: Any, *, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0, size: int) -> Any:
    """x / (bias + alpha/size * sum of squares over a window of channels) ** beta."""
    shape = B.shape(x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = B.pad(B.multiply(x, x), [(0, 0), (lo, hi)] + [(0, 0)] * (len(shape) - 2), 0)
    total = B.sum(
        B.sliding_window(B.transpose(sq, (0, *range(2, len(shape)), 1)), [size], [1], [1]), -1, False
    )
    total = B.transpose(total, (0, len(shape) - 1, *range(1, len(shape) - 1)))
    dt = B.dtype(x)
    k = B.add(B.multiply(total, B.asarray(np.asarray(alpha / size, dt))), B.asarray(np.asarray(bias, dt)))
    return B.divide(x, B.power(k, B.asarray(np.asarray(beta, dt))))
