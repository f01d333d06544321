"""Random generators, on the host with numpy (a given ``seed`` makes them deterministic).

The values cannot match another runtime's generator, only the distribution, dtype and shape.
A generator whose inputs are all host values is folded like any host node, so an unseeded one
draws once per input signature, not once per call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..values import np_dtype
from .registry import register


def _rng(seed: float | None) -> np.random.Generator:
    # the float seed's bits, so that seeds 0.5 and 0.25 differ
    return np.random.default_rng(None if seed is None else int(np.float64(seed).view(np.uint64)))


def _dtype(dtype: int | None, like: Any = None, B: Any = None) -> np.dtype:
    if dtype is not None:
        return np_dtype(dtype)
    return like.dtype if isinstance(like, np.ndarray | np.generic) else B.dtype(like)  # shape_only: raw input


@register("RandomNormal", 1)
def random_normal_1(B: Any, *, shape: list[int], dtype: int = 1, mean: float = 0.0, scale: float = 1.0,
                    seed: float | None = None) -> np.ndarray:  # fmt: skip
    return (_rng(seed).standard_normal(tuple(shape)) * scale + mean).astype(np_dtype(dtype))


@register("RandomUniform", 1)
def random_uniform_1(B: Any, *, shape: list[int], dtype: int = 1, high: float = 1.0, low: float = 0.0,
                     seed: float | None = None) -> np.ndarray:  # fmt: skip
    return _rng(seed).uniform(low, high, tuple(shape)).astype(np_dtype(dtype))


@register("RandomNormalLike", 1, shape_only=True)
def random_normal_like_1(B: Any, input: Any, *, dtype: int | None = None, mean: float = 0.0, scale: float = 1.0,
                         seed: float | None = None) -> np.ndarray:  # fmt: skip
    out = _rng(seed).standard_normal(tuple(B.shape(input))) * scale + mean
    return out.astype(_dtype(dtype, input, B))


@register("RandomUniformLike", 1, shape_only=True)
def random_uniform_like_1(B: Any, input: Any, *, dtype: int | None = None, high: float = 1.0, low: float = 0.0,
                          seed: float | None = None) -> np.ndarray:  # fmt: skip
    return _rng(seed).uniform(low, high, tuple(B.shape(input))).astype(_dtype(dtype, input, B))


@register("Bernoulli", 15, host=True)
def bernoulli_15(
    B: Any, input: np.ndarray, *, dtype: int | None = None, seed: float | None = None
) -> np.ndarray:
    p = np.asarray(input)
    out = _rng(seed).uniform(0.0, 1.0, p.shape) < p
    return out.astype(np_dtype(dtype) if dtype is not None else p.dtype)


@register("Multinomial", 7, host=True)
def multinomial_7(B: Any, input: np.ndarray, *, dtype: int = 6, sample_size: int = 1,
                  seed: float | None = None) -> np.ndarray:  # fmt: skip
    """``sample_size`` class indices per row of unnormalized log-probabilities [batch, classes]."""
    logits = np.asarray(input, np.float64)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    rng = _rng(seed)
    out = (
        np.stack([rng.choice(p.shape[1], size=sample_size, p=row) for row in p])
        if len(p)
        else np.zeros((0, sample_size))
    )
    return out.astype(np_dtype(dtype))
