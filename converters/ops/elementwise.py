"""Element-wise math, comparison and logic ops (numpy broadcasting, as ONNX specifies)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import register

# ONNX op -> backend primitive, registered in bulk: the op is exactly the primitive.
UNARY_OPS = {
    "Abs": "abs", "Neg": "negative", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Sin": "sin",
    "Cos": "cos", "Tan": "tan", "Asin": "arcsin", "Acos": "arccos", "Atan": "arctan",
    "Sinh": "sinh", "Cosh": "cosh", "Tanh": "tanh", "Asinh": "arcsinh", "Acosh": "arccosh",
    "Atanh": "arctanh", "Floor": "floor", "Ceil": "ceil", "Sign": "sign", "Erf": "erf",
    "Sigmoid": "sigmoid", "Reciprocal": "reciprocal", "IsNaN": "isnan", "Not": "logical_not",
    "BitwiseNot": "bitwise_not", "Round": "round",
}  # fmt: skip
BINARY_OPS = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Equal": "equal", "Less": "less",
    "LessOrEqual": "less_equal", "Greater": "greater", "GreaterOrEqual": "greater_equal",
    "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor", "BitwiseAnd": "bitwise_and",
    "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
}  # fmt: skip
SINCE = {"Not": 1, "Add": 1, "Sub": 1, "Mul": 1, "BitwiseNot": 18, "BitwiseAnd": 18, "BitwiseOr": 18, "BitwiseXor": 18,
         "LessOrEqual": 12, "GreaterOrEqual": 12, "Round": 11, "Asinh": 9, "Acosh": 9, "Atanh": 9,
         "Sinh": 9, "Cosh": 9, "Sign": 9, "Erf": 9, "IsNaN": 9, "Asin": 7, "Acos": 7, "Atan": 7,
         "Sin": 7, "Cos": 7, "Tan": 7, "Equal": 1, "Less": 1, "Greater": 1}  # fmt: skip


def _unary(primitive: str):
    def op(B: Any, x: Any) -> Any:
        return getattr(B, primitive)(x)

    return op


def _binary(primitive: str):
    def op(B: Any, a: Any, b: Any, *, broadcast: int = 1, axis: int | None = None) -> Any:
        return getattr(B, primitive)(a, b)

    return op


for _op, _prim in UNARY_OPS.items():
    _fn = _unary(_prim)
    _fn.__name__ = _fn.__qualname__ = f"{_op.lower()}_op"
    register(_op, SINCE.get(_op, 6))(_fn)
for _op, _prim in BINARY_OPS.items():
    _fn = _binary(_prim)
    _fn.__name__ = _fn.__qualname__ = f"{_op.lower()}_op"
    register(_op, SINCE.get(_op, 7))(_fn)


@register("Div", 7)
def div_7(B: Any, a: Any, b: Any) -> Any:
    """Integer division truncates toward zero in ONNX; float division is true division."""
    if np.issubdtype(B.dtype(a), np.integer):
        return B.trunc_divide(a, b)
    return B.divide(a, b)


@register("Relu", 6)
def relu_6(B: Any, x: Any) -> Any:
    return B.maximum(x, B.zeros((), B.dtype(x)))


def _scalar(B: Any, value: Any, dtype: Any) -> Any:
    """A 0-d array of ``dtype``: keeps every operand of a binary primitive one dtype."""
    return B.full((), value, dtype)


@register("Pow", 7)
def pow_7(B: Any, x: Any, y: Any) -> Any:
    """The result has the base's dtype; an integer base with a float exponent computes in float."""
    tx, ty = B.dtype(x), B.dtype(y)
    if tx == ty:
        return B.power(x, y)
    if np.issubdtype(tx, np.integer) and np.issubdtype(ty, np.floating):
        return B.astype(B.power(B.astype(x, ty), y), tx)
    return B.power(x, B.astype(y, tx))


@register("Mod", 10)
def mod_10(B: Any, a: Any, b: Any, *, fmod: int = 0) -> Any:
    """fmod=0: the remainder takes the divisor's sign (Python %); fmod=1: the dividend's (C fmod)."""
    return B.fmod(a, b) if fmod else B.remainder(a, b)


def _variadic(B: Any, primitive: str, xs: tuple[Any, ...]) -> Any:
    out = xs[0]
    for x in xs[1:]:
        out = getattr(B, primitive)(out, x)
    return out


@register("Max", 6)
def max_6(B: Any, *xs: Any) -> Any:
    return _variadic(B, "maximum", xs)


@register("Min", 6)
def min_6(B: Any, *xs: Any) -> Any:
    return _variadic(B, "minimum", xs)


@register("Sum", 6)
def sum_6(B: Any, *xs: Any) -> Any:
    return _variadic(B, "add", xs)


@register("Mean", 6)
def mean_6(B: Any, *xs: Any) -> Any:
    total = _variadic(B, "add", xs)
    return B.divide(total, _scalar(B, len(xs), B.dtype(total)))


_FLT_MAX = float(np.finfo(np.float32).max)


@register("Clip", 6)
def clip_6(B: Any, x: Any, *, min: float = -_FLT_MAX, max: float = _FLT_MAX) -> Any:  # noqa: A002
    dtype = B.dtype(x)
    return B.minimum(B.maximum(x, _scalar(B, min, dtype)), _scalar(B, max, dtype))


@register("Clip", 11)
def clip_11(B: Any, x: Any, lo: Any = None, hi: Any = None) -> Any:
    """max(x, lo) then min(., hi): when lo > hi every value becomes hi, as the spec says."""
    if lo is not None:
        x = B.maximum(x, lo)
    if hi is not None:
        x = B.minimum(x, hi)
    return x


@register("IsInf", 10)
def isinf_10(B: Any, x: Any, *, detect_negative: int = 1, detect_positive: int = 1) -> Any:
    inf = B.isinf(x)
    zero = _scalar(B, 0, B.dtype(x))
    if not detect_negative:
        inf = B.logical_and(inf, B.greater(x, zero))
    if not detect_positive:
        inf = B.logical_and(inf, B.less(x, zero))
    return inf


@register("BitShift", 11)
def bitshift_11(B: Any, x: Any, y: Any, *, direction: str) -> Any:
    """Shifts outside [0, bit width) shift every bit out: LEFT gives 0, RIGHT the sign fill."""
    dtype = B.dtype(x)
    width = np.dtype(dtype).itemsize * 8
    zero = _scalar(B, 0, dtype)
    valid = B.less(y, _scalar(B, width, dtype))
    if np.issubdtype(dtype, np.signedinteger):
        valid = B.logical_and(valid, B.greater_equal(y, zero))
    y = B.where(valid, y, zero)
    if direction == "LEFT":
        return B.where(valid, B.left_shift(x, y), zero)
    if direction == "RIGHT":
        fill = (
            B.where(B.less(x, zero), _scalar(B, -1, dtype), zero)
            if np.issubdtype(dtype, np.signedinteger)
            else zero
        )
        return B.where(valid, B.right_shift(x, y), fill)
    raise ValueError(f"BitShift direction must be 'LEFT' or 'RIGHT', got {direction!r}")


@register("Where", 9)
def where_9(B: Any, condition: Any, x: Any, y: Any) -> Any:
    return B.where(condition, x, y)
