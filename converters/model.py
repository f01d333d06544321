"""``load()`` and ``Model``: an ONNX file as a callable of backend arrays."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from .backends import Backend, get_backend
from .errors import InputError, ModelLoadError
from .functions import expand_functions
from .fusion import fuse
from .graph import Executable, Program
from .ops.registry import normalize_domain
from .values import is_host, np_dtype

Source = str | os.PathLike | bytes | onnx.ModelProto
_CHECKER_NOT_OURS = ("2GB", "No Op registered for", "is not a registered function/op")


@dataclass(frozen=True)
class TensorInfo:
    """A graph input or output: its name, numpy dtype and shape (ints, or str for symbolic dims)."""

    name: str
    dtype: np.dtype | None
    shape: tuple[int | str | None, ...] | None
    kind: str = "tensor"


class Model:
    """An ONNX model converted to backend ops, specialised and compiled per input signature.

    >>> model = load("model.onnx")                       # doctest: +SKIP
    >>> model({"input_ids": ids, "attention_mask": mask})["last_hidden_state"]  # doctest: +SKIP
    """

    def __init__(
        self, proto: onnx.ModelProto, backend: Backend, name: str = "<model>", dtype: Any = None, compile: bool = True,
        owned: bool = False,
    ):
        self.name = name
        self.compile = compile
        self.backend = backend
        opsets = {normalize_domain(o.domain): o.version for o in proto.opset_import}
        given = proto  # ``owned``: read by ``load`` from a file or bytes, so its weights may be dropped
        if proto.functions:
            proto = onnx.inliner.inline_local_functions(proto)
        proto, opsets = expand_functions(proto, opsets)  # ops the spec defines as functions of others
        # exported GELU/attention chains as single fused nodes (in place in a proto of our own)
        proto, opsets = fuse(proto, opsets, in_place=owned or proto is not given)
        self.program = Program(proto.graph, opsets)
        if dtype is not None:
            _cast_float_initializers(self.program, np.dtype(dtype))
        self.program.share_weights(backend)  # one copy of each weight: the device's (a view on the host)
        if owned or proto is not given:
            _drop_weights(proto)  # the proto's own copy (Program read them); nobody else holds this proto
        self.dtype = None if dtype is None else np.dtype(dtype)
        initializer_names = set(self.program.initializers)
        self.inputs = [_info(v) for v in proto.graph.input if v.name not in initializer_names]
        self.optional_inputs = {v.name for v in proto.graph.input if v.name in initializer_names}
        self.outputs = [_info(v) for v in proto.graph.output]
        self._executables: dict[tuple, Executable] = {}

    def __call__(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Run the model on ``feeds`` (numpy or backend arrays); returns backend arrays by name."""
        arrays = self._check_feeds(feeds)
        self.backend.prepare_thread()
        key = tuple((n, _signature(a, self.backend)) for n, a in arrays.items())
        exe = self._executables.get(key)
        if exe is None:
            flags = frozenset(n for n, a in arrays.items() if _is_flag(a))
            exe = Executable(self.program, self.backend, arrays, self.compile, flags)
            self._executables[key] = exe
        out = exe(arrays)
        return {n: self._to_backend(v) for n, v in out.items()}

    def signatures(self) -> dict[tuple, bool]:
        """The input signatures seen so far, each with whether it runs compiled."""
        return {k: e.compiled for k, e in self._executables.items()}

    def _to_backend(self, v: Any) -> Any:
        if isinstance(v, list):
            return [self._to_backend(x) for x in v]
        if is_host(v) and v is not None and self.backend.supports_dtype(np.asarray(v).dtype):
            return self.backend.asarray(np.asarray(v))
        return v

    def _check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        expected = {i.name: i for i in self.inputs}
        unknown = [n for n in feeds if n not in expected and n not in self.optional_inputs]
        if unknown:
            raise InputError(f"{self.name}: unknown input(s) {unknown}; the model takes {list(expected)}")
        missing = [n for n in expected if n not in feeds]
        if missing:
            raise InputError(f"{self.name}: missing input(s) {missing}; the model takes {_describe_inputs(self.inputs)}")
        return {n: self._check_feed(expected.get(n), n, v) for n, v in feeds.items()}

    def _check_feed(self, info: TensorInfo | None, name: str, value: Any) -> Any:
        B = self.backend
        if info is not None and info.kind != "tensor" or isinstance(value, list) or value is None:
            return self._to_backend(value)  # sequence/optional: its tensors are inputs like any other
        if not B.is_array(value):
            value = np.asarray(value, dtype=info.dtype if info and not isinstance(value, np.ndarray) else None)
        dtype = B.dtype(value) if B.is_array(value) else value.dtype
        want = self.dtype if self.dtype is not None and info.dtype == np.float32 else info.dtype
        if want is not None and dtype != want:
            if self.dtype is not None and info.dtype == np.float32 and dtype == np.float32:
                value, dtype = (B.astype(value, want) if B.is_array(value) else value.astype(want)), want
            else:
                raise InputError(f"{self.name}: input {name!r} has dtype {dtype}, expected {want} (shape {_shape_str(info)})")
        shape = tuple(B.shape(value)) if B.is_array(value) else value.shape
        if info.shape is not None:
            if len(shape) != len(info.shape):
                raise InputError(f"{self.name}: input {name!r} has rank {len(shape)} (shape {list(shape)}), expected rank {len(info.shape)} {_shape_str(info)}")
            for got, dim in zip(shape, info.shape):
                if isinstance(dim, int) and dim != got:
                    raise InputError(f"{self.name}: input {name!r} has shape {list(shape)}, expected {_shape_str(info)}")
        if dtype == np.bool_ and int(np.prod(shape)) <= 1:
            # a flag (use_cache_branch): kept on the host and specialised on, so that the If it
            # drives is folded and the graph still compiles (one signature per value)
            return B.to_numpy(value) if B.is_array(value) else value
        if not B.is_array(value) and B.supports_dtype(dtype):
            value = B.asarray(value)
        return value


