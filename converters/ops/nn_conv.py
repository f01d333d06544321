"""Convolutions: Conv, ConvTranspose (NC* layout, as ONNX) on the backends' native kernels; DeformConv."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._window import spatial_pads
from .registry import register


def _bias(B: Any, y: Any, b: Any) -> Any:
    if b is None:
        return y
    return B.add(y, B.reshape(b, (1, -1) + (1,) * (len(B.shape(y)) - 2)))


@register("Conv", 1)
def conv_1(
    B: Any,
    x: Any,
    w: Any,
    b: Any = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Any:
    kernel = B.shape(w)[2:]
    pairs, strides, dilations, _ = spatial_pads(B.shape(x)[2:], kernel, strides, dilations, pads, auto_pad)
    return _bias(B, B.conv(x, w, strides, pairs, dilations, group), b)


def _crop(B: Any, y: Any, begin: list[int], end: list[int]) -> Any:
    """``y`` with ``begin``/``end`` removed per spatial axis; a negative amount appends zeros."""
    shape = B.shape(y)
    if any(v < 0 for v in begin + end):
        y = B.pad(y, [(0, 0), (0, 0)] + [(max(0, -a), max(0, -b)) for a, b in zip(begin, end)], 0)
        begin, end = [max(0, v) for v in begin], [max(0, v) for v in end]
        shape = B.shape(y)
    if not any(begin + end):
        return y
    stops = [shape[0], shape[1]] + [s - e for s, e in zip(shape[2:], end)]
    return B.slice(y, [0, 0] + begin, stops, [1] * len(shape))


@register("ConvTranspose", 1)
def conv_transpose_1(
    B: Any,
    x: Any,
    w: Any,
    b: Any = None,
    *,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    output_padding: list[int] | None = None,
    output_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Any:
    space, kernel = B.shape(x)[2:], B.shape(w)[2:]
    n = len(space)
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    output_padding = list(output_padding or [0] * n)[:n]
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    full = [(s - 1) * st + d * (k - 1) + 1 for s, st, d, k in zip(space, strides, dilations, kernel)]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = (
            list(output_shape)[-n:] if output_shape is not None else [s * st for s, st in zip(space, strides)]
        )
        total = [f + op - t for f, op, t in zip(full, output_padding, target)]
        if auto_pad == "SAME_UPPER":
            begin = [t // 2 for t in total]
        else:
            begin = [t - t // 2 for t in total]
        end = [t - a for t, a in zip(total, begin)]
    else:
        pairs = [(int(pads[i]), int(pads[i + n])) for i in range(n)] if pads else [(0, 0)] * n
        begin, end = [p[0] for p in pairs], [p[1] for p in pairs]
    y = B.conv_transpose(x, w, strides, dilations, group)
    # output_padding adds rows at the end that no input reaches: zeros before the bias
    y = _crop(B, y, begin, [e - op for e, op in zip(end, output_padding)])
    return _bias(B, y, b)


def _bilinear_taps(B: Any, c: Any, size: int, dt: Any) -> list[tuple[Any, Any]]:
    """(index, weight) of the two taps around ``c``; taps outside [0, size) weigh zero."""
    lo = B.floor(c)
    frac = B.subtract(c, lo)
    taps = []
    for tap, w in (
        (lo, B.subtract(B.asarray(np.asarray(1, dt)), frac)),
        (B.add(lo, B.asarray(np.asarray(1, dt))), frac),
    ):
        valid = B.logical_and(B.greater_equal(tap, B.asarray(np.asarray(0, dt))),
                              B.less_equal(tap, B.asarray(np.asarray(size - 1, dt))))  # fmt: skip
        taps.append((B.astype(B.clip(tap, 0.0, size - 1.0), np.int32), B.where(valid, w, B.zeros((), dt))))
    return taps


@register("DeformConv", 19)
def deform_conv_19(
    B: Any,
    x: Any,
    w: Any,
    offset: Any,
    b: Any = None,
    mask: Any = None,
    *,
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    offset_group: int = 1,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Any:
    """2-D deformable convolution: bilinear samples at the offset kernel taps, then a grouped matmul."""
    N, C, H, W = B.shape(x)
    Co, _, kh, kw = B.shape(w)
    oh, ow = B.shape(offset)[2:]
    sh, sw = strides or (1, 1)
    dh, dw = dilations or (1, 1)
    pt, pl = (pads or (0, 0, 0, 0))[:2]
    G, K, P, dt = offset_group, kh * kw, oh * ow, B.dtype(x)
    # kernel tap positions before the offsets, (K, P), on the host
    base_y = (np.arange(kh) * dh)[:, None, None, None] + (np.arange(oh) * sh - pt)[None, None, :, None]
    base_x = (np.arange(kw) * dw)[None, :, None, None] + (np.arange(ow) * sw - pl)[None, None, None, :]
    base_y, base_x = (np.broadcast_to(v, (kh, kw, oh, ow)).reshape(K, P).astype(dt) for v in (base_y, base_x))
    off = B.reshape(offset, (N, G, K, 2, P))
    y = B.add(
        B.reshape(B.slice(off, [0, 0, 0, 0, 0], [N, G, K, 1, P], [1] * 5), (N, G, K, P)), B.asarray(base_y)
    )
    xx = B.add(
        B.reshape(B.slice(off, [0, 0, 0, 1, 0], [N, G, K, 2, P], [1] * 5), (N, G, K, P)), B.asarray(base_x)
    )
    indices, weights = [], []
    for iy, wy in _bilinear_taps(B, y, H, dt):
        for ix, wx in _bilinear_taps(B, xx, W, dt):
            indices.append(B.add(B.multiply(iy, B.asarray(np.asarray(W, np.int32))), ix))
            weights.append(B.multiply(wy, wx))
    idx = B.reshape(B.stack(indices, 2), (N, G, 1, 4 * K * P))
    cols = B.take_along_axis(B.reshape(x, (N, G, C // G, H * W)), idx, 3)
    cols = B.reshape(cols, (N, G, C // G, 4, K, P))
    cols = B.sum(B.multiply(cols, B.expand_dims(B.stack(weights, 2), (2,))), 3, False)  # (N, G, C/G, K, P)
    if mask is not None:
        cols = B.multiply(cols, B.reshape(mask, (N, G, 1, K, P)))
    cols = B.reshape(cols, (N, group, C // group, K, P))
    wg = B.reshape(w, (group, Co // group, C // group, K))
    out = B.reshape(B.einsum("ngckp,gock->ngop", cols, wg), (N, Co, oh, ow))
    return _bias(B, out, b)
