"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Scales and zero points are per tensor (a scalar), per axis (1-D along ``axis``) or blocked
(the input's shape with ``ceil(D / block_size)`` along ``axis``). Integer results are rounded half
to even and saturated; float8/float4/int4/int2 values only exist on the host (ml_dtypes), so the
planner runs nodes that read or produce them there.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from onnx import helper

from .registry import register

# integer quantized types and their saturation range
INT_RANGES = {
    np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127),
    np.dtype(np.uint16): (0, 65535), np.dtype(np.int16): (-32768, 32767),
    np.dtype(ml_dtypes.uint4): (0, 15), np.dtype(ml_dtypes.int4): (-8, 7),
    np.dtype(ml_dtypes.uint2): (0, 3), np.dtype(ml_dtypes.int2): (-2, 1),
}  # fmt: skip
FLOAT8 = {np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
                                ml_dtypes.float8_e5m2fnuz)}  # fmt: skip


def expand_param(B: Any, v: Any, shape: tuple[int, ...], axis: int, block_size: int = 0) -> Any:
    """A scale or zero point made broadcastable to ``shape`` (per tensor, per axis or blocked)."""
    vs = B.shape(v)
    if len(vs) == 0 or int(np.prod(vs)) == 1:
        return B.reshape(v, ())
    axis %= len(shape)
    if not block_size:
        return B.reshape(v, [vs[0] if i == axis else 1 for i in range(len(shape))])
    # blocked: repeat each block's value block_size times along axis, then cut the remainder
    e = B.broadcast_to(B.expand_dims(v, [axis + 1]), vs[: axis + 1] + (block_size,) + vs[axis + 1 :])
    full = list(vs)
    full[axis] *= block_size
    e = B.reshape(e, full)
    if full[axis] != shape[axis]:
        stops = list(full)
        stops[axis] = shape[axis]
        e = B.slice(e, [0] * len(full), stops, [1] * len(full))
    return e


def saturate_int(B: Any, q: Any, dtype: np.dtype) -> Any:
    """Rounded values saturated to the range of integer ``dtype`` and cast to it."""
    lo, hi = INT_RANGES[dtype]
    q = B.clip(q, lo, hi)
    if B.supports_dtype(dtype):
        return B.astype(q, dtype)
    return np.asarray(q).astype(np.int32).astype(dtype)  # int4/int2 live on the host


def _compute_dtype(x_dtype: np.dtype, scale_dtype: np.dtype, precision: int) -> np.dtype:
    if precision:
        return np.dtype(helper.tensor_dtype_to_np_dtype(precision))
    if scale_dtype.kind != "f" and scale_dtype not in (np.dtype(ml_dtypes.bfloat16),):
        return np.dtype(np.float32)  # float8e8m0 scales
    if x_dtype.kind == "f" and x_dtype.itemsize > scale_dtype.itemsize:
        return x_dtype
    return scale_dtype


def quantize_linear(
    B: Any,
    x: Any,
    y_scale: Any,
    y_zero_point: Any = None,
    *,
    axis: int = 1,
    saturate: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    precision: int = 0,
) -> Any:
    """``saturate(round(x / y_scale) + y_zero_point)``; the zero point's type is the output type."""
    if y_zero_point is not None:
        out = np.dtype(B.dtype(y_zero_point))
    elif output_dtype:
        out = np.dtype(helper.tensor_dtype_to_np_dtype(output_dtype))
    else:
        out = np.dtype(np.uint8)
    shape = B.shape(x)
    ct = _compute_dtype(B.dtype(x), B.dtype(y_scale), precision)
    q = B.divide(B.astype(x, ct), B.astype(expand_param(B, y_scale, shape, axis, block_size), ct))
    zp = None if y_zero_point is None else expand_param(B, y_zero_point, shape, axis, block_size)
    if out in INT_RANGES:
        wide = np.float64 if ct == np.float64 else np.float32  # room for the zero point
        q = B.astype(B.round(q), wide)
        if zp is not None:
            q = B.add(q, B.astype(zp, wide))
        return saturate_int(B, q, out)
    if not B.is_host:
        raise NotImplementedError(f"quantizing to {out} needs the host (give the node a {out} zero point)")
    q = np.asarray(q, dtype=np.float32)
    if zp is not None:
        q = q + np.asarray(zp).astype(np.float32)
    if out in FLOAT8 and saturate:
        fmax = float(ml_dtypes.finfo(out).max)
        q = np.where(np.isnan(q), q, np.clip(q, -fmax, fmax))
    return q.astype(out)  # float4/float6 have no inf or nan: the cast saturates


def dequantize_linear(
    B: Any,
    x: Any,
    x_scale: Any,
    x_zero_point: Any = None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> Any:
    """``(x - x_zero_point) * x_scale``, computed in float32 and cast to the scale's (or output) type."""
    shape = B.shape(x)
    out = (
        np.dtype(helper.tensor_dtype_to_np_dtype(output_dtype))
        if output_dtype
        else np.dtype(B.dtype(x_scale))
    )
    dx = B.astype(x, np.float32)
    # float8/float4 zero points are zero by the spec; int32 has none
    if x_zero_point is not None and np.dtype(B.dtype(x_zero_point)) in INT_RANGES:
        dx = B.subtract(dx, B.astype(expand_param(B, x_zero_point, shape, axis, block_size), np.float32))
    scale = B.astype(expand_param(B, x_scale, shape, axis, block_size), np.float32)
    return B.astype(B.multiply(dx, scale), out)


for _v in (10, 13, 19, 21, 23, 24, 25, 28):
    register("QuantizeLinear", _v)(quantize_linear)
    register("DequantizeLinear", _v)(dequantize_linear)


@register("DynamicQuantizeLinear", 11)
def dynamic_quantize_linear_11(B: Any, x: Any) -> tuple[Any, Any, Any]:
    """uint8 quantization with the scale and zero point that map [min(x, 0), max(x, 0)] onto [0, 255]."""
    fast = B.dynamic_quantize_uint8(x) if B.dtype(x) == np.float32 else None
    if fast is not None:
        return fast
    dt = B.dtype(x)
    zero = B.zeros((), dt)
    hi = B.maximum(B.max(x), zero)
    lo = B.minimum(B.min(x), zero)
    span = B.subtract(hi, lo)
    span = B.where(B.equal(span, zero), B.full((), 1.0, dt), span)
    scale = B.divide(span, B.full((), 255.0, dt))
    zp = B.round(B.clip(B.negative(B.divide(lo, scale)), 0.0, 255.0))
    y = B.add(B.round(B.divide(x, scale)), zp)
    return saturate_int(B, y, np.dtype(np.uint8)), scale, B.astype(zp, np.uint8)
