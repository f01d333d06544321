"""``load()`` and ``Model``: an ONNX file as a callable of backend arrays."""

from __future__ import annotations

import functools
import heapq
import os
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from . import heap
from .backends import Backend, get_backend
from .branches import inline_branches, is_if_on
from .errors import InputError, ModelLoadError
from .functions import expand_functions
from .fusion import fuse
from .graph import Executable, Interpreter, Program, _all_nodes
from .last_position import last_position
from .ops.random import FIXED, RANDOM_OPS, draws
from .ops.registry import normalize_domain
from .precision import FLOAT_TYPES, cast_graph, cast_initializers, compute_dtype
from .values import is_host, np_dtype

Source = str | os.PathLike | bytes | onnx.ModelProto
# input signatures a Model keeps planned and compiled; the least recently used is dropped beyond it
DEFAULT_MAX_SIGNATURES = int(os.environ.get("TRANSMUTER_MLX_MAX_SIGNATURES", "64"))
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

    >>> import numpy as np
    >>> from transmuter_mlx.hub import open_repo
    >>> model = load(open_repo("Xenova/all-MiniLM-L6-v2").onnx_path())
    >>> ids = np.array([[101, 7592, 2088, 102]])                     # [CLS] hello world [SEP]
    >>> feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    >>> model(feeds)["last_hidden_state"].shape                      # an mx.array
    (1, 4, 384)
    >>> len(model.signatures())                                      # one compiled shape so far
    1
    """

    def __init__(
        self, proto: onnx.ModelProto, backend: Backend, name: str = "<model>", dtype: Any = None, compile: bool = True,
        owned: bool = False, max_signatures: int | None = None, weights: dict[str, np.ndarray] | None = None,
    ):
        self.name = name
        self.compile = compile
        self.max_signatures = _check_max_signatures(max_signatures)
        self.backend = backend
        opsets = {normalize_domain(o.domain): o.version for o in proto.opset_import}
        given = proto  # ``owned``: read by ``load`` from a file or bytes, so its weights may be dropped
        if proto.functions:
            proto = onnx.inliner.inline_local_functions(proto)
        proto, opsets = expand_functions(proto, opsets)  # ops the spec defines as functions of others
        self.dtype = compute_dtype(dtype)  # the float type the graph computes in (None: the file's own)
        keep: frozenset[str] = frozenset()
        if self.dtype is not None:
            if not owned and proto is given:  # the caller's proto is never edited (the copy drops its weights below)
                proto = _copy(proto)
            keep = cast_graph(proto.graph, self.dtype)  # before fusion, which then sees the graph as it runs
        # exported GELU/attention chains as single fused nodes (in place in a proto of our own)
        proto, opsets = fuse(proto, opsets, in_place=owned or proto is not given, weights=weights)
        self.program = Program(proto.graph, opsets, weights)
        # whether a call's result depends on random draws (``seed``/``noise`` of ``__call__``)
        self.random = any(n.op_type in RANDOM_OPS for n in _all_nodes(proto.graph))
        if self.dtype is not None:
            cast_initializers(self.program.initializers, self.dtype, keep)
        self.program.share_weights(backend)  # one copy of each weight: the device's (a view on the host)
        if owned or proto is not given:
            _drop_weights(proto)  # the proto's own copy (Program read them); nobody else holds this proto
        initializer_names = set(self.program.initializers)
        self.inputs = [_info(v) for v in proto.graph.input if v.name not in initializer_names]
        self.optional_inputs = {v.name for v in proto.graph.input if v.name in initializer_names}
        self._infos = {v.name: _info(v) for v in proto.graph.input}
        self.outputs = [_info(v) for v in proto.graph.output]
        self._executables: OrderedDict[tuple, Executable] = OrderedDict()
        # (outputs wanted at the last position, flag values) -> (the program for them, those it computes whole)
        self._variants: dict[tuple[frozenset[str], frozenset], tuple[Program, set[str]]] = {}
        self._flag_ifs = any(is_if_on(s, self._infos) for s in self.program.steps)
        self._lock = threading.Lock()  # the signature cache is shared by the threads that call the model

    def __call__(self, feeds: Mapping[str, Any], *, unchecked: Collection[str] = (),
                 compile: bool | str | None = None, seed: int | None = None, noise: bool = True,
                 last_position: Collection[str] = ()) -> dict[str, Any]:
        """Run the model on ``feeds`` (numpy or backend arrays); returns backend arrays by name.

        Index inputs (token ids, position ids...) are checked before the device reads them: an
        ``IndexOutOfRangeError`` names the node, the input and the bad value. A feed given as a device
        array is read back for that (a wait for the device) unless ``unchecked`` names it: the caller
        vouches for its values (the decoding loop's picked tokens), which are clamped into range instead.
        ``compile`` overrides the model's setting for a signature planned by this call: ``"on_reuse"`` for a
        shape that may be used only once (a step of a cache that grows): traced at its second call, so a
        one-off shape never pays for a trace.

        ``seed`` and ``noise`` decide the draws of a model with random operators (``self.random``; other
        models ignore them). ``noise=False``: each gives a fixed value, not a draw (normal: its mean, uniform:
        its upper bound, see ``ops/random.py``), so the call is deterministic and compiles as usual. A ``seed``:
        they draw from one generator seeded with it, so that the same seed gives the same result; such a call
        runs uncompiled (its draws are new values at every call, which a compiled replay would hold fixed).
        Neither: each unseeded generator draws once per input signature.

        ``last_position`` names outputs of shape (batch, length, ...) wanted at the last position of axis 1 only,
        as (batch, 1, ...): a decoder's logits after a prompt, whose head then multiplies one row of each
        sequence, not all of them (``last_position.py``).
        """
        self.backend.prepare_thread(self)  # first: before the feeds take buffers from a cache it may clear
        arrays, host = self._check_feeds(feeds)
        flags = (frozenset((n, bool(np.asarray(a).reshape(-1)[0])) for n, a in arrays.items() if _is_flag(a) and a.size)
                 if self._flag_ifs else frozenset())
        program, sliced = self._program_for(frozenset(last_position), flags)
        if self.random and noise and seed is not None:
            with draws(np.random.default_rng(_check_seed(seed))):
                out = Interpreter(program, self.backend, sync=True).run(arrays)
            return self._last_rows({n: self._to_backend(v) for n, v in out.items()}, sliced)
        key = tuple((n, _signature(a, self.backend)) for n, a in arrays.items())
        if last_position:
            key += (("last_position", tuple(sorted(last_position))),)
        if self.random and not noise:
            with draws(FIXED):  # fixed values are constants of the signature: planned and compiled apart
                key += (("noise", False),)
                return self._last_rows(self._run(key, program, arrays, host, unchecked, compile), sliced)
        return self._last_rows(self._run(key, program, arrays, host, unchecked, compile), sliced)

    def _program_for(self, last: frozenset[str],
                     flags: frozenset[tuple[str, bool]] = frozenset()) -> tuple[Program, set[str]]:
        """The program for these flag values (each If on a flag replaced by its branch, ``branches.py``; empty when
        no If reads a flag) computing the outputs ``last`` at the last position, and those of ``last`` it computes
        whole."""
        if not last and not self._flag_ifs:
            return self.program, set()
        unknown = sorted(last - set(self.program.output_names))
        if unknown:
            raise InputError(f"{self.name}: last_position names {unknown}, not outputs of the model "
                             f"({self.program.output_names})")
        key = (last, flags)
        with self._lock:
            if key not in self._variants:
                program = inline_branches(self.program, dict(flags))
                ranks = {o.name: None if o.shape is None else len(o.shape) for o in self.outputs}
                self._variants[key] = last_position(program, last, ranks) if last else (program, set())
            return self._variants[key]

    def _last_rows(self, out: dict[str, Any], names: set[str]) -> dict[str, Any]:
        """``out`` with each of ``names`` cut to its last position on axis 1 (an output no Slice went before)."""
        B = self.backend
        for n in names:
            shape = B.shape(out[n])
            if len(shape) < 2:
                raise InputError(f"{self.name}: output {n!r} has shape {list(shape)}: no positions on axis 1 "
                                 "for last_position")
            starts = [0, shape[1] - 1] + [0] * (len(shape) - 2)
            out[n] = B.slice(out[n], starts, list(shape), [1] * len(shape))
        return out

    def _run(self, key: tuple, program: Program, arrays: dict[str, Any], host: dict[str, np.ndarray],
             unchecked: Collection[str], compile: bool | str | None) -> dict[str, Any]:
        exe, first = self._executable(key, program, arrays, self.compile if compile is None else compile)
        exe.check_on_host(arrays, host, frozenset(unchecked))
        out = first if first is not None else exe(arrays)
        return {n: self._to_backend(v) for n, v in out.items()}

    def _executable(self, key: tuple, program: Program, arrays: dict[str, Any],
                    compile: bool | str) -> tuple[Executable, dict[str, Any] | None]:
        """The signature's Executable (planned now if new, evicting the least recently used beyond
        ``max_signatures``), and for a new one the outputs of its planning walk when they are this call's."""
        with self._lock:
            exe = self._executables.get(key)
            if exe is not None:
                self._executables.move_to_end(key)
                return exe, None
        flags = frozenset(n for n, a in arrays.items() if _is_flag(a))
        before = heap.resident()
        exe = Executable(program, self.backend, arrays, compile, flags)
        first = exe.take_first_outputs()  # this caller's own: another thread never sees them
        heap.release_if_grown(before)  # what the planning walk freed, glibc's heap keeps resident
        with self._lock:
            self._executables[key] = exe
            self._executables.move_to_end(key)
            while len(self._executables) > self.max_signatures:
                self._executables.popitem(last=False)
        return exe, first

    def signatures(self) -> dict[tuple, bool]:
        """The input signatures seen so far, each with whether it runs compiled."""
        return {k: e.compiled for k, e in self._executables.items()}

    def _to_backend(self, v: Any) -> Any:
        if isinstance(v, list):
            return [self._to_backend(x) for x in v]
        if is_host(v) and v is not None and self.backend.supports_dtype(np.asarray(v).dtype):
            return self.backend.asarray(np.asarray(v))
        return v

    def _check_feeds(self, feeds: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The feeds as the backend's arrays, and the host (numpy) value of each feed given on the host."""
        if not isinstance(feeds, Mapping):
            raise InputError(f"{self.name}: feeds must be a mapping of input names to arrays, got {type(feeds).__name__}")
        expected = {i.name: i for i in self.inputs}
        unknown = [n for n in feeds if n not in expected and n not in self.optional_inputs]
        if unknown:
            raise InputError(f"{self.name}: unknown input(s) {unknown}; the model takes {list(expected)}")
        missing = [n for n in expected if n not in feeds]
        if missing:
            raise InputError(f"{self.name}: missing input(s) {missing}; the model takes {_describe_inputs(self.inputs)}")
        arrays, host = {}, {}
        for n, v in feeds.items():
            arrays[n], h = self._check_feed(self._infos[n], n, v)
            if h is not None:
                host[n] = h
        return arrays, host

    def _check_feed(self, info: TensorInfo, name: str, value: Any) -> tuple[Any, np.ndarray | None]:
        B = self.backend
        if info.kind != "tensor":
            return self._to_backend(value), None  # sequence/optional: its tensors are inputs like any other
        if value is None:
            raise InputError(f"{self.name}: input {name!r} is None; expected {_expected(info)}")
        if not B.is_array(value):
            value = self._as_numpy(info, name, value)
        dtype = B.dtype(value) if B.is_array(value) else value.dtype
        # with a compute dtype, a float input takes it: a float feed (float32, float16 or bfloat16) is cast
        computed = self.dtype is not None and info.dtype in FLOAT_TYPES
        want = self.dtype if computed else info.dtype
        if want is not None and dtype != want:
            if computed and dtype in FLOAT_TYPES:
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
            return (B.to_numpy(value) if B.is_array(value) else value), None
        if not B.is_array(value) and B.supports_dtype(dtype):
            return B.asarray(value), value
        return value, (value if not B.is_array(value) else None)

    def _as_numpy(self, info: TensorInfo | None, name: str, value: Any) -> np.ndarray:
        """A feed that is not the backend's array (numpy, a Python number or nested list, another
        library's array) as numpy; Python values take the input's dtype when they fit it."""
        if isinstance(value, np.ndarray | np.generic):
            return np.asarray(value)
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as e:
            raise InputError(f"{self.name}: input {name!r} is not an array ({type(value).__name__}: {e}); "
                             f"expected {_expected(info)}") from e
        if array.dtype == object or array.dtype.kind in "USV":
            raise InputError(f"{self.name}: input {name!r} is a {type(value).__name__} that is not a rectangular "
                             f"array of numbers; expected {_expected(info)}")
        want = info.dtype if info is not None else None
        if isinstance(value, list | tuple | int | float | bool) and want is not None:
            if not np.can_cast(array.dtype, want, "same_kind") and not (array.size == 0):
                raise InputError(f"{self.name}: input {name!r} holds {array.dtype.name} values; expected {_expected(info)}")
            array = array.astype(want)
        return array


def load(
    source: Source, backend: str | Backend = "mlx", dtype: Any = None, device: str | None = None, compile: bool = True,
    max_signatures: int | None = None,
) -> Model:
    """Load an ONNX model (a path, its bytes, or a ``ModelProto``) and convert it for ``backend``.

    >>> import transmuter_mlx as tm
    >>> from transmuter_mlx.hub import open_repo
    >>> model = tm.load(open_repo("Xenova/all-MiniLM-L6-v2").onnx_path())   # or tm.load("model.onnx")
    >>> [(i.name, i.shape) for i in model.inputs]
    [('input_ids', ('batch_size', 'sequence_length')), ('attention_mask', ('batch_size', 'sequence_length')),
     ('token_type_ids', ('batch_size', 'sequence_length'))]

    Unsupported ops are reported here, all at once, with the first node of each. Each new signature of
    input shapes is planned and compiled once; the ``max_signatures`` most recently used are kept
    (default 64, or ``TRANSMUTER_MLX_MAX_SIGNATURES``), so varied shapes never grow memory without bound.

    ``dtype`` ("float16", "bfloat16", "float32", or "fp16"/"bf16", numpy, mlx or torch dtypes) computes the
    graph in that dtype (``converters/precision.py``): its float weights, constants and casts take it, float
    feeds are cast to it, and its float outputs come in it (``model.backend.to_numpy(x)`` converts bfloat16
    too, as an ml_dtypes array). ``model.inputs``/``model.outputs`` keep the dtypes the file declares.
    """
    B = get_backend(backend, device) if isinstance(backend, str) else backend
    # weights kept out of the proto only where no dtype rewrite reads the graph's initializers in it
    proto, name, weights = read_model(source, weights_apart=dtype is None)
    return Model(proto, B, name, dtype, compile, owned=not isinstance(source, onnx.ModelProto),
                 max_signatures=max_signatures, weights=weights)


def read_model(source: Source, weights_apart: bool = False) -> tuple[onnx.ModelProto, str, dict[str, np.ndarray]]:
    """Parse ``source`` into a ModelProto with its external data; errors name the file.

    ``weights_apart``: the graph's large external initializers are read straight from their file into numpy
    arrays, returned by name, and their tensors in the proto keep only name, type and dims. Read into the proto
    and then converted, each weight was held twice (Qwen3-0.6B's fp32 export: 7.0 GB at its peak for 2.9 GB of
    weights, and 3.4 s of copying).
    """
    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or "<model>", {}
    if isinstance(source, bytes | bytearray):
        try:
            return onnx.load_from_string(bytes(source)), "<bytes>", {}
        except (DecodeError, ValueError) as e:
            raise ModelLoadError(f"<bytes>: not a valid ONNX model ({e})") from e
    path = Path(source)
    if not path.is_file():
        raise ModelLoadError(f"{path}: no such ONNX file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise ModelLoadError(f"{path}: not a valid ONNX model, the file is corrupt or truncated ({e})") from e
    if not proto.graph.node and not proto.graph.output:
        raise ModelLoadError(f"{path}: not a valid ONNX model, it has no graph (corrupt or truncated file?)")
    external = any(t.data_location == onnx.TensorProto.EXTERNAL
                   for t in onnx.external_data_helper._get_all_tensors(proto))
    embedded = _take_embedded(proto) if weights_apart else {}
    # checked without its weights (a proto over 2 GB was serialized for the checker: 12 s at Qwen3-0.6B; SmolLM2's
    # 650 MB of embedded weights took 1.8 s and 650 MB more)
    proto, name = _checked(proto, path, weightless=external or bool(embedded), taken=frozenset(embedded))
    try:
        weights = _load_external_data(proto, path, weights_apart)
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{path}: its external data could not be read ({e})") from e
    return proto, name, {**embedded, **weights}


def _take_embedded(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The graph's large plain-numeric initializers stored in the file itself, as numpy arrays by name; their
    tensors in the proto keep name, type and dims (as ``_load_external_data`` leaves external ones)."""
    weights = {}
    for tensor in proto.graph.initializer:
        dtype = _PLAIN.get(tensor.data_type)
        count = int(np.prod(tensor.dims, dtype=np.int64))
        if tensor.data_location != onnx.TensorProto.DEFAULT or dtype is None or count < _APART_MIN_SIZE:
            continue
        data = tensor.raw_data  # a copy of the bytes: read once
        if len(data) == count * dtype.itemsize:
            weights[tensor.name] = np.frombuffer(data, dtype).reshape(tuple(tensor.dims)).copy()
            tensor.ClearField("raw_data")
    return weights


def _checked(proto: onnx.ModelProto, path: Path, sorted_nodes: bool = False, weightless: bool = False,
             taken: frozenset[str] = frozenset()) -> tuple[onnx.ModelProto, str]:
    """``weightless``: the proto's external tensors are not read yet, and those named in ``taken`` were read apart
    (``_take_embedded``); a copy with them emptied is checked (onnx checks external files itself only when given
    the path, and refuses the hub cache's links there)."""
    try:
        onnx.checker.check_model(_emptied_external(proto, taken) if weightless else proto)
    except onnx.checker.ValidationError as e:
        if "topologically sorted" in str(e) and not sorted_nodes:  # onnxruntime sorts such graphs itself (the
            sort_nodes(proto.graph)                                 # gliner package's q8 export has one)
            return _checked(proto, path, sorted_nodes=True, weightless=weightless, taken=taken)
        # ops outside onnx's schemas (onnxruntime's SimplifiedLayerNormalization in the default
        # domain, as model-builder exports have it) are ours to resolve: the registry reports them
        if not any(m in str(e) for m in _CHECKER_NOT_OURS):
            raise ModelLoadError(f"{path}: the ONNX checker rejects the model: {e}") from e
    return proto, str(path)


def _emptied_external(proto: onnx.ModelProto, taken: frozenset[str] = frozenset()) -> onnx.ModelProto:
    """A copy of ``proto`` whose external tensors, and the initializers named in ``taken``, hold no values (their
    dims 0): what the checker reads of a tensor is its type and its one value field, and the data itself is
    checked as it is read."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for tensor in onnx.external_data_helper._get_all_tensors(copy):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
            tensor.dims[:] = [0] * max(1, len(tensor.dims))
    for tensor in copy.graph.initializer:
        if tensor.name in taken:
            tensor.dims[:] = [0] * max(1, len(tensor.dims))
    return copy


def sort_nodes(graph: onnx.GraphProto) -> None:
    """Puts the nodes of ``graph`` (and of its subgraphs) in an order where each runs after the nodes whose outputs
    it reads, keeping the file's order among nodes that are ready together. A node whose inputs no node makes
    stays where it is: the checker names it afterwards.

    >>> from onnx import helper
    >>> g = helper.make_graph([helper.make_node("Neg", ["a"], ["b"]), helper.make_node("Neg", ["x"], ["a"])], "g",
    ...                       [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
    ...                       [helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1])])
    >>> sort_nodes(g); [n.output[0] for n in g.node]
    ['a', 'b']
    """
    for node in graph.node:
        for attribute in node.attribute:
            for sub in [attribute.g, *attribute.graphs] if attribute.type in (5, 10) else []:
                sort_nodes(sub)
    maker = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    waits_on = [{maker[name] for name in _reads(node) if name in maker and maker[name] != i}
                for i, node in enumerate(graph.node)]
    readers: dict[int, list[int]] = {}
    for i, deps in enumerate(waits_on):
        for d in deps:
            readers.setdefault(d, []).append(i)
    left = [len(deps) for deps in waits_on]
    ready = [i for i, n in enumerate(left) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for r in readers.get(i, ()):
            left[r] -= 1
            if left[r] == 0:
                heapq.heappush(ready, r)
    order += [i for i in range(len(graph.node)) if left[i] > 0]  # a cycle: left for the checker to name
    nodes = [graph.node[i] for i in order]
    graph.ClearField("node")
    graph.node.extend(nodes)


def _reads(node: onnx.NodeProto) -> set[str]:
    """The names a node reads: its inputs and what its subgraphs take from the enclosing scope."""
    names = {name for name in node.input if name}
    for attribute in node.attribute:
        for sub in [attribute.g, *attribute.graphs] if attribute.type in (5, 10) else []:
            inner = {t.name for t in sub.initializer} | {v.name for v in sub.input}
            inner |= {out for n in sub.node for out in n.output}
            names |= {name for n in sub.node for name in _reads(n)} - inner
    return names


def _load_external_data(proto: onnx.ModelProto, path: Path, weights_apart: bool = False) -> dict[str, np.ndarray]:
    """Read every tensor stored outside the file into the proto, or (``weights_apart``) the graph's large
    plain-numeric initializers into numpy arrays, returned by name (their tensors keep name, type and dims).

    Unlike onnx's own loader this follows symbolic links, which is how the huggingface_hub
    cache stores files, but only to where such a link may lead (``_allowed_roots``): a link out
    of the model's folder (to /etc/passwd) is refused.
    """
    folder = path.parent
    roots = _allowed_roots(path)
    handles: dict[str, Any] = {}
    weights: dict[str, np.ndarray] = {}
    # the graph's own initializers first (those may be read apart), then every other tensor
    tensors = [(t, weights_apart) for t in proto.graph.initializer]
    tensors += [(t, False) for t in onnx.external_data_helper._get_all_tensors(proto)]
    try:
        for tensor, apart in tensors:
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
                real = os.path.realpath(file)
                if not any(os.path.commonpath([real, root]) == root for root in roots):
                    raise ValueError(f"external data file {file} (for tensor {tensor.name!r}) is a link to {real}, "
                                     f"outside the model's folder{' and its hub cache' if len(roots) > 2 else ''}")
                handles[location] = open(real, "rb")  # noqa: SIM115 - closed below
            f = handles[location]
            f.seek(int(info.get("offset", 0)))
            length = int(info["length"]) if "length" in info else -1
            dtype = _PLAIN.get(tensor.data_type)
            count = int(np.prod(tensor.dims, dtype=np.int64))
            if apart and dtype is not None and count >= _APART_MIN_SIZE:
                if length >= 0 and length != count * dtype.itemsize:
                    raise ValueError(f"tensor {tensor.name!r}: {length} bytes of external data for {count} values")
                offset = f.tell()
                if offset + count * dtype.itemsize > os.fstat(f.fileno()).st_size:
                    raise OSError(f"external data file {folder / location} is truncated (tensor {tensor.name!r})")
                # the file's pages, not a copy: each weight is then copied once, into its device array (a read
                # into memory first cost Qwen3-0.6B's fp32 export 3.3 s of its load and 2.9 GB at the peak). A
                # plain ndarray over the map: np.asarray of a memmap is a new object at every call, and ops cache
                # what they derive from a weight by its identity (MatMulNBits' dequantized plan: 17 GB at Qwen3)
                mapped = np.memmap(f, dtype, mode="r", offset=offset, shape=tuple(tensor.dims))
                weights[tensor.name] = mapped.view(np.ndarray)
            else:
                data = f.read(length)
                if length >= 0 and len(data) != length:
                    raise OSError(f"external data file {folder / location} is truncated (tensor {tensor.name!r})")
                tensor.raw_data = data
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
    finally:
        for f in handles.values():
            f.close()
    return weights


# the element types read as they are stored (little-endian, as ONNX writes them); others (bfloat16, float8, int4,
# strings) go through onnx's own conversion
_PLAIN = {t: np.dtype(np_dtype(t)).newbyteorder("<") for t in (
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16, onnx.TensorProto.INT32,
    onnx.TensorProto.UINT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL)}
_APART_MIN_SIZE = 1024  # smaller ones stay in the proto, where the fusion and folding passes read constants


def _allowed_roots(path: Path) -> list[str]:
    """Where the external data of the model file ``path`` may really be: its folder tree, the folder the file
    itself links into (a folder of links to a model kept elsewhere), and for a file of a huggingface_hub
    snapshot (``models--org--name/snapshots/<revision>/...``) that repository's cache folder (its blobs)."""
    folder = path.parent
    roots = [os.path.realpath(folder), os.path.dirname(os.path.realpath(path))]
    parts = folder.absolute().parts
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] == "snapshots" and parts[i - 1].startswith(("models--", "datasets--", "spaces--")):
            roots.append(os.path.realpath(Path(*parts[:i])))
            break
    return roots


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
        return (tuple(B.shape(a)), _dtype_name(B.dtype(a)))
    if _is_flag(a):
        return (tuple(np.shape(a)), "bool", "flag", bool(np.asarray(a).any()))
    return (tuple(np.shape(a)), str(np.asarray(a).dtype), "host")


@functools.cache
def _dtype_name(dtype: Any) -> str:
    """``str(dtype)``, remembered: 2.7 us a call, 62 times a decode step (a feed each)."""
    return str(dtype)


def _is_flag(a: Any) -> bool:
    return isinstance(a, np.ndarray | np.generic) and a.dtype == np.bool_ and a.size <= 1


def _shape_str(info: TensorInfo) -> str:
    if info.shape is None:
        return "[any shape]"
    return "[" + ", ".join(str(d) if d is not None else "?" for d in info.shape) + "]"


def _expected(info: TensorInfo | None) -> str:
    return "a tensor" if info is None else f"a tensor of {info.dtype} {_shape_str(info)}"


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _check_max_signatures(value: int | None) -> int:
    if value is None:
        return DEFAULT_MAX_SIGNATURES
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_signatures must be a positive integer, got {value!r}")
    return value


def _describe_inputs(infos: list[TensorInfo]) -> str:
    return ", ".join(f"{i.name}: {i.dtype} {_shape_str(i)}" for i in infos)


def _drop_weights(proto: onnx.ModelProto) -> None:
    """Free the initializers of a proto the Program has read (the graph's nodes and inputs stay)."""
    del proto.graph.initializer[:]
    del proto.graph.sparse_initializer[:]


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy
