"""Cast, CastLike and BitCast.

Casts to a dtype the device backend holds are one ``astype``. Float8, int4/int2, float4 and
string targets exist only as numpy/ml_dtypes arrays: such a node runs on the host (``host``
is decided from the target dtype), with the spec's saturation and rounding rules.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from .registry import register

_FLOAT8 = {np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
                                 ml_dtypes.float8_e5m2fnuz)}  # fmt: skip
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)


def _target(to: int | str) -> np.dtype:
    """The numpy dtype of a ``to`` attribute (an enum value; a type name before opset 6)."""
    if isinstance(to, str):
        to = onnx.TensorProto.DataType.Value(to.upper())
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(to))


def _cast_host(x: np.ndarray, dtype: np.dtype, saturate: int, round_mode: str) -> np.ndarray:
    x = np.asarray(x)
    if dtype.kind == "O":
        return np.array(x.astype(np.str_), dtype=object)
    if x.dtype.kind == "O":  # strings parse as float64 first ("1e3", "NaN", "-INF")
        x = np.array([float(v) for v in x.reshape(-1)], dtype=np.float64).reshape(x.shape)
    if dtype in _FLOAT8 and saturate:  # out-of-range values and infinities clamp to the largest finite
        info = ml_dtypes.finfo(dtype)
        src = x if x.dtype.kind == "f" else x.astype(np.float32)
        return np.clip(src, float(info.min), float(info.max)).astype(dtype)
    if dtype == _E8M0:
        return numpy_helper.to_float8e8m0(x, bool(saturate), round_mode).astype(dtype)
    return x.astype(dtype)


def _cast(B: Any, x: Any, dtype: np.dtype, saturate: int = 1, round_mode: str = "up") -> Any:
    if B.is_host or not B.supports_dtype(dtype) or not B.supports_dtype(B.dtype(x)):
        return _cast_host(B.to_numpy(x), dtype, saturate, round_mode)
    return B.astype(x, dtype)


def _host_target(B: Any, attrs: dict[str, Any]) -> bool:
    """Run on the host when the device has no type for the ``to`` dtype."""
    return "to" in attrs and not B.supports_dtype(_target(attrs["to"]))


@register("Cast", 1, host=_host_target, replay_as="astype")
def cast_1(B: Any, x: Any, *, to: int | str) -> Any:
    return _cast(B, x, _target(to))


@register("Cast", 19, host=_host_target, replay_as="astype")
def cast_19(B: Any, x: Any, *, to: int, saturate: int = 1) -> Any:
    return _cast(B, x, _target(to), saturate)


@register("Cast", 24, host=_host_target, replay_as="astype")
def cast_24(B: Any, x: Any, *, to: int, saturate: int = 1, round_mode: str = "up") -> Any:
    return _cast(B, x, _target(to), saturate, round_mode)


@register("CastLike", 15, replay_as="astype")
def castlike_15(B: Any, x: Any, like: Any) -> Any:
    return _cast(B, x, np.dtype(B.dtype(like)))


@register("CastLike", 19, replay_as="astype")
def castlike_19(B: Any, x: Any, like: Any, *, saturate: int = 1) -> Any:
    return _cast(B, x, np.dtype(B.dtype(like)), saturate)


@register("BitCast", 26, host=_host_target)
def bitcast_26(B: Any, x: Any, *, to: int) -> Any:
    """Reinterpret the bits; source and target have the same item size, so the shape holds."""
    dtype = _target(to)
    if np.dtype(B.dtype(x)).itemsize != dtype.itemsize:
        raise ValueError(f"BitCast from {B.dtype(x)} to {dtype}: the bit widths differ")
    return B.bitcast(x, dtype)
