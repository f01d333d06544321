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
SINCE = {"Add": 1, "Sub": 1, "Mul": 1, "BitwiseNot": 18, "BitwiseAnd": 18, "BitwiseOr": 18, "BitwiseXor": 18,
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