def load(
    source: Source, backend: str | Backend = "mlx", dtype: Any = None, device: str | None = None, compile: bool = True
) -> Model:
    """Load an ONNX model (a path, its bytes, or a ``ModelProto``) and convert it for ``backend``.

    >>> import transmuter_mlx as tm
    >>> model = tm.load("model.onnx")                       # doctest: +SKIP
    >>> [i.name for i in model.inputs]                      # doctest: +SKIP
    ['input_ids', 'attention_mask', 'token_type_ids']

    Unsupported ops are reported here, all at once, with the first node of each.
    """
    B = get_backend(backend, device) if isinstance(backend, str) else backend
    proto, name = read_model(source)
    return Model(proto, B, name, dtype, compile, owned=not isinstance(source, onnx.ModelProto))


def read_model(source: Source) -> tuple[onnx.ModelProto, str]:
    """Parse ``source`` into a ModelProto (with its external data); errors name the file."""
    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or "<model>"
    if isinstance(source, bytes | bytearray):
        try:
            return onnx.load_from_string(bytes(source)), "<bytes>"
        except (DecodeError, ValueError) as e:
            raise ModelLoadError(f"<bytes>: not a valid ONNX model ({e})") from e
    path = Path(source)
    if not path.is_file():
        raise ModelLoadError(f"{path}: no such ONNX file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise ModelLoadError(f"{path}: not a valid ONNX model, the file is corrupt or truncated ({e})") from e
    try:
        _load_external_data(proto, path.parent)
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{path}: its external data could not be read ({e})") from e
    if not proto.graph.node and not proto.graph.output:
        raise ModelLoadError(f"{path}: not a valid ONNX model, it has no graph (corrupt or truncated file?)")
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        # ops outside onnx's schemas (onnxruntime's SimplifiedLayerNormalization in the default
        # domain, as model-builder exports have it) are ours to resolve: the registry reports them
        if not any(m in str(e) for m in _CHECKER_NOT_OURS):
            raise ModelLoadError(f"{path}: the ONNX checker rejects the model: {e}") from e
    return proto, str(path)


def _load_external_data(proto: onnx.ModelProto, folder: Path) -> None:
    """Read every tensor stored outside the file into the proto.

    Unlike onnx's own loader this follows symbolic links, which is how the huggingface_hub
    cache stores files; it still refuses locations outside the model's folder tree.
    """
    handles: dict[str, Any] = {}
    try:
        for tensor in onnx.external_data_helper._get_all_tensors(proto):
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            info = {e.key: e.value for e in tensor.external_data}
            location = info.get("location", "")
            if not location or os.path.isabs(location) or ".." in Path(location).parts:
                raise ValueError(f"tensor {tensor.name!r} has an unsafe external data location {location!r}")
            if location not in handles:
                file = folder / location
                if not file.is_file():
                    raise OSError(f"external data file {file} (for tensor {tensor.name!r}) is missing")
                handles[location] = open(os.path.realpath(file), "rb")  # noqa: SIM115 - closed below
            f = handles[location]
            f.seek(int(info.get("offset", 0)))
            length = int(info["length"]) if "length" in info else -1
            data = f.read(length)
            if length >= 0 and len(data) != length:
                raise OSError(f"external data file {folder / location} is truncated (tensor {tensor.name!r})")
            tensor.raw_data = data
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
    finally:
        for f in handles.values():
            f.close()


def _info(v: onnx.ValueInfoProto) -> TensorInfo:
    t = v.type
    if t.HasField("tensor_type"):
        tt = t.tensor_type
        dtype = np_dtype(tt.elem_type) if tt.elem_type else None
        shape = None
        if tt.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
        return TensorInfo(v.name, dtype, shape)
    return TensorInfo(v.name, None, None, t.WhichOneof("value") or "unknown")


def _signature(a: Any, B: Backend) -> Any:
    if isinstance(a, list):
        return ("seq",) + tuple(_signature(x, B) for x in a)
    if a is None:
        return None
    if B.is_array(a):
        return (tuple(B.shape(a)), str(B.dtype(a)))
    if _is_flag(a):
        return (tuple(np.shape(a)), "bool", "flag", bool(np.asarray(a).any()))
    return (tuple(np.shape(a)), str(np.asarray(a).dtype), "host")


def _is_flag(a: Any) -> bool:
    return isinstance(a, np.ndarray | np.generic) and a.dtype == np.bool_ and a.size <= 1


def _shape_str(info: TensorInfo) -> str:
    if info.shape is None:
        return "[any shape]"
    return "[" + ", ".join(str(d) if d is not None else "?" for d in info.shape) + "]"


def _describe_inputs(infos: list[TensorInfo]) -> str:
    return ", ".join(f"{i.name}: {i.dtype} {_shape_str(i)}" for i in infos)


def _drop_weights(proto: onnx.ModelProto) -> None:
    """Free the initializers of a proto the Program has read (the graph's nodes and inputs stay)."""
    del proto.graph.initializer[:]
    del proto.graph.sparse_initializer[:]


def _cast_float_initializers(program: Program, dtype: np.dtype) -> None:
    for name, value in program.initializers.items():
        if isinstance(value, np.ndarray) and value.dtype == np.float32:
            program.initializers[name] = value.astype(dtype)
