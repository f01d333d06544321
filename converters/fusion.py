"""Load-time fusion: exact chains of exported ONNX nodes rewritten into single fused nodes.

Exporters spell GELU and attention as chains of element-wise nodes, each one memory pass; the
backends have one kernel for each (``B.gelu``, ``B.sdpa``). ``fuse`` finds these chains:

- GELU, erf form (torch's and optimum's): ``Div(x, sqrt 2)`` or ``Mul(x, 1/sqrt 2)`` -> ``Erf`` ->
  ``Add(1)`` -> ``Mul(x)`` -> ``Mul(0.5)`` (or ``Mul(Mul(x, 0.5), .)``), operands in either order,
  constants equal to the named values in their own dtype -> ``com.microsoft::Gelu``.
- GELU, tanh form (GPT-2's ``gelu_new``; SigLIP's and Gemma's ``gelu(approximate="tanh")``): ``Pow(x, 3)`` or
  ``x * x * x`` -> ``Mul(0.044715)`` -> ``Add(x)`` -> ``Mul(sqrt(2 / pi))`` -> ``Tanh`` -> the erf form's end ->
  ``com.microsoft::FastGelu``, which runs ``B.gelu(x, "tanh")`` (torch's ``gelu(approximate="tanh")``: one pass
  for eight).
- Attention: ``MatMul(Q, K^T)`` (each operand optionally ``Mul``/``Div`` by a host scalar, K^T
  optionally a ``Transpose``) -> optional ``Mul``/``Div`` of the scores by a host scalar ->
  optional ``Add(mask)`` -> optional ``Cast`` (T5's ``softmax(scores.float())``) -> ``Softmax(axis=-1)`` ->
  optional ``Where(IsNaN(p), 0, p)`` -> optional ``Cast`` (``attn_weights.to(value.dtype)``) -> ``MatMul(., V)``
  -> ``ai.transmuter::ScaledDotProductAttention`` (``converters/ops/fused.py``). Operands may be of rank 3, heads
  folded into the batch, with the mask added between ``Reshape`` to (b, h, L, S) and back (transformers' bmm
  attention: BART, Whisper, CLIP and DETR before SDPA, so the Xenova exports of those years). The node runs
  ``B.sdpa`` when the run-time shapes make it the same computation and the chain otherwise. K and V
  may each come through transformers' ``repeat_kv`` (``Unsqueeze(axis 2)`` -> ``Expand`` -> ``Reshape``, the
  grouped heads of Llama, Qwen, SmolLM copied out to one per query head): the fused node reads the
  grouped heads and ``B.sdpa`` attends to them in place (torch's ``enable_gqa``), without the copies.
- Linear layers: ``MatMul(x, W)`` -> ``Add(b)`` with a 2-D weight and a 1-D bias of its width, both
  initializers -> ``ai.transmuter::MatMulAdd``, which runs ``B.linear`` (torch's ``addmm``: the bias
  rides in the GEMM, and on the CPU one fewer hand-over between BLAS and torch's element-wise threads).
  A GELU that alone reads the sum (a chain above, ONNX's ``Gelu``, onnxruntime's ``Gelu`` or bias-less
  ``FastGelu``) joins it as the node's ``gelu`` attribute: on torch's CPU oneDNN's post-op, in the GEMM's
  own pass over its output (every BERT, ViT, CLIP and Whisper MLP's up-projection).
- RMSNorm (Llama, Qwen, SmolLM as optimum exports them): ``Pow(x, 2)`` -> ``ReduceMean(-1, keepdims)`` ->
  ``Add(eps)`` -> ``Sqrt`` -> ``Div(1, .)`` -> ``Mul(x)`` -> optional ``Cast`` -> ``Mul(weight)`` with a 1-D
  initializer weight -> ``ai.transmuter::RMSNorm``, which runs ``B.rms_norm`` (``mx.fast.rms_norm``,
  torch's ``rms_norm``: one op for eight, in every layer twice; it scales by ``rsqrt`` as transformers does).
- Rotary embedding, rotate-half form (Llama, Qwen, Mistral, SmolLM as optimum exports them): ``Add(Mul(x, cos),
  Mul(Concat(Neg(Slice(x)), Slice(x), axis=-1), sin))`` -> ``ai.transmuter::RotateHalfEmbedding``, which runs
  ``B.rotate_half_embedding`` when the slices are the two halves of the last axis (their bounds are often
  computed from shapes, so this is checked at run time) and the chain otherwise: two ops for seven, for the
  query and the key of every layer.
- Integer linear layers (onnxruntime's ``quantize_dynamic``, transformers.js's q8 files): ``MatMulInteger(x, W)`` by a
  2-D initializer weight -> ``ai.transmuter::IntegerLinear``, the same exact int32 product with the weight prepared
  once instead of at every call (for the backend's int8 GEMM, or as float32 row ranges); with the ``Cast`` to
  float32 after it, one op for two.
- GroupNorm (wav2vec2's and HuBERT's feature encoders, as torch exports ``nn.GroupNorm``): ``Reshape(x, [0, G,
  -1])`` -> ``InstanceNormalization`` with scale 1 and bias 0 -> ``Reshape(., Shape(x))`` -> ``Mul(weight)`` ->
  optional ``Add(bias)``, weight and bias initializers -> ``ai.transmuter::GroupNorm``, which runs ``B.group_norm``
  where they are per channel (on torch the layer norm of each group, then the channels' multiply-add in place:
  three passes and one new buffer where the chain took five and five; wav2vec2-base's first layer, 512 channels x
  32,000 frames: 96 -> 33 ms).
- Convolutions (ResNet's, DETR's, MobileNet's): optional ``Pad`` -> ``Conv`` -> optional ``Mul(scale)`` -> optional
  ``Add(shift)`` (a frozen batch norm: per-channel initializers, folded into a new weight and bias here) -> optional
  ``Add(z)`` (a residual computed before the convolution) -> optional ``Relu`` or ``Clip`` by constants ->
  ``ai.transmuter::FusedConv``, which runs ``B.fused_conv`` (on torch's CPU one oneDNN call with the bias, residual
  and ReLU as post-ops: DETR-ResNet-50 2.05 -> 1.28 s) and the ops one after the other elsewhere; a ``Pad`` of
  zeros on the spatial axes joins the convolution's padding.
- SiLU (Llama-style MLPs): ``Mul(x, Sigmoid(x))`` -> ``ai.transmuter::Silu``, which runs ``B.silu`` (torch's
  ``silu``: one pass for two, and torch's CPU sigmoid alone is slower than its silu).

A chain is rewritten only when each value inside it is read by the next node of the chain and
nothing else (no other node, subgraph or graph output). The fused node's name lists the names of
the nodes it replaces, so errors still name them.

    >>> import collections, onnx
    >>> from transmuter_mlx.hub import open_repo
    >>> proto = onnx.load(open_repo("Xenova/all-MiniLM-L6-v2").onnx_path())
    >>> proto, opsets = fuse(proto, {"": 18})
    >>> ops = collections.Counter(n.op_type for n in proto.graph.node)
    >>> ops["ScaledDotProductAttention"], ops["Gelu"]      # one attention a layer; the GELUs joined their linear
    (6, 0)
    >>> ops["MatMulAdd"]                                   # Q, K, V, output and two MLP projections each
    36
    >>> sum(a.s == b"none" for n in proto.graph.node for a in n.attribute if a.name == "gelu")
    6
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .graph import _node_reads
from .ops.fused import FUSED_DOMAIN, _varies_by_channel
from .ops.registry import MS_DOMAIN, normalize_domain

_SHAPE_OPS = ("Shape", "Size")


@dataclass
class _Match:
    removed: list[int]  # indices of the nodes the fused node replaces, the last one last
    node: onnx.NodeProto
    initializers: tuple[tuple[str, np.ndarray], ...] = ()  # new initializers the fused node reads (a folded weight)
    replaced: tuple[str, ...] = ()  # initializers it no longer reads: dropped where nothing else does


class _Index:
    """Who produces and who reads each value of a graph, and its small constants."""

    def __init__(self, graph: onnx.GraphProto, opsets: dict[str, int], parent: _Index | None = None,
                 weights: dict[str, np.ndarray] | None = None):
        self.opsets = opsets
        self.weights = weights or {}  # initializers read apart from the proto, whose tensors are empty
        self.parent = parent  # the enclosing graph's index, for the outer-scope names a subgraph reads
        self.nodes = list(graph.node)
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        self.readers: dict[str, list[int]] = collections.defaultdict(list)
        for i, n in enumerate(self.nodes):
            for name in _node_reads(n):
                self.readers[name].append(i)
        self.pinned = {o.name for o in graph.output}
        feeds = {i.name for i in graph.input}  # an initializer that is also an input may be fed
        self.initializers = {t.name: t for t in graph.initializer if t.name not in feeds}
        self.feeds = feeds - set(self.initializers)
        self._host: dict[str, bool] = {}

    def node(self, name: str, *op_types: str) -> tuple[int, onnx.NodeProto] | tuple[None, None]:
        """The default-domain node of one of ``op_types`` that produces ``name``."""
        i = self.producer.get(name)
        if i is None:
            return None, None
        n = self.nodes[i]
        return (i, n) if n.op_type in op_types and normalize_domain(n.domain) == "" else (None, None)

    def only_reader(self, name: str) -> int | None:
        """The one node that reads ``name`` (once), when nothing else does."""
        readers = self.readers.get(name, [])
        return readers[0] if len(readers) == 1 and name not in self.pinned else None

    def exclusive(self, name: str, reader: int) -> bool:
        return self.only_reader(name) == reader

    def only_data_reader(self, name: str) -> int | None:
        """The one node that reads the values of ``name`` (once), when every other reader reads only its shape."""
        readers = [r for r in self.readers.get(name, []) if not self._shape_reader(r)]
        return readers[0] if len(readers) == 1 and name not in self.pinned else None

    def _shape_reader(self, i: int) -> bool:
        return self.nodes[i].op_type in _SHAPE_OPS and normalize_domain(self.nodes[i].domain) == ""

    def const(self, name: str) -> np.ndarray | None:
        """The value of an initializer or ``Constant`` output with exactly one element."""
        value = self.small_array(name, limit=1)
        return value if value is not None and value.size == 1 else None

    def small_array(self, name: str, limit: int = 4096) -> np.ndarray | None:
        """The value of an initializer (stored in the file) or ``Constant`` output with at most ``limit`` elements."""
        if self._outer(name):
            return self.parent.small_array(name, limit)
        t = self.initializers.get(name)
        if t is None:
            _, n = self.node(name, "Constant")
            attribute = n.attribute[0] if n is not None and len(n.attribute) == 1 else None
            if attribute is not None and attribute.name == "value_float":
                return np.array(attribute.f, np.float32)
            t = attribute.t if attribute is not None and attribute.name == "value" else None
        if t is None or t.data_location == onnx.TensorProto.EXTERNAL or math.prod(t.dims) > limit:
            return None
        return numpy_helper.to_array(t)

    def initializer(self, name: str) -> onnx.TensorProto | None:
        """The initializer ``name`` is, directly or through ``Identity`` nodes (optimum shares equal
        weights that way)."""
        for _ in range(8):
            if self._outer(name):
                return self.parent.initializer(name)
            if name in self.initializers:
                return self.initializers[name]
            _, n = self.node(name, "Identity")
            if n is None:
                return None
            name = n.input[0]
        return None

    def is_const(self, name: str, value: float) -> bool:
        """Whether ``name`` is a one-element float constant equal to ``value`` rounded to its dtype."""
        c = self.const(name)
        return (
            c is not None
            and c.dtype.kind == "f"
            and c.ndim <= 1
            and c.reshape(-1)[0] == np.asarray(value, c.dtype)
        )

    def host_computable(self, name: str) -> bool:
        """Whether ``name`` depends on the inputs only through their shapes (the planner folds it)."""
        todo, seen = [name], set()
        while todo:
            n = todo.pop()
            if n in seen or not n or n in self.initializers:
                continue
            seen.add(n)
            if self._host.get(n):
                continue
            if n in self.feeds or self._host.get(n) is False:
                self._host[name] = False
                return False
            if self._outer(n) and not self.parent.host_computable(n):
                self._host[name] = False
                return False
            i = self.producer.get(n)
            if i is None:
                continue  # an outer-scope name: left to the planner
            node = self.nodes[i]
            if node.op_type in _SHAPE_OPS and normalize_domain(node.domain) == "":
                continue
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                self._host[name] = False
                return False
            todo.extend(node.input)
        self._host[name] = True
        return True

    def _outer(self, name: str) -> bool:
        """Whether ``name`` is a value of an enclosing graph (a subgraph's capture)."""
        return (self.parent is not None and name not in self.producer and name not in self.initializers
                and name not in self.feeds)

    def factor(self, name: str) -> bool:
        """A scale factor: a one-element constant, or a value computed from shapes."""
        return self.const(name) is not None or (name not in self.initializers and self.host_computable(name))


def _names(ix: _Index, removed: list[int]) -> str:
    return " + ".join(ix.nodes[i].name or ix.nodes[i].op_type for i in removed)


def _other(node: onnx.NodeProto, name: str) -> str | None:
    """The other input of a two-input node that reads ``name`` once."""
    ins = list(node.input)
    return ins[1 - ins.index(name)] if len(ins) == 2 and ins.count(name) == 1 else None


def _match_gelu(ix: _Index, i: int) -> _Match | None:
    erf = ix.nodes[i]
    di, d = ix.node(erf.input[0], "Div", "Mul")
    if d is None or not ix.exclusive(erf.input[0], i) or len(d.input) != 2:
        return None
    if d.op_type == "Div":
        x = d.input[0] if ix.is_const(d.input[1], math.sqrt(2)) else None
    else:
        x = _times(ix, d, 1 / math.sqrt(2))
    outer = _gelu_outer(ix, erf.output[0], x) if x is not None else None
    if outer is None:
        return None
    removed = [di, i, *outer]
    if any(normalize_domain(ix.nodes[j].domain) != "" for j in removed):
        return None
    return _Match(removed, helper.make_node("Gelu", [x], [ix.nodes[removed[-1]].output[0]], _names(ix, removed),
                                            domain=MS_DOMAIN))


def _match_gelu_tanh(ix: _Index, i: int) -> _Match | None:
    """GELU's tanh approximation (GPT-2's ``gelu_new``, torch's ``gelu(approximate="tanh")`` of SigLIP and Gemma):
    ``Tanh(Mul(sqrt(2 / pi), Add(x, Mul(0.044715, x^3))))`` with x^3 a ``Pow(x, 3)`` or ``x * x * x``, then GELU's
    end as the erf form has it -> ``com.microsoft::FastGelu``."""
    tanh = ix.nodes[i]
    mi, m = ix.node(tanh.input[0], "Mul")
    inner = _times(ix, m, math.sqrt(2 / math.pi)) if m is not None and ix.exclusive(tanh.input[0], i) else None
    ai, add = ix.node(inner, "Add") if inner is not None else (None, None)
    if add is None or not ix.exclusive(inner, mi) or len(add.input) != 2:
        return None
    for x, cubic in (add.input, reversed(add.input)):
        ki, k = ix.node(cubic, "Mul")
        cube = _times(ix, k, 0.044715) if k is not None and ix.exclusive(cubic, ai) else None
        powers = _cube_nodes(ix, cube, ki, x) if cube is not None else None
        if powers is not None:
            break
    else:
        return None
    outer = _gelu_outer(ix, tanh.output[0], x)
    if outer is None:
        return None
    removed = [*powers, ki, ai, mi, i, *outer]
    if any(normalize_domain(ix.nodes[j].domain) != "" for j in removed):
        return None
    return _Match(removed, helper.make_node("FastGelu", [x], [ix.nodes[removed[-1]].output[0]], _names(ix, removed),
                                            domain=MS_DOMAIN))


def _times(ix: _Index, mul: onnx.NodeProto, value: float) -> str | None:
    """The other operand of a two-input ``Mul`` one of whose operands is a float constant equal to ``value`` (to
    float32's precision: exporters round the same number from different formulas)."""
    for j in (0, 1):
        c = ix.const(mul.input[j]) if len(mul.input) == 2 else None
        if c is not None and c.dtype.kind == "f" and np.isclose(float(c.reshape(-1)[0]), value, rtol=2e-7, atol=0):
            return mul.input[1 - j]
    return None


def _cube_nodes(ix: _Index, name: str, reader: int, x: str) -> list[int] | None:
    """The nodes that make ``name`` the cube of ``x`` (``Pow(x, 3)``, ``Mul(x, Mul(x, x))`` or ``Mul(Mul(x, x), x)``),
    each read only by the next, ``reader`` last; or None."""
    i, n = ix.node(name, "Pow", "Mul")
    if n is None or not ix.exclusive(name, reader) or len(n.input) != 2:
        return None
    if n.op_type == "Pow":
        exponent = ix.const(n.input[1])
        return [i] if n.input[0] == x and exponent is not None and float(exponent.reshape(-1)[0]) == 3.0 else None
    square = _other(n, x)
    j, sq = ix.node(square, "Mul") if square is not None else (None, None)
    if sq is None or list(sq.input) != [x, x] or not ix.exclusive(square, i):
        return None
    return [j, i]


def _gelu_outer(ix: _Index, t: str, x: str) -> list[int] | None:
    """GELU's end after ``t`` (erf's or tanh's output), as exporters write ``x / 2 * (1 + t)``: ``Add(1)`` ->
    ``Mul(x)`` -> ``Mul(0.5)``, or ``Add(1)`` -> ``Mul(Mul(x, 0.5), .)``; operands in either order. Its nodes, the one
    that writes the result last; or None."""
    ai = ix.only_reader(t)
    add = ix.nodes[ai] if ai is not None else None
    if add is None or add.op_type != "Add" or not ix.is_const(_other(add, t) or "", 1.0):
        return None
    mi = ix.only_reader(add.output[0])
    m = ix.nodes[mi] if mi is not None else None
    other = _other(m, add.output[0]) if m is not None and m.op_type == "Mul" else None
    if other is None:
        return None
    if other == x:  # (x * (1 + t)) * 0.5
        li = ix.only_reader(m.output[0])
        last = ix.nodes[li] if li is not None else None
        if last is None or last.op_type != "Mul" or not ix.is_const(_other(last, m.output[0]) or "", 0.5):
            return None
        return [ai, mi, li]
    hi, h = ix.node(other, "Mul")  # (x * 0.5) * (1 + t)
    if h is None or not ix.exclusive(other, mi) or _other(h, x) is None or not ix.is_const(_other(h, x), 0.5):
        return None
    return [ai, hi, mi]


def _scaled_operand(ix: _Index, name: str, reader: int) -> tuple[str, str, int, list[int]]:
    """``name`` as (base, factor, divide, nodes): a Mul/Div of ``base`` by a scale factor read only
    by ``reader``, or ``name`` itself with no factor."""
    i, n = ix.node(name, "Mul", "Div")
    if n is None or not ix.exclusive(name, reader) or len(n.input) != 2:
        return name, "", 0, []
    a, b = n.input
    if n.op_type == "Div":
        ok = ix.factor(b) and not ix.factor(a)
        return (a, b, 1, [i]) if ok else (name, "", 0, [])
    for base, f in ((a, b), (b, a)):
        if ix.factor(f) and not ix.factor(base):
            return base, f, 0, [i]
    return name, "", 0, []


def _nan_guard(ix: _Index, probs: str) -> tuple[str, list[int]]:
    """``Where(IsNaN(p), 0, p)`` after the softmax (optimum's decoders zero fully masked rows so): its
    output and nodes, or ``probs`` itself and none."""
    readers = ix.readers.get(probs, [])
    if len(readers) != 2 or probs in ix.pinned:
        return probs, []
    nodes = {ix.nodes[j].op_type: j for j in readers}
    ni, wi = nodes.get("IsNaN"), nodes.get("Where")
    if ni is None or wi is None or ix.only_reader(ix.nodes[ni].output[0]) != wi:
        return probs, []
    where = ix.nodes[wi]
    if list(where.input[::2]) != [ix.nodes[ni].output[0], probs] or not ix.is_const(where.input[1], 0.0):
        return probs, []
    if any(normalize_domain(ix.nodes[j].domain) != "" for j in (ni, wi)):
        return probs, []
    return where.output[0], [ni, wi]


def _cast_after(ix: _Index, probs: str) -> tuple[str, int, list[int]]:
    """A ``Cast`` that is the probabilities' one reader (``attn_weights.to(value.dtype)``): its output, its ``to``
    and its node; or ``probs`` itself, 0 and none."""
    ci = ix.only_reader(probs)
    cast = ix.nodes[ci] if ci is not None else None
    if cast is None or cast.op_type != "Cast" or normalize_domain(cast.domain) != "":
        return probs, 0, []
    return cast.output[0], _attr(cast, "to"), [ci]


def _mask_between_reshapes(ix: _Index, scores: str, reader: int) -> tuple[str, int, str, str, str, list[int]] | None:
    """Scores of rank 3 (batch x heads, L, S) viewed as 4-D for the mask and back: ``Reshape(Add(Reshape(s,
    heads_shape), mask), rows_shape)``, both shapes computed on the host, as transformers' bmm attention (BART,
    Whisper, CLIP and DETR before SDPA; the Xenova exports of those years) writes it. Its (scores, reader, mask,
    heads_shape, rows_shape, nodes), or None."""
    ri, rows = ix.node(scores, "Reshape")
    if rows is None or len(rows.input) != 2 or _attr(rows, "allowzero", 0) or not ix.exclusive(scores, reader):
        return None
    ai, add = ix.node(rows.input[0], "Add")
    if add is None or not ix.exclusive(rows.input[0], ri) or not ix.host_computable(rows.input[1]):
        return None
    for j in (0, 1):
        hi, heads = ix.node(add.input[j], "Reshape")
        if heads is None or len(heads.input) != 2 or _attr(heads, "allowzero", 0):
            continue
        if not ix.exclusive(add.input[j], ai) or not ix.host_computable(heads.input[1]):
            continue
        base, _, _, nodes = _scaled_operand(ix, heads.input[0], hi)
        if ix.node(base, "MatMul")[1] is not None and (nodes or ix.exclusive(base, hi)):
            return heads.input[0], hi, add.input[1 - j], heads.input[1], rows.input[1], [ri, ai, hi]
    return None


def _repeated_heads(ix: _Index, name: str, reader: int) -> tuple[str, list[str], list[int]]:
    """``name`` as (kv, [expand shape, reshape shape], nodes): transformers' ``repeat_kv`` of grouped key or value
    heads (``Unsqueeze`` at axis 2 -> ``Expand`` -> ``Reshape``) whose values only ``reader`` reads, or ``name``
    itself and no repeat. The nodes are removed only when nothing reads their outputs at all; a shape reader
    keeps them in the graph (the replay skips a device node that is read only through its shape)."""
    none: tuple[str, list[str], list[int]] = (name, ["", ""], [])
    ri, reshape = ix.node(name, "Reshape")
    if reshape is None or len(reshape.input) != 2 or _attr(reshape, "allowzero", 0) or ix.only_data_reader(name) != reader:
        return none
    ei, expand = ix.node(reshape.input[0], "Expand")
    if expand is None or ix.only_data_reader(reshape.input[0]) != ri:
        return none
    ui, unsqueeze = ix.node(expand.input[0], "Unsqueeze")
    if unsqueeze is None or ix.only_data_reader(expand.input[0]) != ei:
        return none
    if _axes(ix, unsqueeze) not in ([2], [-3]):
        return none
    chain = [ui, ei, ri]
    alone = all(ix.exclusive(ix.nodes[j].output[0], k) for j, k in zip(chain, [ei, ri, reader]))
    return unsqueeze.input[0], [expand.input[1], reshape.input[1]], chain if alone else []


def _match_attention(ix: _Index, i: int) -> _Match | None:
    softmax = ix.nodes[i]
    axis = next((a.i for a in softmax.attribute if a.name == "axis"), -1 if ix.opsets.get("", 1) >= 13 else 1)
    probs, guard = _nan_guard(ix, softmax.output[0])
    probs, probs_cast, cast_after = _cast_after(ix, probs)
    oi = ix.only_reader(probs)
    out = ix.nodes[oi] if oi is not None else None
    if axis != -1 or out is None or out.op_type != "MatMul" or list(out.input).index(probs) != 0:
        return None
    scores, reader, mask, removed = softmax.input[0], i, "", [i, oi, *guard, *cast_after]
    ci, cast = ix.node(scores, "Cast")
    scores_cast = 0
    if cast is not None and ix.exclusive(scores, i):  # T5's softmax(scores.float())
        scores, reader, scores_cast = cast.input[0], ci, _attr(cast, "to")
        removed.append(ci)
    folded, heads = _mask_between_reshapes(ix, scores, reader), []
    if folded is not None:  # heads folded into the batch, unfolded for the mask: transformers' older bmm attention
        scores, reader, mask, heads_shape, rows_shape, nodes = folded
        heads, removed = [heads_shape, rows_shape], removed + nodes
    ai, add = ix.node(scores, "Add")
    if folded is None and add is not None and ix.exclusive(scores, reader):
        for j in (0, 1):  # the mask is the operand that is not the scores chain
            base, _, _, nodes = _scaled_operand(ix, add.input[j], ai)
            if ix.node(base, "MatMul")[1] is not None and (nodes or ix.exclusive(base, ai)):
                scores, reader, mask = add.input[j], ai, add.input[1 - j]
                removed.append(ai)
                break
        else:
            return None
    base, score_factor, score_div, nodes = _scaled_operand(ix, scores, reader)
    mi, mm = ix.node(base, "MatMul")
    if mm is None or not ix.exclusive(base, nodes[0] if nodes else reader) or len(set(mm.input)) != 2:
        return None
    removed += nodes + [mi]
    query, query_factor, query_div, nodes = _scaled_operand(ix, mm.input[0], mi)
    removed += nodes
    kt, key_factor, key_div, nodes = _scaled_operand(ix, mm.input[1], mi)
    removed += nodes
    key, key_perm = kt, []
    ti, transpose = ix.node(kt, "Transpose")
    perm = next((list(a.ints) for a in transpose.attribute if a.name == "perm"), []) if transpose else []
    key_reader = nodes[0] if nodes else mi
    if len(perm) in (3, 4) and ix.exclusive(kt, key_reader):
        key, key_perm, key_reader = transpose.input[0], perm, ti
        removed.append(ti)
    key, key_repeat, nodes = _repeated_heads(ix, key, key_reader)
    removed += nodes
    value, value_repeat, nodes = _repeated_heads(ix, out.input[1], oi)
    removed += nodes
    if any(normalize_domain(ix.nodes[j].domain) != "" for j in removed):
        return None
    inputs = [query, key, value, mask, query_factor, key_factor, score_factor]
    if any(key_repeat + value_repeat) or heads:
        inputs += key_repeat + value_repeat + heads
    attrs = {"divide": [query_div, key_div, score_div]} | ({"key_perm": key_perm} if key_perm else {})
    attrs |= {"nan_to_zero": 1} if guard else {}
    attrs |= {"scores_cast": scores_cast} if scores_cast else {}
    attrs |= {"probs_cast": probs_cast} if probs_cast else {}
    removed = sorted(removed)
    name = _names(ix, removed)
    node = helper.make_node(
        "ScaledDotProductAttention", inputs, [out.output[0]], name, domain=FUSED_DOMAIN, **attrs
    )
    return _Match(removed, node)


def _match_linear(ix: _Index, i: int) -> _Match | None:
    matmul = ix.nodes[i]
    weight = ix.initializer(matmul.input[1]) if len(matmul.input) == 2 else None
    ai = ix.only_reader(matmul.output[0])
    if weight is None or len(weight.dims) != 2 or ai is None or ix.nodes[ai].op_type != "Add":
        return None
    add, bias_name = ix.nodes[ai], _other(ix.nodes[ai], matmul.output[0]) or ""
    bias = ix.initializer(bias_name)
    if bias is None or list(bias.dims) != [weight.dims[1]] or bias.data_type != weight.data_type:
        return None
    if normalize_domain(add.domain) != "":
        return None
    inputs = [matmul.input[0], matmul.input[1], bias_name]
    gelu = _gelu_after(ix, add.output[0])
    if gelu is None:
        return _Match([i, ai], helper.make_node("MatMulAdd", inputs, [add.output[0]], _names(ix, [i, ai]),
                                                domain=FUSED_DOMAIN))
    approximate, nodes = gelu
    removed = [i, ai, *nodes]
    return _Match(removed, helper.make_node("MatMulAdd", inputs, [ix.nodes[nodes[-1]].output[0]], _names(ix, removed),
                                            domain=FUSED_DOMAIN, gelu=approximate))


_GELU_NODES = {("Gelu", ""): None, ("Gelu", MS_DOMAIN): "none", ("FastGelu", MS_DOMAIN): "tanh"}


def _gelu_after(ix: _Index, y: str) -> tuple[str, list[int]] | None:
    """The GELU of ``y`` where nothing else reads ``y``: a ``Gelu`` node (ONNX's, onnxruntime's), a ``FastGelu`` with
    no bias, or a chain that ``_match_gelu`` or ``_match_gelu_tanh`` fuses; its approximation ("none" or "tanh") and
    its nodes, the one that writes the result last. A linear layer's GELU then runs in the GEMM's own pass over its
    output (oneDNN's post-op on torch: BGE-base's up-projection at 4,096 rows 121 -> 109 ms)."""
    readers = set(ix.readers.get(y, []))
    if not readers or y in ix.pinned:
        return None
    if len(readers) == 1:
        r = next(iter(readers))
        node = ix.nodes[r]
        key = (node.op_type, normalize_domain(node.domain))
        if key in _GELU_NODES and (key[0] != "FastGelu" or not any(node.input[1:])):
            approximate = _GELU_NODES[key] or _attr(node, "approximate", b"none")
            approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
            return (approximate, [r]) if approximate in ("none", "tanh") else None
    chains = {"Erf": (_match_gelu, "none"), "Tanh": (_match_gelu_tanh, "tanh")}
    seen, frontier = set(readers), list(readers)
    for _ in range(5):  # the Erf is two nodes from y, the Tanh five
        after = [r for j in frontier for o in ix.nodes[j].output for r in ix.readers.get(o, []) if r not in seen]
        for j in after:
            node = ix.nodes[j]
            if node.op_type in chains and normalize_domain(node.domain) == "":
                match, approximate = chains[node.op_type]
                m = match(ix, j)
                if m is not None and m.node.input[0] == y and readers <= set(m.removed):
                    return approximate, m.removed
        seen.update(after)
        frontier = after
    return None


def _match_integer_linear(ix: _Index, i: int) -> _Match | None:
    """``MatMulInteger(x, W)`` by a 2-D initializer weight (and an initializer zero point, or none), and the ``Cast``
    to float32 that ``quantize_dynamic`` puts after it where that is the product's only reader."""
    node = ix.nodes[i]
    weight = ix.initializer(node.input[1])
    w_zero_point = node.input[3] if len(node.input) > 3 and node.input[3] else ""
    if weight is None or len(weight.dims) != 2 or (w_zero_point and ix.initializer(w_zero_point) is None):
        return None
    ci = ix.only_reader(node.output[0])
    cast = None if ci is None else ix.nodes[ci]
    if cast is not None and cast.op_type == "Cast" and normalize_domain(cast.domain) == "" \
            and _attr(cast, "to") == onnx.TensorProto.FLOAT:
        return _Match([i, ci], helper.make_node("IntegerLinear", list(node.input), [cast.output[0]], _names(ix, [i, ci]),
                                                domain=FUSED_DOMAIN, to=onnx.TensorProto.FLOAT))
    return _Match([i], helper.make_node("IntegerLinear", list(node.input), list(node.output), node.name,
                                        domain=FUSED_DOMAIN))


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _axes(ix: _Index, node: onnx.NodeProto) -> list[int]:
    """A node's one-element ``axes``: the attribute, or the constant second input of newer opsets (Unsqueeze 13,
    ReduceMean 18); [] when neither is known."""
    axes = _attr(node, "axes")
    if axes is None and len(node.input) > 1:
        c = ix.const(node.input[1])
        axes = None if c is None else c.reshape(-1).tolist()
    return list(axes or [])


def _match_rms_norm(ix: _Index, i: int) -> _Match | None:
    mean = ix.nodes[i]
    if _axes(ix, mean) != [-1] or _attr(mean, "keepdims", 1) != 1:
        return None
    pi, pow_ = ix.node(mean.input[0], "Pow")
    if pow_ is None or not ix.exclusive(mean.input[0], i) or not ix.is_const(pow_.input[1], 2.0):
        return None
    x, chain, value = pow_.input[0], [pi, i], mean.output[0]

    def next_node(op_type: str) -> onnx.NodeProto | None:
        j = ix.only_reader(value)
        node = ix.nodes[j] if j is not None else None
        if node is None or node.op_type != op_type or normalize_domain(node.domain) != "":
            return None
        chain.append(j)
        return node

    add = next_node("Add")
    eps = ix.const(_other(add, value) or "") if add is not None else None
    if eps is None or eps.dtype.kind != "f":
        return None
    value = add.output[0]
    sqrt = next_node("Sqrt")
    if sqrt is None:
        return None
    value = sqrt.output[0]
    inverse = next_node("Div")
    if inverse is None or list(inverse.input)[1:] != [value] or not ix.is_const(inverse.input[0], 1.0):
        return None
    value = inverse.output[0]
    scaled = next_node("Mul")
    if scaled is None or _other(scaled, value) != x:
        return None
    value, cast_to = scaled.output[0], 0
    j = ix.only_reader(value)
    if j is not None and ix.nodes[j].op_type == "Cast" and normalize_domain(ix.nodes[j].domain) == "":
        cast_to = int(_attr(ix.nodes[j], "to"))
        chain.append(j)
        value = ix.nodes[j].output[0]
    weighted = next_node("Mul")
    weight = ix.initializer(_other(weighted, value) or "") if weighted is not None else None
    if weight is None or len(weight.dims) != 1:
        return None
    inputs = [x, _other(weighted, value)]
    node = helper.make_node("RMSNorm", inputs, [weighted.output[0]], _names(ix, chain), domain=FUSED_DOMAIN,
                            epsilon=float(eps.reshape(-1)[0]), cast_to=cast_to)
    return _Match(sorted(chain), node)


def _match_group_norm(ix: _Index, i: int) -> _Match | None:
    """torch's GroupNorm as exported: ``Reshape(x, [0, G, -1])`` -> ``InstanceNormalization`` (scale 1, bias 0) ->
    ``Reshape(., Shape(x))`` -> ``Mul(weight)`` -> optional ``Add(bias)``, weight and bias initializers."""
    norm = ix.nodes[i]
    ri, reshape = ix.node(norm.input[0], "Reshape")
    groups = ix.small_array(reshape.input[1]) if reshape is not None and ix.exclusive(norm.input[0], i) else None
    if (groups is None or groups.shape != (3,) or groups.tolist() != [0, int(groups[1]), -1] or groups[1] < 1
            or _attr(reshape, "allowzero", 0)):
        return None
    scale, bias = (ix.small_array(name) for name in norm.input[1:3])
    if scale is None or bias is None or np.any(scale != 1) or np.any(bias != 0):
        return None
    x, chain, value = reshape.input[0], [ri, i], norm.output[0]
    bi = ix.only_reader(value)
    back = ix.nodes[bi] if bi is not None else None
    si, shape = ix.node(back.input[1], "Shape") if back is not None and back.op_type == "Reshape" else (None, None)
    if shape is None or list(shape.input) != [x] or shape.attribute or not ix.exclusive(back.input[1], bi):
        return None
    chain += [si, bi]
    value = back.output[0]
    mi = ix.only_reader(value)
    mul = ix.nodes[mi] if mi is not None else None
    weight = _other(mul, value) if mul is not None and mul.op_type == "Mul" else None
    if weight is None or ix.initializer(weight) is None:
        return None
    chain.append(mi)
    inputs, value = [x, weight], mul.output[0]
    ai = ix.only_reader(value)
    add = ix.nodes[ai] if ai is not None else None
    offset = _other(add, value) if add is not None and add.op_type == "Add" else None
    if offset is not None and ix.initializer(offset) is not None:
        chain.append(ai)
        inputs, value = [x, weight, offset], add.output[0]
    if any(normalize_domain(ix.nodes[j].domain) != "" for j in chain):
        return None
    node = helper.make_node("GroupNorm", inputs, [value], _names(ix, sorted(chain)), domain=FUSED_DOMAIN,
                            num_groups=int(groups[1]), epsilon=float(_attr(norm, "epsilon", 1e-5)))
    return _Match(sorted(chain), node)


def _local_float32(ix: _Index, name: str) -> np.ndarray | None:
    """The float32 value of an initializer of this graph itself (through ``Identity`` nodes), stored in the file."""
    t = ix.initializer(name)
    if t is None or ix.initializers.get(t.name) is not t or t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    if t.data_type != onnx.TensorProto.FLOAT:
        return None
    return ix.weights[t.name] if t.name in ix.weights else numpy_helper.to_array(t)


def _per_channel(value: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """``value`` as (channels,) where it scales or shifts a rank-``rank`` (N, C, *S) tensor channel by channel
    (a (C, 1, 1) or (1, C, 1, 1) initializer, or one value) without broadcasting it further."""
    if value.ndim > rank or (value.size != 1 and not _varies_by_channel(value.shape, (1, channels, *(1,) * (rank - 2)))):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,))


