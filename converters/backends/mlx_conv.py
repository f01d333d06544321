"""1 x 1 and depthwise convolutions for MLX's CPU device, where its own kernel is slow.

On a 2-core AVX2 EPYC, MLX's CPU convolution (0.32, MKL as its BLAS) took 57 ms for a 1 x 1 convolution over 256
channels of 200 x 267 (PyTorch 50) and 50-140x PyTorch's time for depthwise ones (ConvNeXt's 7 x 7 over 96
channels of 56 x 56: 50 ms against 0.5). On the CPU device, for float32, ``conv`` computes these instead (``None``
for any other convolution, which the caller runs on ``mx.conv_general``):

- a 1 x 1 convolution: one matmul of the (O, C) weight with the (N, C, positions) input, in its own layout, with
  no transposes to channels-last and back (27.5 ms for the one above);
- a depthwise convolution: the sum over the kernel's taps of a shifted view times each channel's weight, which the
  model's ``mx.compile`` fuses (14 ms for ConvNeXt's; SegFormer's 3 x 3 over 128 channels of 128 x 128: 78 -> 16).

Tried and left out: ordinary k x k kernels as per-tap matmuls accumulated by ``addmm`` (each tap a window of the
flattened, padded channels-last input): no faster than MLX's kernel overall (ResNet's 3 x 3 over 64 channels of
200 x 267: 57 ms both; 128 channels at stride 2: 70 against 49; 256 channels of 50 x 67: 39 against 46).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import mlx.core as mx

MAX_SHIFTED_TAPS = 81  # a 9 x 9 depthwise kernel; larger ones stay on mx.conv_general


def conv(
    x: mx.array, w: mx.array, strides: Sequence[int], pads: Sequence[tuple[int, int]], dilations: Sequence[int],
    groups: int,
) -> mx.array | None:
    """``x`` (N, C, *S) convolved with ``w`` (O, C / groups, *K) as ONNX's Conv, or None where MLX's is as good."""
    if x.dtype != mx.float32 or w.dtype != mx.float32:
        return None
    kernel, channels = w.shape[2:], x.shape[1]
    if all(k == 1 for k in kernel) and not any(a or b for a, b in pads):
        return _pointwise(x, w, strides, groups)
    if groups == channels == w.shape[0] and w.shape[1] == 1 and math.prod(kernel) <= MAX_SHIFTED_TAPS:
        return _depthwise(x, w, strides, pads, dilations)
    return None


def window_count(space: Sequence[int], window: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int]) -> list[int]:  # fmt: skip
    """How many (dilated, strided) windows fit along each axis of ``space``, already padded."""
    return [(s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(space, window, strides, dilations)]


def _tap_slices(start: Sequence[int], out: Sequence[int], strides: Sequence[int]) -> tuple[slice, ...]:
    return tuple(slice(a, a + st * (o - 1) + 1, st) for a, o, st in zip(start, out, strides))


def _pointwise(x: mx.array, w: mx.array, strides: Sequence[int], groups: int) -> mx.array:
    if any(s > 1 for s in strides):
        x = x[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
    (N, C, *space), out_channels = x.shape, w.shape[0]
    weights = mx.reshape(w, (groups, out_channels // groups, C // groups))
    y = mx.matmul(weights, mx.reshape(x, (N, groups, C // groups, -1)))
    return mx.reshape(y, (N, out_channels, *space))


def _depthwise(
    x: mx.array, w: mx.array, strides: Sequence[int], pads: Sequence[tuple[int, int]], dilations: Sequence[int]
) -> mx.array:
    kernel, n = w.shape[2:], len(strides)
    if any(a or b for a, b in pads):
        x = mx.pad(x, [(0, 0), (0, 0), *pads])
    out = window_count(x.shape[2:], kernel, strides, dilations)
    taps = mx.reshape(w, (w.shape[0], -1) + (1,) * n)  # (C, taps, 1, ...): a channel's weight per tap
    y = None
    for t, index in enumerate(itertools.product(*(range(k) for k in kernel))):
        shifted = x[(slice(None), slice(None)) + _tap_slices([i * d for i, d in zip(index, dilations)], out, strides)]
        term = shifted * taps[:, t]
        y = term if y is None else y + term
    return y
