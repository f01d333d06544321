"""Random generators, on the host with numpy (a given ``seed`` makes them deterministic).

The values cannot match another runtime's generator, only the distribution, dtype and shape.
A generator whose inputs are all host values is folded like any host node, so an unseeded one
draws once per input signature, not once per call.

A call may choose the draws for all of its generators (``draws``, which ``Model.__call__`` sets from its
``seed``/``noise`` arguments): a numpy Generator they all draw from in graph order (one seed, one result),
or ``FIXED``: each gives a fixed value instead of a draw, the value that leaves a model's noise out
(normal: ``mean``; uniform: ``high``, so that optimum's dropout mask ``rand > p`` keeps every value;
Bernoulli: 1 where p > 0; Multinomial: the most likely class).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..values import np_dtype
from .registry import register

# the op types drawn here: a graph holding one gives a different result per call unless seeded
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
                        "Multinomial"})
FIXED = "fixed"  # draws: no noise, each generator gives its fixed value
_DRAWS: contextvars.ContextVar[np.random.Generator | str | None] = contextvars.ContextVar("draws", default=None)


@contextlib.contextmanager
def draws(source: np.random.Generator | str | None) -> Iterator[None]:
    """Within the block, every generator draws from ``source`` (a numpy Generator), gives its fixed value
    (``FIXED``), or (None) draws as its node says."""
    token = _DRAWS.set(source)
    try:
        yield
    finally:
        _DRAWS.reset(token)


def _fixed() -> bool:
    return _DRAWS.get() is FIXED


def _rng(seed: float | None) -> np.random.Generator:
    source = _DRAWS.get()
    if isinstance(source, np.random.Generator):  # the call's seed wins over the node's
        return source
    # the float seed's bits, so that seeds 0.5 and 0.25 differ
    return np.random.default_rng(None if seed is None else int(np.float64(seed).view(np.uint64)))


def _dtype(dtype: int | None, like: Any = None, B: Any = None) -> np.dtype:
    if dtype is not None:
        return np_dtype(dtype)
    return like.dtype if isinstance(like, np.ndarray | np.generic) else B.dtype(like)  # shape_only: raw input


@register("RandomNormal", 1)
def random_normal_1(B: Any, *, shape: list[int], dtype: int = 1, mean: float = 0.0, scale: float = 1.0,
                    seed: float | None = None) -> np.ndarray:  # fmt: skip
    if _fixed():
        return np.full(tuple(shape), mean, np_dtype(dtype))
    return (_rng(seed).standard_normal(tuple(shape)) * scale + mean).astype(np_dtype(dtype))


@register("RandomUniform", 1)
def random_uniform_1(B: Any, *, shape: list[int], dtype: int = 1, high: float = 1.0, low: float = 0.0,
                     seed: float | None = None) -> np.ndarray:  # fmt: skip
    if _fixed():
        return np.full(tuple(shape), high, np_dtype(dtype))
    return _rng(seed).uniform(low, high, tuple(shape)).astype(np_dtype(dtype))


@register("RandomNormalLike", 1, shape_only=True)
def random_normal_like_1(B: Any, input: Any, *, dtype: int | None = None, mean: float = 0.0, scale: float = 1.0,
                         seed: float | None = None) -> np.ndarray:  # fmt: skip
    if _fixed():
        return np.full(tuple(B.shape(input)), mean, _dtype(dtype, input, B))
    out = _rng(seed).standard_normal(tuple(B.shape(input))) * scale + mean
    return out.astype(_dtype(dtype, input, B))


@register("RandomUniformLike", 1, shape_only=True)
def random_uniform_like_1(B: Any, input: Any, *, dtype: int | None = None, high: float = 1.0, low: float = 0.0,
                          seed: float | None = None) -> np.ndarray:  # fmt: skip
    if _fixed():
        return np.full(tuple(B.shape(input)), high, _dtype(dtype, input, B))
    return _rng(seed).uniform(low, high, tuple(B.shape(input))).astype(_dtype(dtype, input, B))


@register("Bernoulli", 15, host=True)
def bernoulli_15(
    B: Any, input: np.ndarray, *, dtype: int | None = None, seed: float | None = None
) -> np.ndarray:
    p = np.asarray(input)
    out = (p > 0) if _fixed() else _rng(seed).uniform(0.0, 1.0, p.shape) < p
    return out.astype(np_dtype(dtype) if dtype is not None else p.dtype)


@register("Multinomial", 7, host=True)
def multinomial_7(B: Any, input: np.ndarray, *, dtype: int = 6, sample_size: int = 1,
                  seed: float | None = None) -> np.ndarray:  # fmt: skip
    """``sample_size`` class indices per row of unnormalized log-probabilities [batch, classes]."""
    logits = np.asarray(input, np.float64)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    if _fixed():
        return np.repeat(p.argmax(axis=1)[:, None], sample_size, axis=1).astype(np_dtype(dtype))
    rng = _rng(seed)
    out = (
        np.stack([rng.choice(p.shape[1], size=sample_size, p=row) for row in p])
        if len(p)
        else np.zeros((0, sample_size))
    )
    return out.astype(np_dtype(dtype))
