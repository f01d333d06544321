"""Optimizer update ops of ``ai.onnx.preview.training``: element-wise formulas of the spec.

Inputs are ``R`` (learning rate), ``T`` (update count, a static input: it picks the first-step
formula), then the tensors per parameter group: X..., G..., and the optimizer's state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import register

TRAINING = "ai.onnx.preview.training"


def _groups(tensors: tuple, k: int) -> list[tuple]:
    n = len(tensors) // k
    return [tuple(tensors[j * n + i] for j in range(k)) for i in range(n)]


def _c(B: Any, value: float, like: Any) -> Any:
    return B.full((), value, B.dtype(like))


@register("Adagrad", 1, domain=TRAINING, static_inputs=(1,))
def adagrad_1(B: Any, R: Any, T: np.ndarray, *tensors: Any, decay_factor: float = 0.0, epsilon: float = 0.0,
              norm_coefficient: float = 0.0) -> tuple:  # fmt: skip
    r = B.divide(R, _c(B, 1.0 + float(T) * decay_factor, R))
    xs, hs = [], []
    for X, G, H in _groups(tensors, 3):
        g = B.add(B.multiply(_c(B, norm_coefficient, X), X), G)
        h = B.add(H, B.multiply(g, g))
        step = B.divide(B.multiply(B.astype(r, B.dtype(X)), g), B.add(B.sqrt(h), _c(B, epsilon, h)))
        xs.append(B.subtract(X, step))
        hs.append(h)
    return tuple(xs + hs)


@register("Momentum", 1, domain=TRAINING, static_inputs=(1,))
def momentum_1(B: Any, R: Any, T: np.ndarray, *tensors: Any, alpha: float, beta: float, mode: str,
               norm_coefficient: float) -> tuple:  # fmt: skip
    beta_t = 1.0 if int(T) == 0 else beta
    xs, vs = [], []
    for X, G, V in _groups(tensors, 3):
        g = B.add(B.multiply(_c(B, norm_coefficient, X), X), G)
        v = B.add(B.multiply(_c(B, alpha, V), V), B.multiply(_c(B, beta_t, g), g))
        if mode == "nesterov":
            direction = B.add(g, B.multiply(_c(B, alpha, v), v))
        elif mode == "standard":
            direction = v
        else:
            raise ValueError(f"unknown Momentum mode {mode!r}")
        xs.append(B.subtract(X, B.multiply(B.astype(R, B.dtype(X)), direction)))
        vs.append(v)
    return tuple(xs + vs)


@register("Adam", 1, domain=TRAINING, static_inputs=(1,))
def adam_1(B: Any, R: Any, T: np.ndarray, *tensors: Any, alpha: float = 0.9, beta: float = 0.999, epsilon: float = 0.0,
           norm_coefficient: float = 0.0, norm_coefficient_post: float = 0.0) -> tuple:  # fmt: skip
    t = int(T)
    scale = float(np.sqrt(1 - beta**t) / (1 - alpha**t)) if t > 0 else 1.0
    xs, vs, hs = [], [], []
    for X, G, V, H in _groups(tensors, 4):
        g = B.add(B.multiply(_c(B, norm_coefficient, X), X), G)
        v = B.add(B.multiply(_c(B, alpha, V), V), B.multiply(_c(B, 1 - alpha, g), g))
        h = B.add(B.multiply(_c(B, beta, H), H), B.multiply(_c(B, 1 - beta, g), B.multiply(g, g)))
        r = B.multiply(B.astype(R, B.dtype(X)), _c(B, scale, X))
        x = B.subtract(X, B.divide(B.multiply(r, v), B.add(B.sqrt(h), _c(B, epsilon, h))))
        xs.append(B.multiply(_c(B, 1 - norm_coefficient_post, x), x))
        vs.append(v)
        hs.append(h)
    return tuple(xs + vs + hs)
