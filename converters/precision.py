"""A compute dtype: a graph run in float16 or bfloat16 (``load(..., dtype=)``).

``compute_dtype`` reads the dtype a user names ("float16", "fp16", "bf16", ``np.float16``, ``mx.bfloat16``,
``torch.float16`` ...). ``cast_graph`` rewrites a graph to compute in it: every float tensor of the graph
(float32, float16 or bfloat16; float64 is left alone, an exporter writes it on purpose) becomes the compute
dtype: ``Constant``/``ConstantOfShape`` values, ``Cast`` targets, the ``dtype`` of the ops that create
tensors, the subgraphs' own initializers; ``cast_initializers`` does the graph's weights. Constants beyond
the dtype's range (a ``finfo(float32).min`` attention mask) become its largest finite value, as a model built
in that dtype writes ``finfo(dtype).min``: not an infinity, which would make a fully masked row NaN.

Two kinds of values stay float32, where the half types lose what the model needs:

- the statistics of a decomposed norm: ``Pow(x, 2) -> ReduceMean [-> Add(eps)] -> Sqrt`` (RMSNorm, a
  LayerNorm spelled out), whose mean of squares overflows float16 once activations pass 256; the chain runs
  in float32 and its square root is cast back (transformers upcasts these norms the same way);
- the float arithmetic of positions and sizes: the nodes above a ``Cos``/``Sin`` (rotary and sinusoidal
  embeddings), a Cast to an integer type (DeBERTa's log-bucketed relative positions, sizes computed as
  floats) or a comparison, when they read neither a float graph input nor a weight matrix (then they are
  functions of positions, shapes and small tables such as ``inv_freq``). Their constants, casts and
  initializers stay float32, and a value of theirs that another node reads is cast to the compute dtype for
  it. float16 holds integers exactly only up to 2048 (bfloat16: 256): ``position * inv_freq`` in it would be
  off by a good part of a radian at a few thousand tokens, and a bucket index by one.

Ops that accumulate (Softmax, LayerNormalization, the fused attention) compute in float32 inside the
backends' kernels whatever their operands' dtype.
"""

from __future__ import annotations

import collections
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .graph import _node_reads
from .ops.registry import normalize_domain

__all__ = ["COMPUTE_DTYPES", "FLOAT_TYPES", "cast_graph", "cast_initializers", "compute_dtype"]

BF16 = np.dtype(ml_dtypes.bfloat16)
#: the compute dtypes ``load(..., dtype=)`` takes
COMPUTE_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), BF16)
#: the float types a compute dtype replaces
FLOAT_TYPES = frozenset(COMPUTE_DTYPES)
_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16, BF16: TensorProto.BFLOAT16}
_FLOAT_ELEMS = frozenset(_ELEM.values())
_NAMES = {"float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
          "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
          "bfloat16": "bfloat16", "bf16": "bfloat16"}  # fmt: skip
# ops that create a float tensor of their ``dtype`` attribute (float32 when it is absent)
_DTYPE_ATTR_OPS = ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "EyeLike", "Bernoulli")
_CREATES_FLOAT_BY_DEFAULT = ("RandomNormal", "RandomUniform")


def compute_dtype(value: Any) -> np.dtype | None:
    """The numpy dtype of a compute ``dtype`` option, or None for None: ``compute_dtype("bf16") == bfloat16``.

    Takes the names float32/float16/bfloat16 (also fp32, fp16, half, bf16), numpy and ml_dtypes types, and
    mlx's and torch's dtype objects; anything else is a ValueError naming what is taken."""
    if value is None:
        return None
    if isinstance(value, str):
        name = _NAMES.get(value.strip().lower())
    else:
        try:
            dtype = np.dtype(value)
        except TypeError:  # mx.float16, torch.bfloat16: known by their names
            dtype = None
        name = str(dtype) if dtype is not None else _NAMES.get(str(value).rsplit(".", 1)[-1].lower())
    if name not in _NAMES.values():
        raise ValueError(f"dtype must be 'float32', 'float16' or 'bfloat16' (or 'fp32', 'fp16', 'bf16', or a "
                         f"numpy, mlx or torch dtype of them), got {value!r}")
    return BF16 if name == "bfloat16" else np.dtype(name)


