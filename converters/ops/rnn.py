"""Recurrent layers: RNN, GRU and LSTM (opset 7 and 14, which adds ``layout``).

The time loop runs in Python (the sequence length is static at plan time); the input projection
of every step is one matmul before the loop. ``sequence_lens`` freezes each batch entry's state
after its length and zeroes its outputs there; a reverse pass reverses each entry within its length.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from .quantized import dynamic_quantize_linear_11
from .quantized_matmul import _centered, int_matmul
from .registry import MS_DOMAIN, register

_ALPHA_BETA = {  # activation -> default (alpha, beta); None where the function takes none
    "relu": None, "tanh": None, "sigmoid": None, "softsign": None, "softplus": None,
    "affine": (1.0, 0.0), "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None),
}  # fmt: skip


def _activation(B: Any, name: str, alpha: float | None, beta: float | None) -> Callable[[Any], Any]:
    n = name.lower()

    def c(x: Any, value: float) -> Any:
        return B.full((), value, B.dtype(x))

    table = {
        "relu": lambda x: B.maximum(x, c(x, 0)),
        "tanh": B.tanh,
        "sigmoid": B.sigmoid,
        "softsign": lambda x: B.divide(x, B.add(c(x, 1), B.abs(x))),
        "softplus": lambda x: B.log(B.add(c(x, 1), B.exp(x))),
        "affine": lambda x: B.add(B.multiply(x, c(x, alpha)), c(x, beta)),
        "leakyrelu": lambda x: B.where(B.less(x, c(x, 0)), B.multiply(x, c(x, alpha)), x),
        "thresholdedrelu": lambda x: B.where(B.greater(x, c(x, alpha)), x, c(x, 0)),
        "scaledtanh": lambda x: B.multiply(B.tanh(B.multiply(x, c(x, beta))), c(x, alpha)),
        "hardsigmoid": lambda x: B.clip(B.add(B.multiply(x, c(x, alpha)), c(x, beta)), 0, 1),
        "elu": lambda x: B.where(
            B.less(x, c(x, 0)), B.multiply(B.subtract(B.exp(x), c(x, 1)), c(x, alpha)), x
        ),
    }
    if n not in table:
        raise ValueError(f"unknown RNN activation {name!r}")
    return table[n]


def _activations(B: Any, names: list[str], alphas: list[float] | None, betas: list[float] | None) -> list:
    """The activation functions, consuming alphas/betas in order for the functions that take them."""
    alphas, betas, out = list(alphas or []), list(betas or []), []
    for name in names:
        default = _ALPHA_BETA.get(name.lower())
        alpha = beta = None
        if default is not None:
            alpha = alphas.pop(0) if alphas else default[0]
            if default[1] is not None:
                beta = betas.pop(0) if betas else default[1]
        out.append(_activation(B, name, alpha, beta))
    return out


def _step(B: Any, x: Any, t: int) -> Any:
    """x[t] of a (seq, batch, n) array."""
    s, b, n = B.shape(x)
    return B.reshape(B.slice(x, [t, 0, 0], [t + 1, b, n], [1, 1, 1]), (b, n))


def _reverse(B: Any, x: Any, lens: Any) -> Any:
    """Each batch entry of a (seq, batch, n) array reversed within its length (an involution)."""
    if lens is None:
        return B.flip(x, (0,))
    s, b, n = B.shape(x)
    t = B.arange(0, s, 1, np.int64)
    lens = B.reshape(B.astype(lens, np.int64), (1, b))
    t = B.reshape(t, (s, 1))
    idx = B.where(B.less(t, lens), B.subtract(B.subtract(lens, B.full((), 1, np.int64)), t), t)
    return B.take_along_axis(x, B.broadcast_to(B.reshape(idx, (s, b, 1)), (s, b, n)), 0)


def _recurrent(B: Any, cell: Callable, X: Any, W: Any, R: Any, bias: Any, sequence_lens: Any,
               states: list[Any], *, direction: str, layout: int, gates: int,
               matmul: Callable[[Any, Any, int], Any] | None = None) -> tuple:  # fmt: skip
    """Runs ``cell(xw_t, states, R[d], d) -> (h, states)`` over time for each direction; ``matmul(a, W, d)``
    (default ``a @ W[d]^T``) computes the input projection ``xw``.

    X (seq, batch, in) after layout; W (dirs, gates*H, in); states: per-state (dirs, batch, H).
    Returns Y (seq, dirs, batch, H) and each final state (dirs, batch, H), before layout. The hidden state that
    enters a step is the previous step's output (zero for an entry past its length, as onnxruntime has it; only
    that entry's discarded values see it).
    """
    matmul = matmul or partial(_times_transposed, B)
    if layout:
        X = B.transpose(X, (1, 0, 2))
        states = [None if s is None else B.transpose(s, (1, 0, 2)) for s in states]
    seq, batch, _ = B.shape(X)
    dirs = B.shape(W)[0]
    dtype = B.dtype(X)
    ys, finals = [], [[] for _ in states]
    for d in range(dirs):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        x = _reverse(B, X, sequence_lens) if reverse else X
        xw = matmul(x, W, d)
        hidden = B.shape(xw)[-1] // gates
        if bias is not None:
            xw = B.add(xw, _pick(B, bias, d, gates * hidden))
        st = [B.zeros((batch, hidden), dtype) if s is None else _pick(B, s, d) for s in states]
        lens = None if sequence_lens is None else B.reshape(B.astype(sequence_lens, np.int64), (batch, 1))
        out, seen = [], st[0]
        for t in range(seq):
            h, new = cell(_step(B, xw, t), [seen, *st[1:]], _pick(B, R, d), d)
            if lens is not None:
                valid = B.greater(lens, B.full((), t, np.int64))
                new = [B.where(valid, n, o) for n, o in zip(new, st)]
                h = B.where(valid, h, B.zeros((), dtype))
            st, seen = new, h
            out.append(h)
        y = B.stack(out, 0)
        ys.append(_reverse(B, y, sequence_lens) if reverse else y)
        for f, s in zip(finals, st):
            f.append(s)
    Y = B.stack(ys, 1)
    finals = [B.stack(f, 0) for f in finals]
    if layout:
        return B.transpose(Y, (2, 0, 1, 3)), *[B.transpose(f, (1, 0, 2)) for f in finals]
    return Y, *finals


def _times_transposed(B: Any, a: Any, w: Any, d: int) -> Any:
    """``a @ w[d]^T``: a projection of the float recurrent layers."""
    return B.matmul(a, B.transpose(_pick(B, w, d), (1, 0)))


def _pick(B: Any, x: Any, d: int, split: int | None = None) -> Any:
    """x[d] of a per-direction array; with ``split``, the sum of the two halves of B (Wb + Rb)."""
    shape = B.shape(x)
    out = B.squeeze(B.slice(x, [d] + [0] * (len(shape) - 1), [d + 1, *shape[1:]], [1] * len(shape)), (0,))
    if split is None:
        return out
    wb, rb = B.split(out, [split, split], 0)
    return B.add(wb, rb)


def _gate(B: Any, x: Any, i: int, hidden: int) -> Any:
    b = B.shape(x)[0]
    return B.slice(x, [0, i * hidden], [b, (i + 1) * hidden], [1, 1])


def _clipped(B: Any, clip: float | None) -> Callable[[Any], Any]:
    return (lambda x: x) if clip is None else (lambda x: B.clip(x, -clip, clip))


def _per_direction(names: list[str] | None, default: list[str], direction: str) -> list[list[str]]:
    n = len(default)
    names = list(names) if names else default * (2 if direction == "bidirectional" else 1)
    return [names[i : i + n] for i in range(0, len(names), n)]


@register("RNN", 7)
def rnn_7(B: Any, X: Any, W: Any, R: Any, Bias: Any = None, sequence_lens: Any = None, initial_h: Any = None, *,
          activation_alpha: list | None = None, activation_beta: list | None = None, activations: list | None = None,
          clip: float | None = None, direction: str = "forward", hidden_size: int | None = None, layout: int = 0) -> tuple:  # fmt: skip
    """Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb)."""
    fs = [
        _activations(B, a, activation_alpha, activation_beta)
        for a in _per_direction(activations, ["Tanh"], direction)
    ]
    cl = _clipped(B, clip)

    def cell(xw: Any, st: list, r: Any, d: int) -> tuple:
        h = fs[d][0](cl(B.add(xw, B.matmul(st[0], B.transpose(r, (1, 0))))))
        return h, [h]

    return _recurrent(
        B, cell, X, W, R, Bias, sequence_lens, [initial_h], direction=direction, layout=layout, gates=1
    )


@register("GRU", 7)
def gru_7(B: Any, X: Any, W: Any, R: Any, Bias: Any = None, sequence_lens: Any = None, initial_h: Any = None, *,
          activation_alpha: list | None = None, activation_beta: list | None = None, activations: list | None = None,
          clip: float | None = None, direction: str = "forward", hidden_size: int | None = None, layout: int = 0,
          linear_before_reset: int = 0) -> tuple:  # fmt: skip
    """Gates z, r, h; ``linear_before_reset`` applies r after the recurrent matmul of the h gate."""
    fs = [_activations(B, a, activation_alpha, activation_beta) for a in _per_direction(activations, ["Sigmoid", "Tanh"], direction)]  # fmt: skip
    cl = _clipped(B, clip)
    H = B.shape(R)[2]
    rb = [None] * B.shape(W)[0] if Bias is None else [B.slice(_pick(B, Bias, d), [5 * H], [6 * H], [1]) for d in range(B.shape(W)[0])]  # fmt: skip

    def cell(xw: Any, st: list, r: Any, d: int) -> tuple:
        f, g = fs[d]
        h_prev = st[0]
        rz, rr, rh = B.split(r, [H, H, H], 0)
        z = f(cl(B.add(_gate(B, xw, 0, H), B.matmul(h_prev, B.transpose(rz, (1, 0))))))
        rg = f(cl(B.add(_gate(B, xw, 1, H), B.matmul(h_prev, B.transpose(rr, (1, 0))))))
        xh = _gate(B, xw, 2, H)  # holds Wbh + Rbh: undo Rbh where it must sit inside the reset
        if linear_before_reset:
            hr = B.matmul(h_prev, B.transpose(rh, (1, 0)))
            if rb[d] is not None:
                hr, xh = B.add(hr, rb[d]), B.subtract(xh, rb[d])
            hh = g(cl(B.add(xh, B.multiply(rg, hr))))
        else:
            hh = g(cl(B.add(xh, B.matmul(B.multiply(rg, h_prev), B.transpose(rh, (1, 0))))))
        one = B.full((), 1, B.dtype(z))
        h = B.add(B.multiply(B.subtract(one, z), hh), B.multiply(z, h_prev))
        return h, [h]

    return _recurrent(
        B, cell, X, W, R, Bias, sequence_lens, [initial_h], direction=direction, layout=layout, gates=3
    )


@register("LSTM", 7)
def lstm_7(B: Any, X: Any, W: Any, R: Any, Bias: Any = None, sequence_lens: Any = None, initial_h: Any = None,
           initial_c: Any = None, P: Any = None, *, activation_alpha: list | None = None,
           activation_beta: list | None = None, activations: list | None = None, clip: float | None = None,
           direction: str = "forward", hidden_size: int | None = None, input_forget: int = 0, layout: int = 0,
           matmul: Callable[[Any, Any, int], Any] | None = None) -> tuple:  # fmt: skip
    """Gates i, o, f, c with optional peepholes P = [Pi, Po, Pf]; returns Y, Y_h, Y_c. ``matmul(a, W, d)`` (not an
    ONNX attribute: DynamicQuantizeLSTM's quantized products) computes ``a @ W[d]^T`` for both projections."""
    matmul = matmul or partial(_times_transposed, B)
    fs = [_activations(B, a, activation_alpha, activation_beta) for a in _per_direction(activations, ["Sigmoid", "Tanh", "Tanh"], direction)]  # fmt: skip
    cl = _clipped(B, clip)
    H = int(hidden_size) if hidden_size else B.shape(R)[2]
    peep = None if P is None else [B.split(_pick(B, P, d), [H, H, H], 0) for d in range(B.shape(W)[0])]

    def cell(xw: Any, st: list, r: Any, d: int) -> tuple:
        f, g, h_act = fs[d]
        h_prev, c_prev = st
        gates = B.add(xw, matmul(h_prev, R, d))
        i, o, fg, c = (_gate(B, gates, k, H) for k in range(4))
        if peep is not None:
            pi, po, pf = peep[d]
            i, fg = B.add(i, B.multiply(pi, c_prev)), B.add(fg, B.multiply(pf, c_prev))
        i = f(cl(i))
        fg = B.subtract(B.full((), 1, B.dtype(i)), i) if input_forget else f(cl(fg))
        c = B.add(B.multiply(fg, c_prev), B.multiply(i, g(cl(c))))
        if peep is not None:
            o = B.add(o, B.multiply(peep[d][1], c))
        h = B.multiply(f(cl(o)), h_act(c))
        return h, [h, c]

    return _recurrent(B, cell, X, W, R, Bias, sequence_lens, [initial_h, initial_c], direction=direction,
                      layout=layout, gates=4, matmul=matmul)  # fmt: skip


@register("RNN", 14)
def rnn_14(B: Any, *inputs: Any, **attrs: Any) -> tuple:
    """Adds ``layout`` (1: batch-major X, Y and states)."""
    return rnn_7(B, *inputs, **attrs)


@register("GRU", 14)
def gru_14(B: Any, *inputs: Any, **attrs: Any) -> tuple:
    """Adds ``layout`` (1: batch-major X, Y and states)."""
    return gru_7(B, *inputs, **attrs)


@register("LSTM", 14)
def lstm_14(B: Any, *inputs: Any, **attrs: Any) -> tuple:
    """Adds ``layout`` (1: batch-major X, Y and states)."""
    return lstm_7(B, *inputs, **attrs)


@register("DynamicQuantizeLSTM", 1, domain=MS_DOMAIN)
def dynamic_quantize_lstm_1(B: Any, X: Any, W: Any, R: Any, Bias: Any = None, sequence_lens: Any = None,
                            initial_h: Any = None, initial_c: Any = None, P: Any = None, W_scale: Any = None,
                            W_zero_point: Any = None, R_scale: Any = None, R_zero_point: Any = None,
                            **attrs: Any) -> tuple:  # fmt: skip
    """onnxruntime's LSTM on 8-bit weights: W (dirs, in, 4H) and R (dirs, H, 4H), int8 or uint8, with scales and
    zero points per direction (dirs,) or per column (dirs, 4H). As onnxruntime, each product quantizes its
    activation to uint8 on the fly (the range of all of it, as DynamicQuantizeLinear: all steps of X at once,
    the batch's hidden state at each step) and scales the exact integer product by both scales. (onnxruntime
    splits the batch over its threads, each with its own range: its result is this one on one thread.)"""

    def matmul(a: Any, weights: Any, d: int) -> Any:
        scale, zero_point = (W_scale, W_zero_point) if weights is W else (R_scale, R_zero_point)
        dirs, columns = B.shape(weights)[0], B.shape(weights)[2]
        zero_d = None if zero_point is None else _pick(B, B.reshape(zero_point, (dirs, -1)), d)
        w_d = _centered(B, _pick(B, weights, d), zero_d)
        w_scale = _pick(B, B.reshape(B.astype(scale, np.float32), (dirs, -1)), d)
        qa, a_scale, a_zero = dynamic_quantize_linear_11(B, a)
        shape = B.shape(a)
        flat = B.reshape(_centered(B, qa, a_zero), (-1, shape[-1]))
        out = B.astype(int_matmul(B, flat, w_d), np.float32)
        out = B.multiply(out, B.multiply(B.reshape(a_scale, ()), w_scale))
        return B.reshape(out, (*shape[:-1], columns))

    return lstm_7(B, X, W, R, Bias, sequence_lens, initial_h, initial_c, P, matmul=matmul, **attrs)
