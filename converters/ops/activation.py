"""Activations and the softmax family, written with the exact formulas of the ONNX spec."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from .registry import register

_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _in_float32(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compute a float16/bfloat16 activation in float32 and round once, as the reference does."""

    @functools.wraps(fn)
    def op(B: Any, x: Any, **attrs: Any) -> Any:
        dtype = B.dtype(x)
        if dtype not in _HALF:
            return fn(B, x, **attrs)
        return B.astype(fn(B, B.astype(x, np.float32), **attrs), dtype)

    return op


def _c(B: Any, value: float, like: Any) -> Any:
    """A 0-d constant in the dtype of ``like`` (so float16/bfloat16 inputs stay in their dtype)."""
    return B.full((), value, B.dtype(like))


def _softplus(B: Any, x: Any) -> Any:
    # log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))
    one = _c(B, 1.0, x)
    return B.add(B.maximum(x, _c(B, 0.0, x)), B.log(B.add(one, B.exp(B.negative(B.abs(x))))))


@register("LeakyRelu", 6)
@_in_float32
def leakyrelu_6(B: Any, x: Any, *, alpha: float = 0.01) -> Any:
    return B.where(B.less(x, _c(B, 0, x)), B.multiply(x, _c(B, alpha, x)), x)


@register("PRelu", 6)
def prelu_6(B: Any, x: Any, slope: Any) -> Any:
    return B.where(B.less(x, _c(B, 0, x)), B.multiply(x, slope), x)


@register("Elu", 6)
@_in_float32
def elu_6(B: Any, x: Any, *, alpha: float = 1.0) -> Any:
    neg = B.multiply(_c(B, alpha, x), B.subtract(B.exp(x), _c(B, 1, x)))
    return B.where(B.greater(x, _c(B, 0, x)), x, neg)


@register("Selu", 6)
@_in_float32
def selu_6(
    B: Any, x: Any, *, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875
) -> Any:
    neg = B.subtract(B.multiply(_c(B, alpha, x), B.exp(x)), _c(B, alpha, x))
    return B.multiply(_c(B, gamma, x), B.where(B.greater(x, _c(B, 0, x)), x, neg))


@register("Celu", 12)
@_in_float32
def celu_12(B: Any, x: Any, *, alpha: float = 1.0) -> Any:
    a = _c(B, alpha, x)
    neg = B.multiply(a, B.subtract(B.exp(B.divide(x, a)), _c(B, 1, x)))
    zero = _c(B, 0, x)
    return B.add(B.maximum(x, zero), B.minimum(neg, zero))


@register("HardSigmoid", 6)
@_in_float32
def hardsigmoid_6(B: Any, x: Any, *, alpha: float = 0.2, beta: float = 0.5) -> Any:
    y = B.add(B.multiply(x, _c(B, alpha, x)), _c(B, beta, x))
    return B.minimum(B.maximum(y, _c(B, 0, x)), _c(B, 1, x))


@register("HardSwish", 14)
@_in_float32
def hardswish_14(B: Any, x: Any) -> Any:
    return B.multiply(x, hardsigmoid_6(B, x, alpha=1 / 6, beta=0.5))


@register("Softplus", 1)
@_in_float32
def softplus_1(B: Any, x: Any) -> Any:
    return _softplus(B, x)


@register("Softsign", 1)
@_in_float32
def softsign_1(B: Any, x: Any) -> Any:
    return B.divide(x, B.add(_c(B, 1, x), B.abs(x)))


def gelu_kernel(B: Any, x: Any, *, approximate: str = "none") -> Any:
    """``B.gelu`` itself for the GELU of a float32/float64 input, exact or tanh (a half one computes in float32),
    else None."""
    if B.dtype(x) in _HALF or approximate not in ("none", "tanh"):
        return None
    return B.gelu if approximate == "none" else functools.partial(B.gelu, approximate="tanh")


@register("Gelu", 20, specialise=gelu_kernel)
@_in_float32
def gelu_20(B: Any, x: Any, *, approximate: str = "none") -> Any:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return B.gelu(x, approximate)


@register("Mish", 18)
@_in_float32
def mish_18(B: Any, x: Any) -> Any:
    return B.multiply(x, B.tanh(_softplus(B, x)))


@register("Swish", 24)
@_in_float32
def swish_24(B: Any, x: Any, *, alpha: float = 1.0) -> Any:
    return B.multiply(x, B.sigmoid(B.multiply(x, _c(B, alpha, x)) if alpha != 1.0 else x))


@register("ThresholdedRelu", 10)
@_in_float32
def thresholdedrelu_10(B: Any, x: Any, *, alpha: float = 1.0) -> Any:
    return B.where(B.greater(x, _c(B, alpha, x)), x, _c(B, 0, x))


@register("Shrink", 9)
@_in_float32
def shrink_9(B: Any, x: Any, *, bias: float = 0.0, lambd: float = 0.5) -> Any:
    lo = B.less(x, _c(B, -lambd, x))
    hi = B.greater(x, _c(B, lambd, x))
    zero = _c(B, 0, x)
    return B.where(lo, B.add(x, _c(B, bias, x)), B.where(hi, B.subtract(x, _c(B, bias, x)), zero))


# -- softmax family: before opset 13 the input is flattened to 2-D at ``axis`` -------------


def _as_2d(B: Any, x: Any, axis: int) -> tuple[Any, tuple[int, ...]]:
    shape = B.shape(x)
    axis = axis % max(len(shape), 1) if shape else 0
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    return B.reshape(x, (rows, int(np.prod(shape[axis:], dtype=np.int64)))), shape


def _log_softmax(B: Any, x: Any, axis: int) -> Any:
    return B.subtract(x, B.logsumexp(x, axis, True))


def _hardmax(B: Any, x: Any, axis: int) -> Any:
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    axis = axis % len(B.shape(x))
    n = B.shape(x)[axis]
    first = B.argmax(x, axis, True)
    positions = B.reshape(
        B.arange(0, n, 1, np.int64), [n if a == axis else 1 for a in range(len(B.shape(x)))]
    )
    return B.astype(B.equal(positions, first), B.dtype(x))


def _flattened(B: Any, fn: Any, x: Any, axis: int) -> Any:
    flat, shape = _as_2d(B, x, axis)
    return B.reshape(fn(B, flat, 1), shape)


def _softmax(B: Any, x: Any, axis: int) -> Any:
    return B.softmax(x, axis)


@register("Softmax", 1)
def softmax_1(B: Any, x: Any, *, axis: int = 1) -> Any:
    return _flattened(B, _softmax, x, axis)


@register("Softmax", 13)
def softmax_13(B: Any, x: Any, *, axis: int = -1) -> Any:
    return B.softmax(x, axis)


@register("LogSoftmax", 1)
def logsoftmax_1(B: Any, x: Any, *, axis: int = 1) -> Any:
    return _flattened(B, _log_softmax, x, axis)


@register("LogSoftmax", 13)
def logsoftmax_13(B: Any, x: Any, *, axis: int = -1) -> Any:
    return _log_softmax(B, x, axis)


@register("Hardmax", 1)
def hardmax_1(B: Any, x: Any, *, axis: int = 1) -> Any:
    return _flattened(B, _hardmax, x, axis)


@register("Hardmax", 13)
def hardmax_13(B: Any, x: Any, *, axis: int = -1) -> Any:
    return _hardmax(B, x, axis)