def _match_conv(ix: _Index, i: int) -> _Match | None:
    """``Conv`` -> optional ``Mul(scale)`` -> optional ``Add(shift)`` (per-channel float32 initializers: a frozen batch
    norm, as DETR's ResNet exports it, folded into the weight and bias here as onnxruntime folds it) -> optional
    ``Add(z)`` (a residual) -> optional ``Relu``, or ``Clip`` by constants (ReLU6) -> ``ai.transmuter::FusedConv``, at
    least one of them, or a ``Pad`` (opset 11 on) before the ``Conv``: its padding joins the convolution's where
    it is zeros on the spatial axes (checked at run time, when its pads are known)."""
    conv, chain, value = ix.nodes[i], [i], ix.nodes[i].output[0]
    w, b = conv.input[1], conv.input[2] if len(conv.input) > 2 else ""
    pi, pad = ix.node(conv.input[0], "Pad")  # TensorFlow's "same" padding, as MobileNet's export spells it
    if pad is None or len(pad.input) < 2 or not ix.exclusive(conv.input[0], i) or ix.opsets.get("", 1) < 11:
        pi, pad = None, None
    weight = _local_float32(ix, w)
    bias = None if weight is None else _local_float32(ix, b) if b else np.zeros(weight.shape[:1], np.float32)

    def next_node(op_type: str) -> tuple[int, str | None]:
        """The only reader of ``value`` if it is an ``op_type`` node (else -1), and its other input."""
        j = ix.only_reader(value)
        n = ix.nodes[j] if j is not None else None
        if n is None or n.op_type != op_type or normalize_domain(n.domain) != "":
            return -1, None
        other = "" if op_type == "Relu" else _other(n, value)
        return (j, other) if other is not None else (-1, None)

    def per_channel(j: int, name: str | None) -> np.ndarray | None:
        found = _local_float32(ix, name) if j >= 0 and bias is not None else None
        return None if found is None else _per_channel(found, weight.shape[0], weight.ndim)

    def take(j: int) -> None:
        nonlocal chain, value
        chain, value = chain + [j], ix.nodes[j].output[0]

    j, other = next_node("Mul")
    scale = per_channel(j, other)
    if scale is not None:
        take(j)
    j, other = next_node("Add")
    shift = per_channel(j, other)
    if shift is not None:
        take(j)
        j, other = next_node("Add")
    # a residual computed after this convolution is left to the convolution that computes it (a ResNet's shortcut
    # comes first: the block's last convolution then takes the sum and the ReLU)
    z = other if j >= 0 and ix.producer.get(other, -1) < i else ""
    if z:
        take(j)
    j, _ = next_node("Relu")
    bounds = (0.0, math.inf) if j >= 0 else _clip_bounds(ix, ix.only_reader(value))
    if bounds is not None:
        take(j if j >= 0 else ix.only_reader(value))
    if len(chain) == 1 and pad is None:
        return None
    inputs, new, replaced = [conv.input[0], w, b], (), ()
    padding: list[str] = []
    if pad is not None:
        chain, inputs[0] = [pi, *chain], pad.input[0]
        padding = (list(pad.input[1:4]) + ["", ""])[:3]
    if scale is not None or shift is not None:
        scale = np.ones_like(bias) if scale is None else scale
        names = [f"{value}/folded_weight", f"{value}/folded_bias"]
        folded = (weight * scale.reshape(-1, *(1,) * (weight.ndim - 1)), bias * scale + (0 if shift is None else shift))
        new = tuple((n, a.astype(np.float32)) for n, a in zip(names, folded))
        inputs[1:3], replaced = names, tuple(n for n in (w, b) if n)
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    if bounds is not None:
        attrs["clip"] = [bounds[0], bounds[1]]
    if pad is not None:
        attrs["pad_mode"] = _attr(pad, "mode", b"constant")
    node = helper.make_node("FusedConv", [*inputs, z, *padding], [value], _names(ix, chain), domain=FUSED_DOMAIN,
                            **attrs)
    return _Match(chain, node, new, replaced)