def cast_initializers(initializers: dict[str, Any], dtype: np.dtype, keep: frozenset[str] = frozenset()) -> None:
    """The float initializers (other than ``keep``, which stay float32) in ``dtype``, out-of-range values
    clamped to its largest finite value."""
    for name, value in initializers.items():
        if name not in keep and isinstance(value, np.ndarray) and value.dtype in FLOAT_TYPES and value.dtype != dtype:
            initializers[name] = _cast_array(value, dtype)


def cast_graph(graph: onnx.GraphProto, dtype: np.dtype) -> frozenset[str]:
    """Rewrite ``graph`` (in place, with its subgraphs) to compute in ``dtype`` (see the module docstring);
    returns the names of its initializers that must stay float32 (``cast_initializers``' ``keep``)."""
    elem = _ELEM[np.dtype(dtype)]
    region: set[int] = set()
    keep: frozenset[str] = frozenset()
    if elem != TensorProto.FLOAT:  # float32 regions matter only for the half types
        region, keep = _float32_regions(graph, elem)
    for i, node in enumerate(graph.node):
        for a in node.attribute:  # subgraphs (If, Loop, Scan) compute in the dtype too
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs):
                _cast_subgraph(g, dtype)
        if i not in region and normalize_domain(node.domain) == "":
            _cast_node(node, dtype, elem)
    return keep


def _cast_subgraph(graph: onnx.GraphProto, dtype: np.dtype) -> None:
    keep = cast_graph(graph, dtype)
    for t in graph.initializer:
        if t.data_type in _FLOAT_ELEMS and t.name not in keep:
            t.CopyFrom(numpy_helper.from_array(_cast_array(numpy_helper.to_array(t), dtype), t.name))


def _cast_node(node: onnx.NodeProto, dtype: np.dtype, elem: int) -> None:
    op = node.op_type
    if op == "Cast":
        for a in node.attribute:
            if a.name == "to" and a.i in _FLOAT_ELEMS:
                a.i = elem
    elif op in ("Constant", "ConstantOfShape"):
        if op == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):  # a float32 zero
            node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.zeros(1, dtype))))
        for a in list(node.attribute):
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR and a.t.data_type in _FLOAT_ELEMS:
                a.t.CopyFrom(numpy_helper.from_array(_cast_array(numpy_helper.to_array(a.t), dtype), a.t.name))
            elif a.name in ("value_float", "value_floats"):  # float32 by definition: a tensor of the dtype
                value = np.array(a.f if a.name == "value_float" else list(a.floats), np.float32)
                node.attribute.remove(a)
                node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(_cast_array(value, dtype))))
    elif op in _DTYPE_ATTR_OPS:
        attrs = {a.name: a for a in node.attribute}
        if "dtype" in attrs and attrs["dtype"].i in _FLOAT_ELEMS:
            attrs["dtype"].i = elem
        elif "dtype" not in attrs and op in _CREATES_FLOAT_BY_DEFAULT:
            node.attribute.append(helper.make_attribute("dtype", elem))


