"""Host-side values: ONNX tensors and attributes as numpy, and the host/device test."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper


def tensor_to_numpy(t: onnx.TensorProto) -> np.ndarray:
    """A TensorProto as numpy (float8/int4/bfloat16 as ml_dtypes arrays, strings as objects)."""
    return numpy_helper.to_array(t)


def sparse_to_numpy(t: onnx.SparseTensorProto) -> np.ndarray:
    """A SparseTensorProto as a dense numpy array (indices are flat [NNZ] or coordinates [NNZ, rank])."""
    values = tensor_to_numpy(t.values).reshape(-1)
    indices = tensor_to_numpy(t.indices).astype(np.int64)
    dense = np.zeros(int(np.prod(t.dims)), dtype=values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), tuple(t.dims))
    dense[indices.reshape(-1)] = values
    return dense.reshape(tuple(t.dims))


def attribute_value(a: onnx.AttributeProto) -> Any:
    """An attribute as a Python value: tensors become numpy, strings become ``str``."""
    T = onnx.AttributeProto
    if a.type == T.TENSOR:
        return tensor_to_numpy(a.t)
    if a.type == T.TENSORS:
        return [tensor_to_numpy(t) for t in a.tensors]
    if a.type == T.SPARSE_TENSOR:
        return sparse_to_numpy(a.sparse_tensor)
    if a.type == T.STRING:
        return a.s.decode("utf-8", errors="replace")
    if a.type == T.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    if a.type == T.GRAPH:
        return a.g
    if a.type == T.GRAPHS:
        return list(a.graphs)
    if a.type == T.TYPE_PROTO:
        return a.tp
    return helper.get_attribute_value(a)


def is_host(v: Any) -> bool:
    """True for numpy values (and sequences or absent optionals made only of them)."""
    if v is None:
        return True
    if isinstance(v, list):
        return all(is_host(x) for x in v)
    return isinstance(v, np.ndarray | np.generic | int | float | bool | str)


def np_dtype(elem_type: int) -> np.dtype:
    """The numpy (or ml_dtypes) dtype of an ONNX TensorProto element type."""
    return helper.tensor_dtype_to_np_dtype(elem_type)