def _clip_bounds(ix: _Index, j: int | None) -> tuple[float, float] | None:
    """``(min, max)`` of node ``j`` if it is a ``Clip`` by constant bounds (ReLU6: 0, 6), min <= max."""
    node = ix.nodes[j] if j is not None else None
    if node is None or node.op_type != "Clip" or normalize_domain(node.domain) != "":
        return None
    given = (list(node.input[1:3]) + ["", ""])[:2]
    values = [ix.const(n) if n else None for n in given]
    if any(n and v is None for n, v in zip(given, values)):
        return None
    lo = float(_attr(node, "min", -math.inf) if values[0] is None else values[0].reshape(-1)[0])
    hi = float(_attr(node, "max", math.inf) if values[1] is None else values[1].reshape(-1)[0])
    return (lo, hi) if lo <= hi else None


def _match_rotate_half(ix: _Index, i: int) -> _Match | None:
    neg = ix.nodes[i]
    si, second = ix.node(neg.input[0], "Slice")
    ci = ix.only_reader(neg.output[0])
    concat = ix.nodes[ci] if ci is not None else None
    if (second is None or not ix.exclusive(neg.input[0], i) or concat is None or concat.op_type != "Concat"
            or list(concat.input)[:1] != [neg.output[0]] or len(concat.input) != 2 or _attr(concat, "axis") != -1):
        return None
    fi, first = ix.node(concat.input[1], "Slice")
    x = second.input[0]
    if first is None or first.input[0] != x or not ix.exclusive(concat.input[1], ci) or len(first.input) < 3:
        return None
    mi = ix.only_reader(concat.output[0])
    mul_sin = ix.nodes[mi] if mi is not None else None
    sin = _other(mul_sin, concat.output[0]) if mul_sin is not None and mul_sin.op_type == "Mul" else None
    ai = ix.only_reader(mul_sin.output[0]) if sin else None
    add = ix.nodes[ai] if ai is not None else None
    rotated = _other(add, mul_sin.output[0]) if add is not None and add.op_type == "Add" else None
    ki, mul_cos = ix.node(rotated or "", "Mul")
    if mul_cos is None or not ix.exclusive(rotated, ai) or _other(mul_cos, x) is None:
        return None
    chain = sorted([fi, si, i, ci, mi, ai, ki])
    if any(normalize_domain(ix.nodes[j].domain) != "" for j in chain):
        return None
    bounds = [*(list(first.input[1:]) + [""] * 4)[:4], *(list(second.input[1:]) + [""] * 4)[:4]]
    node = helper.make_node("RotateHalfEmbedding", [x, _other(mul_cos, x), sin, *bounds], [add.output[0]],
                            _names(ix, chain), domain=FUSED_DOMAIN)
    return _Match(chain, node)