def _cast_array(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``value`` in ``dtype``; finite values beyond its range become its largest finite value (infinities and
    NaNs stay what they are)."""
    value = np.asarray(value)
    if value.dtype not in FLOAT_TYPES or value.dtype == dtype:
        return value
    limit = float(ml_dtypes.finfo(dtype).max)
    wide = value.astype(np.float32)
    if value.size and np.abs(wide[np.isfinite(wide)]).max(initial=0) > limit:
        wide = np.where(np.isfinite(wide), np.clip(wide, -limit, limit), wide)
    return wide.astype(dtype)


class _Graph:
    """Who produces and who reads each value of a graph; new nodes are appended (the program orders nodes
    itself), so that a node's index never changes."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
        self.readers: dict[str, set[int]] = collections.defaultdict(set)
        for i, n in enumerate(graph.node):
            for name in _node_reads(n):  # with the outer names a subgraph reads
                self.readers[name].add(i)
        self.inits = {t.name: t for t in graph.initializer}
        self.outputs = {o.name for o in graph.output}

    def only_reader(self, name: str, *ops: str) -> int | None:
        rs = self.readers.get(name, set())
        if len(rs) != 1 or name in self.outputs:
            return None
        i = next(iter(rs))
        n = self.graph.node[i]
        return i if n.op_type in ops and normalize_domain(n.domain) == "" else None

    def constant(self, name: str) -> np.ndarray | None:
        t = self.inits.get(name)
        i = self.producer.get(name)
        if t is None and i is not None and self.graph.node[i].op_type == "Constant":
            t = next((a.t for a in self.graph.node[i].attribute if a.name == "value"), None)
        return None if t is None else numpy_helper.to_array(t)

    def cast_after(self, i: int, elem: int, tag: str) -> int:
        """A Cast to ``elem`` of node ``i``'s output, which its readers now read; the new node's index."""
        node = self.graph.node[i]
        result = node.output[0]
        node.output[0] = f"{result}/{tag}"
        self.producer[node.output[0]] = i
        return self._append(helper.make_node("Cast", [node.output[0]], [result], f"{node.name or result}/{tag}",
                                             to=elem))

    def cast_input(self, i: int, name: str, elem: int, tag: str) -> int:
        """A Cast to ``elem`` of value ``name``, which node ``i`` now reads in its place; the new node's index."""
        node = self.graph.node[i]
        cast_name = f"{node.name or node.output[0]}/{name}/{tag}"
        cast = self._append(helper.make_node("Cast", [name], [cast_name], cast_name, to=elem))
        self.readers[name].discard(i)
        for k, x in enumerate(node.input):
            if x == name:
                node.input[k] = cast_name
        self.readers[cast_name].add(i)
        return cast

    def _append(self, node: onnx.NodeProto) -> int:
        self.graph.node.append(node)
        i = len(self.graph.node) - 1
        for name in node.output:
            self.producer[name] = i
        for name in node.input:
            self.readers[name].add(i)
        return i


def _float32_regions(graph: onnx.GraphProto, elem: int) -> tuple[set[int], frozenset[str]]:
    """Rewrite the norm statistics and the trigonometry of positions to run in float32 (see the module
    docstring); the indices of the nodes that ``cast_graph`` leaves float32, and the initializers only
    they read."""
    g = _Graph(graph)
    region = _norm_islands(g, elem) | _position_cones(g, elem)
    readers = collections.defaultdict(set)
    for i, n in enumerate(graph.node):
        for name in _node_reads(n):
            readers[name].add(i)
    for i, n in enumerate(graph.node):  # the constants that only float32 nodes read stay float32 too
        if n.op_type == "Constant" and readers[n.output[0]] and readers[n.output[0]] <= region:
            region.add(i)
    keep = frozenset(name for name in g.inits if readers[name] and readers[name] <= region)
    return region, keep


def _norm_islands(g: _Graph, elem: int) -> set[int]:
    """``Pow(x, 2) -> ReduceMean [-> Add] -> Sqrt`` chains (each value read by the next node only) in float32:
    ``x`` cast to float32 before them, the square root cast back after; the indices of the first casts."""
    region = set()
    for i, node in enumerate(list(g.graph.node)):
        if node.op_type != "Pow" or normalize_domain(node.domain) != "" or len(node.input) < 2:
            continue
        two = g.constant(node.input[1])
        if two is None or two.size != 1 or float(two.reshape(-1)[0]) != 2.0:
            continue
        j = g.only_reader(node.output[0], "ReduceMean")
        k = None if j is None else g.only_reader(g.graph.node[j].output[0], "Add", "Sqrt")
        if k is not None and g.graph.node[k].op_type == "Add":
            k = g.only_reader(g.graph.node[k].output[0], "Sqrt")
        if k is None:
            continue
        region.add(g.cast_input(i, node.input[0], TensorProto.FLOAT, "float32"))
        g.cast_after(k, elem, "cast")
    return region


def _position_cones(g: _Graph, elem: int) -> set[int]:
    """The float arithmetic of positions and shapes in float32: the nodes above a Cos/Sin, a Cast to an integer or
    a comparison, when they read neither a float input nor a weight matrix (then they compute on positions, sizes
    and small tables); the indices of those nodes. A float value of theirs that another node (or the graph's
    output) reads is cast to ``elem`` for it: a Cos/Sin result, rotary or sinusoidal embeddings, anchors."""
    nodes = g.graph.node
    float_inputs = {v.name for v in g.graph.input
                    if v.name not in g.inits and v.type.tensor_type.elem_type in _FLOAT_ELEMS}
    union: set[int] = set()
    for i, n in enumerate(nodes):
        if normalize_domain(n.domain) == "" and (n.op_type in ("Cos", "Sin") or n.op_type in _COMPARISONS
                                                 or (n.op_type == "Cast" and not _makes_float(n))):
            cone = _cone(g, float_inputs, i)
            if cone is not None and _float_nodes(g, cone):
                union |= cone
    floats = _float_nodes(g, union)
    if any(len(nodes[j].output) != 1 for j in floats):
        return set()  # a float node of several outputs (TopK: values and indices): left to the compute dtype
    for j in sorted(floats):
        name = nodes[j].output[0]
        if not g.readers[name] <= union or name in g.outputs:
            g.cast_after(j, elem, "cast")
    for name, t in g.inits.items():  # a float initializer read inside and out: float32 inside (cast up)
        inside = g.readers[name] & union
        if t.data_type in _FLOAT_ELEMS and inside and not g.readers[name] <= union:
            for j in sorted(inside):
                g.cast_input(j, name, TensorProto.FLOAT, "float32")
    return union


_COMPARISONS = ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
_NOT_FLOAT = ("Shape", "Size", *_COMPARISONS, "Not", "And", "Or", "IsNaN", "IsInf", "ArgMax", "ArgMin",
              "NonZero")  # ops whose result is not a float


def _float_nodes(g: _Graph, cone: set[int]) -> set[int]:
    """The nodes of ``cone`` whose result is a float: a float constant, cast or initializer's reader, and what
    computes from them (not a shape nor a comparison)."""
    nodes = g.graph.node
    float_values: set[str] = set()
    found: set[int] = set()
    memo: dict[int, int] = {}
    for i in sorted(cone, key=lambda j: _depth(g, j, cone, memo)):
        n = nodes[i]
        if n.op_type in _NOT_FLOAT:
            continue
        source = (n.op_type in ("Cast", "Constant", "ConstantOfShape") and _makes_float(n)) or any(
            x in float_values or (x in g.inits and g.inits[x].data_type in _FLOAT_ELEMS) for x in n.input)
        if source and not (n.op_type == "Cast" and not _makes_float(n)):
            found.add(i)
            float_values.update(n.output)
    return found


def _makes_float(node: onnx.NodeProto) -> bool:
    """Whether a Cast, Constant or ConstantOfShape makes a float tensor."""
    for a in node.attribute:
        if a.name == "to":
            return a.i in _FLOAT_ELEMS
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return a.t.data_type in _FLOAT_ELEMS
        if a.name in ("value_float", "value_floats"):
            return True
    return node.op_type == "ConstantOfShape"  # its default value is a float32 zero


def _depth(g: _Graph, i: int, cone: set[int], memo: dict[int, int]) -> int:
    """The length of the longest chain of ``cone`` nodes above ``i`` (to visit producers first)."""
    stack = [i]
    while stack:
        j = stack[-1]
        if j in memo:
            stack.pop()
            continue
        parents = [g.producer[x] for x in g.graph.node[j].input if x in g.producer and g.producer[x] in cone]
        todo = [p for p in parents if p not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[j] = 1 + max((memo[p] for p in parents), default=0)
        stack.pop()
    return memo[i]


def _cone(g: _Graph, float_inputs: set[str], start: int) -> set[int] | None:
    """``start`` and the nodes it is computed from (a Shape or Size reads only its input's shape: not above it);
    None when they read a float input or a weight matrix (then they compute on activations)."""
    seen, todo = set(), [start]
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        node = g.graph.node[i]
        if node.op_type in ("Shape", "Size") and normalize_domain(node.domain) == "":
            continue
        for name in node.input:
            if name in float_inputs:
                return None
            t = g.inits.get(name)
            if t is not None and t.data_type in _FLOAT_ELEMS and sum(d > 1 for d in t.dims) >= 2:
                return None  # a matrix: weights (a table of frequencies is a vector)
            if name in g.producer:
                todo.append(g.producer[name])
    return seen
