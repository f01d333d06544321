"""Matrix products (MatMul, Gemm, Einsum) and Det."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import register


def _matmul(B: Any, a: Any, b: Any) -> Any:
    """numpy matmul semantics; integer products as an exact broadcast multiply-sum, since
    device matmul kernels are floating point only."""
    if not np.issubdtype(B.dtype(a), np.integer):
        return B.matmul(a, b)
    a_vec, b_vec = len(B.shape(a)) == 1, len(B.shape(b)) == 1
    if a_vec:
        a = B.expand_dims(a, [0])
    if b_vec:
        b = B.expand_dims(b, [1])
    # (..., m, k, 1) * (..., 1, k, n) summed over k
    y = B.sum(B.multiply(B.expand_dims(a, [-1]), B.expand_dims(b, [-3])), -2, False)
    if a_vec:
        y = B.squeeze(y, [-2])
    if b_vec:
        y = B.squeeze(y, [-1])
    return y


def _matmul_kernel(B: Any, a: Any, b: Any) -> Any:
    """``B.matmul`` itself for floating-point operands (the dtype test costs more than a decode step's product)."""
    return None if np.issubdtype(B.dtype(a), np.integer) else B.matmul


@register("MatMul", 1, specialise=_matmul_kernel)
def matmul_1(B: Any, a: Any, b: Any) -> Any:
    return _matmul(B, a, b)


def _gemm(B: Any, a: Any, b: Any, c: Any, alpha: float, beta: float, transA: int, transB: int) -> Any:  # noqa: N803
    if transA:
        a = B.transpose(a, (1, 0))
    if transB:
        b = B.transpose(b, (1, 0))
    dtype = B.dtype(a)
    y = _matmul(B, a, b)
    if alpha != 1.0:
        y = B.multiply(y, B.full((), alpha, dtype))
    if c is None or beta == 0.0:
        return y
    if beta != 1.0:
        c = B.multiply(c, B.full((), beta, dtype))
    return B.add(y, c)


@register("Gemm", 1)
def gemm_1(
    B: Any, a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 1.0, broadcast: int = 0,
    transA: int = 0, transB: int = 0,  # noqa: N803
) -> Any:  # fmt: skip
    return _gemm(B, a, b, c, alpha, beta, transA, transB)


@register("Gemm", 7)
def gemm_7(
    B: Any, a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 1.0,
    transA: int = 0, transB: int = 0,  # noqa: N803
) -> Any:  # fmt: skip
    """C is optional from opset 11 on; it broadcasts to (M, N) unidirectionally."""
    return _gemm(B, a, b, c, alpha, beta, transA, transB)


@register("Einsum", 12)
def einsum_12(B: Any, *operands: Any, equation: str) -> Any:
    return B.einsum(equation.replace(" ", ""), *operands)


@register("Det", 11)
def det_11(B: Any, x: Any) -> Any:
    return B.det(x)