def _match_silu(ix: _Index, i: int) -> _Match | None:
    """``Mul(x, Sigmoid(x))`` (either order): the SiLU of Llama-style MLPs, one kernel where the backend has one."""
    sigmoid, mi = ix.nodes[i], ix.only_reader(ix.nodes[i].output[0])
    mul = ix.nodes[mi] if mi is not None else None
    if mul is None or mul.op_type != "Mul" or normalize_domain(mul.domain) != "":
        return None
    if _other(mul, sigmoid.output[0]) != sigmoid.input[0]:
        return None
    return _Match([i, mi], helper.make_node("Silu", [sigmoid.input[0]], [mul.output[0]], _names(ix, [i, mi]),
                                            domain=FUSED_DOMAIN))


_PATTERNS = (
    ("Erf", _match_gelu, MS_DOMAIN),
    ("Tanh", _match_gelu_tanh, MS_DOMAIN),
    ("Sigmoid", _match_silu, FUSED_DOMAIN),
    ("Softmax", _match_attention, FUSED_DOMAIN),
    ("MatMul", _match_linear, FUSED_DOMAIN),
    ("MatMulInteger", _match_integer_linear, FUSED_DOMAIN),
    ("ReduceMean", _match_rms_norm, FUSED_DOMAIN),
    ("InstanceNormalization", _match_group_norm, FUSED_DOMAIN),
    ("Neg", _match_rotate_half, FUSED_DOMAIN),
    ("Conv", _match_conv, FUSED_DOMAIN),
)


