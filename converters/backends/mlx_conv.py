"""Convolutions as matrix products and shifted sums, for MLX's CPU device.

MLX's CPU convolution (0.32, with MKL as its BLAS) took 2-5x PyTorch's time for ordinary kernels and 30-140x for
depthwise ones on a 2-core AVX2 EPYC (a 1x1 convolution over 256 channels of 200 x 267: 96 ms against PyTorch's
34; ConvNeXt's 7 x 7 depthwise over 96 channels of 56 x 56: 50 ms against 0.4). On the CPU device, for float32,
``conv`` computes these instead (``None`` where none applies, and the caller runs ``mx.conv_general``):

- a 1 x 1 convolution: one matmul of the (O, C) weight with the (N, C, positions) input, in its own layout;
- a depthwise convolution: the sum over the kernel's taps of a shifted view times each channel's weight, which the
  model's ``mx.compile`` fuses;
- a 2-D k x k convolution over many positions and channels: the sum over taps of (positions x C) @ (C x O)
  products, accumulated by ``addmm``; at stride 1 each tap is a window of the flattened, padded channels-last
  input (no copy).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import mlx.core as mx

MAX_SHIFTED_TAPS = 81  # a 9 x 9 depthwise kernel; larger ones stay on mx.conv_general
# Per-tap products need many positions (MLX's own kernel won on 512 channels of 25 x 34: 30 ms against 34) and
# enough channels to make each product a real GEMM (an image's 3 channels, 7 x 7 at stride 2: 133 ms against 233;
# AST's 1-channel 16 x 16 patches: 3.3 ms against 82); 2-D only: wav2vec2-base's 1-D feature layers (512 channels,
# kernel 3, stride 2) were no faster that way and the whole model ran slower
MIN_POSITIONS_PER_CHANNEL = 4
MIN_TAP_CHANNELS = 32


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
    out = _output_size(x.shape[2:], kernel, strides, pads, dilations)
    if (groups == 1 and len(kernel) == 2 and channels >= MIN_TAP_CHANNELS
            and math.prod(out) >= MIN_POSITIONS_PER_CHANNEL * channels):
        return _taps_matmul(x, w, strides, pads, dilations, out)
    return None


def _output_size(
    space: Sequence[int], kernel: Sequence[int], strides: Sequence[int], pads: Sequence[tuple[int, int]],
    dilations: Sequence[int],
) -> list[int]:
    return [(s + a + b - d * (k - 1) - 1) // st + 1
            for s, k, st, (a, b), d in zip(space, kernel, strides, pads, dilations)]  # fmt: skip


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
    out = _output_size(x.shape[2:], kernel, strides, pads, dilations)
    if any(a or b for a, b in pads):
        x = mx.pad(x, [(0, 0), (0, 0), *pads])
    taps = mx.reshape(w, (w.shape[0], -1) + (1,) * n)  # (C, taps, 1, ...): a channel's weight per tap
    y = None
    for t, index in enumerate(itertools.product(*(range(k) for k in kernel))):
        shifted = x[(slice(None), slice(None)) + _tap_slices([i * d for i, d in zip(index, dilations)], out, strides)]
        term = shifted * taps[:, t]
        y = term if y is None else y + term
    return y


def _taps_matmul(
    x: mx.array, w: mx.array, strides: Sequence[int], pads: Sequence[tuple[int, int]], dilations: Sequence[int],
    out: Sequence[int],
) -> mx.array:
    (N, C, *_), (out_channels, _, *kernel), n = x.shape, w.shape, len(strides)
    last = (0, *range(2, n + 2), 1)
    x = mx.pad(mx.transpose(x, last), [(0, 0), *pads, (0, 0)])  # (N, *padded, C)
    weights = mx.transpose(mx.reshape(w, (out_channels, C, -1)), (2, 1, 0))  # (taps, C, O)
    taps = list(itertools.product(*(range(k) for k in kernel)))
    y = None
    if all(s == 1 for s in strides):
        # output position p reads input row p + offset(tap) of the flattened padded input; rows past a line's end
        # or an image's last line are computed and cropped
        padded = x.shape[1:-1]
        line = [math.prod(padded[a + 1:]) for a in range(n)]
        offsets = [sum(i * d * s for i, d, s in zip(tap, dilations, line)) for tap in taps]
        rows = mx.reshape(x, (-1, C))
        count = rows.shape[0] - offsets[-1]
        for t, offset in enumerate(offsets):
            window = rows[offset:offset + count]
            y = mx.matmul(window, weights[t]) if y is None else mx.addmm(y, window, weights[t])
        y = mx.reshape(mx.pad(y, [(0, offsets[-1]), (0, 0)]), (N, *padded, out_channels))
        y = y[(slice(None), *(slice(0, o) for o in out))]
    else:
        for t, tap in enumerate(taps):
            shifted = x[(slice(None), *_tap_slices([i * d for i, d in zip(tap, dilations)], out, strides))]
            shifted = mx.reshape(shifted, (-1, C))
            y = mx.matmul(shifted, weights[t]) if y is None else mx.addmm(y, shifted, weights[t])
        y = mx.reshape(y, (N, *out, out_channels))
    return mx.transpose(y, (0, n + 1, *range(1, n + 1)))
