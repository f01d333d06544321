"""Token mixers of hybrid sequence models: LinearAttention, CausalConvWithState (opset 27), SwiGLU (28).

The recurrences loop over the time axis in Python: the sequence length is static at plan time.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._attention_math import split_heads
from .registry import register

_F32 = np.dtype(np.float32)


@register("LinearAttention", 27)
def linear_attention_27(B: Any, query: Any, key: Any, value: Any, past_state: Any = None, decay: Any = None,
                        beta: Any = None, *, chunk_size: int = 64, kv_num_heads: int, q_num_heads: int,
                        scale: float = 0.0, update_rule: str = "gated_delta") -> tuple:  # fmt: skip
    """Recurrent linear attention with a (d_k, d_v) state per kv head, computed in float32.

    ``gated``: the state decays by exp(decay) per step; ``delta``: the update writes
    beta * (v - state^T k) instead of v. ``chunk_size`` is a tuning hint only.
    """
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ValueError(f"unknown update_rule {update_rule!r}")
    out_dtype = B.dtype(query)
    b, t, _ = B.shape(query)
    q = B.astype(split_heads(B, query, q_num_heads), _F32)
    k = B.astype(split_heads(B, key, kv_num_heads), _F32)
    v = B.astype(split_heads(B, value, kv_num_heads), _F32)
    d_k, d_v, group = B.shape(q)[3], B.shape(v)[3], q_num_heads // kv_num_heads
    if decay is not None:  # per head (b, t, H) or per key feature (b, t, H * d_k)
        width = 1 if B.shape(decay)[-1] == kv_num_heads else d_k
        decay = B.transpose(B.reshape(B.astype(decay, _F32), (b, t, kv_num_heads, width)), (0, 2, 1, 3))
        decay = B.exp(decay)
    if beta is not None:
        beta = B.transpose(B.reshape(B.astype(beta, _F32), (b, t, B.shape(beta)[-1], 1)), (0, 2, 1, 3))
    state_dtype = out_dtype if past_state is None else B.dtype(past_state)
    state = B.zeros((b, kv_num_heads, d_k, d_v), _F32) if past_state is None else B.astype(past_state, _F32)
    scale = B.full((), scale or 1 / math.sqrt(d_k), _F32)

    def step(x: Any, i: int) -> Any:  # (b, H, t, n) -> (b, H, n) at time i
        shape = B.shape(x)
        return B.squeeze(B.slice(x, [0, 0, i, 0], [shape[0], shape[1], i + 1, shape[3]], [1, 1, 1, 1]), (2,))

    outputs = []
    for i in range(t):
        k_t, v_t = step(k, i), step(v, i)
        if decay is not None:
            state = B.multiply(state, B.expand_dims(step(decay, i), (3,)))
        if beta is not None:
            retrieved = B.sum(B.multiply(state, B.expand_dims(k_t, (3,))), axis=2)
            v_t = B.multiply(step(beta, i), B.subtract(v_t, retrieved))
        state = B.add(state, B.multiply(B.expand_dims(k_t, (3,)), B.expand_dims(v_t, (2,))))
        q_t = B.reshape(step(q, i), (b, kv_num_heads, group, d_k))
        outputs.append(B.reshape(B.matmul(q_t, state), (b, q_num_heads * d_v)))
    y = B.multiply(B.stack(outputs, 1), scale)
    return B.astype(y, out_dtype), B.astype(state, state_dtype)


@register("CausalConvWithState", 27)
def causal_conv_with_state_27(B: Any, input: Any, weight: Any, bias: Any = None, past_state: Any = None, *,
                              activation: str = "none") -> tuple:  # fmt: skip
    """Depthwise causal 1-D convolution over (batch, channels, time), carrying the last k-1 inputs."""
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"unknown activation {activation!r}")
    dtype = B.dtype(input)
    b, c, n = B.shape(input)
    k = B.shape(weight)[2]
    if past_state is None:
        past_state = B.zeros((b, c, k - 1), dtype)
    padded = B.concatenate([past_state, input], 2)
    w = B.astype(B.reshape(weight, (c, k)), _F32)
    x = B.astype(padded, _F32)
    acc = None
    for j in range(k):
        term = B.multiply(
            B.slice(x, [0, 0, j], [b, c, j + n], [1, 1, 1]), B.slice(w, [0, j], [c, j + 1], [1, 1])
        )
        acc = term if acc is None else B.add(acc, term)
    if bias is not None:
        acc = B.add(acc, B.reshape(B.astype(bias, _F32), (c, 1)))
    acc = B.astype(acc, dtype)
    if activation != "none":
        a = B.astype(acc, _F32)
        acc = B.astype(B.multiply(a, B.sigmoid(a)), dtype)
    total = n + k - 1
    return acc, B.slice(padded, [0, 0, total - (k - 1)], [b, c, total], [1, 1, 1])


@register("SwiGLU", 28)
def swiglu_28(B: Any, A: Any, Bv: Any, *, alpha: float = 1.0) -> Any:
    """``A * sigmoid(alpha * A) * B``."""
    dtype = B.dtype(A)
    gate = B.astype(B.sigmoid(B.multiply(A, B.full((), alpha, dtype))), dtype)
    return B.multiply(B.multiply(A, gate), Bv)