def _matches(ix: _Index) -> list[_Match]:
    """Every fusable chain of the graph ``ix`` indexes (not of its subgraphs), none overlapping another."""
    matches, used = [], set()
    for i, node in enumerate(ix.nodes):
        for op_type, match, _ in _PATTERNS:
            if node.op_type != op_type or normalize_domain(node.domain) != "":
                continue
            m = match(ix, i)
            if m is not None and not used & set(m.removed):
                matches.append(m)
                used.update(m.removed)
    return matches


def fuse(
    proto: onnx.ModelProto, opsets: dict[str, int], in_place: bool = False,
    weights: dict[str, np.ndarray] | None = None,
) -> tuple[onnx.ModelProto, dict[str, int]]:
    """``proto`` with its fusable chains rewritten, and its opsets with the fused nodes' domains added. Subgraphs
    too: the branches of a merged decoder's If are the decoder itself.

    The caller's proto is never edited: the result is a copy, unless ``in_place`` (a proto the caller
    read for this model), where the nodes are rewritten in place so that the weights are not copied.
    ``weights``: the main graph's initializers read apart from the proto (``model.read_model``); a folded weight
    goes there too, and the weights it replaces leave it.
    """
    plan = _plan(proto.graph, opsets, None, weights)
    if not plan.fuses_any():
        return proto, opsets
    out = proto
    if not in_place:
        out = onnx.ModelProto()
        out.CopyFrom(proto)
    domains = _apply(out.graph, plan, weights)
    opsets = dict(opsets)
    for domain in sorted(domains - set(opsets)):
        opsets[domain] = 1
        out.opset_import.add(domain=domain, version=1)
    return out, opsets


@dataclass
class _Plan:
    """The chains of one graph, and the plans of its subgraphs in ``_subgraphs`` order."""

    matches: list[_Match]
    subgraphs: list[_Plan]

    def fuses_any(self) -> bool:
        return bool(self.matches) or any(p.fuses_any() for p in self.subgraphs)


def _subgraphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    return [g for n in graph.node for a in n.attribute
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))]


def _plan(graph: onnx.GraphProto, opsets: dict[str, int], parent: _Index | None,
          weights: dict[str, np.ndarray] | None = None) -> _Plan:
    """The chains to fuse in ``graph`` and in its subgraphs (whose index looks outer names up in ``graph``'s)."""
    ix = _Index(graph, opsets, parent, weights)
    return _Plan(_matches(ix), [_plan(g, opsets, ix) for g in _subgraphs(graph)])


def _apply(graph: onnx.GraphProto, plan: _Plan, weights: dict[str, np.ndarray] | None = None) -> set[str]:
    """Rewrite the chains of ``plan`` in ``graph`` (the graph it was made from, or a copy) and in its subgraphs, in
    place; the domains of the fused nodes. ``weights``: ``graph``'s initializers read apart (``fuse``)."""
    domains = {m.node.domain for m in plan.matches}
    for g, sub in zip(_subgraphs(graph), plan.subgraphs, strict=True):  # before the node indices move
        domains |= _apply(g, sub)
    if not plan.matches:
        return domains
    replace = {m.removed[-1]: m.node for m in plan.matches}
    removed = {i for m in plan.matches for i in m.removed}
    kept = [i for i in range(len(graph.node)) if i in replace or i not in removed]
    kept = _without_dead_constants(kept, [replace.get(i, graph.node[i]) for i in kept], graph)
    for i, node in replace.items():
        graph.node[i].CopyFrom(node)
    for i in sorted(set(range(len(graph.node))) - set(kept), reverse=True):
        del graph.node[i]
    for name, value in (item for m in plan.matches for item in m.initializers):
        if weights is None:
            graph.initializer.append(numpy_helper.from_array(value, name))
        else:  # apart, as ``read_model`` leaves a weight: name, type and dims in the proto
            weights[name] = value
            graph.initializer.add(name=name, data_type=onnx.TensorProto.FLOAT, dims=value.shape)
    read = {name for n in graph.node for name in _node_reads(n)} | {o.name for o in graph.output}
    unread = {name for m in plan.matches for name in m.replaced} - read
    for j in reversed(range(len(graph.initializer))):  # a weight folded into a new one, where nothing else reads it
        if graph.initializer[j].name in unread:
            (weights or {}).pop(graph.initializer[j].name, None)
            del graph.initializer[j]
    return domains


def _without_dead_constants(kept: list[int], nodes: list[onnx.NodeProto], graph: onnx.GraphProto) -> list[int]:
    """``kept`` (the indices of ``nodes``) without the ``Constant`` nodes that only the replaced nodes read."""
    read = {name for n in nodes for name in _node_reads(n)} | {o.name for o in graph.output}
    return [
        i for i, n in zip(kept, nodes)
        if n.op_type != "Constant" or normalize_domain(n.domain) != "" or n.output[0] in read
    ]
