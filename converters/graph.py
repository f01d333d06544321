"""Plan, fold, run and compile an ONNX graph.

A ``Program`` is a graph whose nodes are resolved to registered ops. Running it is a walk over
its nodes in order; each node runs on the host (numpy) when all of its inputs are host values,
and on the device backend otherwise. That one rule does the constant folding: initializers,
``Constant`` outputs and the shapes read by ``Shape``/``Size`` are host values, so every piece
of shape arithmetic built from them is computed once on the host.

``Executable`` specialises a program to one signature of input shapes: a first walk records
which nodes touched the device and the host values they consumed; the replay of just those
nodes, with the host values baked in, is a straight line of backend ops that ``mx.compile``
traces. When a node needs a device value on the host (a data-dependent shape, ``NonZero``, an
``If`` on a computed condition), the signature runs eagerly instead.
"""

from __future__ import annotations

import collections
import math
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from . import call_scope
from .backends import HOST, Backend
from .bounds import Guard, check_extremes, check_values, clamp, extremes, host_source, host_value
from .errors import ConverterError, DynamicShapeError, OpError, UnsupportedOpError
from .ops import OpSpec, registered_versions, resolve
from .ops.fused import FUSED_DOMAIN
from .ops.registry import DEFAULT_DOMAIN, normalize_domain
from .replay import StraightLine, straight_line
from .values import attribute_value, is_host, sparse_to_numpy, tensor_to_numpy

_VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})  # of initializers: folded to initializers
_CONV_WEIGHT_READS = {(DEFAULT_DOMAIN, "Conv"), (FUSED_DOMAIN, "FusedConv")}
_CONV_WEIGHT_READS_AT = {(domain, op_type, 1) for domain, op_type in _CONV_WEIGHT_READS}  # a convolution's weight


@dataclass(frozen=True)
class Step:
    """One node, resolved: the op spec, its attributes and its value names."""

    name: str
    spec: OpSpec
    attrs: dict[str, Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    subgraphs: dict[str, onnx.GraphProto]
    captures: tuple[str, ...] = ()  # outer-scope names its subgraphs read

    @property
    def label(self) -> str:
        s = self.spec
        return f"{self.name!r} [{s.domain or 'ai.onnx'}::{s.op_type} v{s.since_version}]"


class Program:
    """A graph with every node resolved to an op; subgraphs are resolved on first use."""

    def __init__(self, graph: onnx.GraphProto, opsets: Mapping[str, int], weights: dict[str, np.ndarray] | None = None):
        """``weights``: initializers read apart from the proto (``model.read_model``), whose tensors are empty. They
        are taken out of the dict, so that ``share_weights`` frees each host copy once its device copy is made."""
        self.opsets = dict(opsets)
        self.input_names = [i.name for i in graph.input]
        self.output_names = [o.name for o in graph.output]
        weights = {} if weights is None else weights
        self.initializers = {t.name: weights.pop(t.name) if t.name in weights else tensor_to_numpy(t)
                             for t in graph.initializer}
        for sparse in graph.sparse_initializer:
            self.initializers[sparse.values.name] = sparse_to_numpy(sparse)  # dense copy
        missing = find_missing_ops(graph, self.opsets)
        if missing:
            raise UnsupportedOpError(missing, registered_versions())
        constants: dict[str, onnx.NodeProto] = {}  # Constant nodes, whose values a folded view may read (a shape)
        self.steps = [self._step(i, n) for i, n in enumerate(_topological(graph)) if not self._fold_view(n, constants)]
        self._dead: tuple[list[Step], list[list[str]]] | None = None  # ``dead_after``, made at first use
        self._subprograms: dict[int, Program] = {}
        # device copies of values that depend on no input (weights, folded weights), shared by
        # every signature so that weights exist once on the device
        self.device_constants: dict[tuple[str, str], Any] = {}
        # initializers whose host value is a zero-strided stand-in of their shape: only their device copy holds the
        # values (a backend's own layout of a linear layer's weight, ``B.matmul_weight``)
        self.device_only: set[str] = set()
        self.parent: Program | None = None  # the program of the node whose subgraph this is

    def _fold_view(self, node: onnx.NodeProto, constants: dict[str, onnx.NodeProto]) -> bool:
        """Make a Reshape (Squeeze, Unsqueeze, Flatten) of initializers an initializer, once: a view of the weight.
        Run at each call it was a new array each time, so what an op prepares from a host weight (cached by the
        array) was made again per signature: the genai exports' tied embedding, GatherBlockQuantized of a
        Reshape of the head's int4 weight, 190 MB more per signature at Qwen3-0.6B's shape. ``constants``
        gathers the Constant nodes (kept as steps too) for the shapes such a node reads."""
        domain_ok = normalize_domain(node.domain) == ""
        if domain_ok and node.op_type == "Constant" and not node.input:
            constants[node.output[0]] = node
            return False
        if not domain_ok or node.op_type not in _VIEW_OPS or node.output[0] in self.output_names:
            return False
        if any(name and name not in self.initializers and name not in constants for name in node.input):
            return False
        args = [self.initializers[name] if name in self.initializers else
                self._host_run(constants[name]) if name else None for name in node.input]
        self.initializers[node.output[0]] = np.asarray(self._host_run(node, *args))
        return True

    def _host_run(self, node: onnx.NodeProto, *args: Any) -> Any:
        """The node's op on host values (at load: a folded view, the Constant it reads)."""
        step = self._step(0, node)
        return step.spec.fn(HOST, *args, **step.attrs)

    def _step(self, index: int, node: onnx.NodeProto) -> Step:
        domain = normalize_domain(node.domain)
        spec = resolve(domain, node.op_type, self.opsets.get(domain, 1))
        attrs, subgraphs = {}, {}
        for a in node.attribute:
            value = attribute_value(a)
            if a.type == onnx.AttributeProto.GRAPH:
                # a copy of its own: a reference would keep the whole model proto (weights) alive
                value = onnx.GraphProto()
                value.CopyFrom(a.g)
                subgraphs[a.name] = value
            attrs[a.name] = value
        name = node.name or f"{node.op_type}_{index}"
        captures = tuple(sorted(set(_node_reads(node)) - set(node.input))) if subgraphs else ()
        return Step(name, spec, attrs, tuple(node.input), tuple(node.output), subgraphs, captures)

    def share_weights(self, B: Backend, min_size: int = 1024) -> None:
        """Hold each large initializer once: its device copy is made now (every signature reads it)
        and the host value becomes a view of that copy, where the device memory is the host's
        (``B.host_view``: mlx, torch on the CPU). Elsewhere (CUDA) both copies stay."""
        host_only, weights, filters = self._read_on_host_only(), self._matmul_weights(), self._conv_weights()
        for name, value in self.initializers.items():
            if (not isinstance(value, np.ndarray) or value.size < min_size or not B.supports_dtype(value.dtype)
                    or name in host_only):
                continue
            key = (name, B.name)
            if key not in self.device_constants:
                # a linear layer's weight in the layout the backend's matmul reads fastest (``B.matmul_weight``), a
                # 2-D convolution's in its convolution's (``B.conv_weight``)
                if name in weights and value.ndim == 2 and value.dtype.kind == "f":
                    self.device_constants[key] = B.matmul_weight(value, only_matmul=True)
                elif name in filters and value.ndim == 4 and value.dtype.kind == "f":
                    self.device_constants[key] = B.conv_weight(value)
                else:
                    self.device_constants[key] = _to_device(value, B)
            device = self.device_constants[key]
            view = B.host_view(device)
            if view is not None and view.dtype == value.dtype and view.shape == value.shape:
                self.initializers[name] = view
                if not any(view.strides):  # a stand-in: the device holds the values alone (``host_value``)
                    self.device_only.add(name)

    def dead_after(self) -> list[list[str]]:
        """For each step, the values read (or made) for the last time there, graph outputs excepted."""
        if self._dead is None or self._dead[0] is not self.steps:  # made for these steps (a variant has its own)
            uses = [((*step.inputs, *step.captures), step.outputs) for step in self.steps]
            self._dead = (self.steps, _last_uses(uses, set(self.output_names)))
        return self._dead[1]

    def _matmul_weights(self) -> set[str]:
        """Initializers that every reader takes as the right operand of a MatMul or of a fused MatMulAdd (a linear
        layer's weight)."""
        reads: dict[str, set[tuple[str, str, int]]] = collections.defaultdict(set)
        for name, domain, op_type, i in self._reads():
            reads[name].add((domain, op_type, i))
        linear = {(DEFAULT_DOMAIN, "MatMul", 1), (FUSED_DOMAIN, "MatMulAdd", 1)}
        return {n for n, r in reads.items() if r and r <= linear}

    def _conv_weights(self) -> set[str]:
        """Initializers that every reader takes as the weight of a ``Conv`` or fused ``FusedConv``, all of one geometry
        (strides, pads, dilations, groups): a backend lays such a weight out for its convolution."""
        geometry: dict[str, set[tuple]] = collections.defaultdict(set)
        for step in self.steps:
            if (step.spec.domain, step.spec.op_type) in _CONV_WEIGHT_READS and len(step.inputs) > 1:
                a = step.attrs
                pads = tuple(a.get("pads", ())) if a.get("auto_pad", "NOTSET") == "NOTSET" else ()
                geometry[step.inputs[1]].add((tuple(a.get("strides", ())) or (1, 1), pads or (0, 0, 0, 0),
                                              tuple(a.get("dilations", ())) or (1, 1), a.get("group", 1)))
        reads = collections.Counter(name for name, *read in self._reads() if tuple(read) not in _CONV_WEIGHT_READS_AT)
        # not where read otherwise, or by convolutions of different geometries
        return {name for name, kinds in geometry.items() if len(kinds) == 1 and not reads[name]}

    def _reads(self) -> Iterator[tuple[str, str, str, int]]:
        """(name, domain, op_type, input index) of each read of a value by a step, and by the steps of its subgraphs
        of a value they capture (the branches of a merged decoder's If read the outer graph's weights)."""
        for step in self.steps:
            for i, name in enumerate(step.inputs):
                yield name, step.spec.domain, step.spec.op_type, i
            for graph in step.subgraphs.values():
                child = self.subprogram(graph)
                own = set(child.input_names) | set(child.initializers) | {o for s in child.steps for o in s.outputs}
                yield from (read for read in child._reads() if read[0] not in own)

    def _read_on_host_only(self) -> set[str]:
        """Initializers that every reader takes on the host: a static input (MatMulNBits' packed weights,
        which the op repacks for the device itself) or a shape-only op. They get no device copy."""
        device, host = set(), set()
        for step in self.steps:
            for i, name in enumerate(step.inputs):
                static = i in step.spec.static_inputs or step.spec.shape_only
                (host if static else device).add(name)
            device.update(step.captures)
        return host - device

    def subprogram(self, graph: onnx.GraphProto) -> Program:
        key = id(graph)
        if key not in self._subprograms:
            child = Program(graph, self.opsets)
            child.parent = self
            self._subprograms[key] = child
        return self._subprograms[key]

    def host_value(self, name: str, value: Any, B: Backend) -> Any:
        """``value``, the value of ``name`` in a run, as numpy for a step computed on the host: the device copy's
        values where the host one is a stand-in (``device_only``), else ``value`` itself."""
        owner = self.constant_owner(name, value)
        if owner is None or name not in owner.device_only:
            return value
        return B.to_numpy(owner.device_constants[(name, B.name)])

    def constant_owner(self, name: str, value: Any) -> Program | None:
        """The program, this one or an enclosing one, whose initializer ``name`` is ``value`` (a subgraph
        reads its outer graphs' weights, which must not be copied to the device at every call)."""
        program: Program | None = self
        while program is not None:
            if program.initializers.get(name) is value:
                return program
            program = program.parent
        return None


def find_missing_ops(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> dict[tuple[str, str, int], str]:
    """Every (domain, op_type, opset) in ``graph`` and its subgraphs with no registered op."""
    missing: dict[tuple[str, str, int], str] = {}
    for node in _all_nodes(graph):
        domain = normalize_domain(node.domain)
        opset = opsets.get(domain, 1)
        if resolve(domain, node.op_type, opset) is None:
            missing.setdefault((domain, node.op_type, opset), node.name or node.op_type)
    return missing


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)
            for g in a.graphs:
                yield from _all_nodes(g)


def _topological(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Nodes in an order where each one's inputs are produced before it (Kahn's algorithm)."""
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    waiting = [0] * len(graph.node)
    users = collections.defaultdict(list)
    for i, node in enumerate(graph.node):
        for name in set(_node_reads(node)):
            if name in producer and producer[name] != i:
                waiting[i] += 1
                users[producer[name]].append(i)
    ready = collections.deque(i for i, w in enumerate(waiting) if w == 0)
    order = []
    while ready:
        i = ready.popleft()
        order.append(graph.node[i])
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    if len(order) != len(graph.node):
        stuck = [graph.node[i].name or graph.node[i].op_type for i, w in enumerate(waiting) if w]
        raise ConverterError(f"graph {graph.name!r} has a cycle or an input no node produces, at nodes {stuck[:5]}")
    return order


def _node_reads(node: onnx.NodeProto) -> list[str]:
    """Names a node reads, including outer-scope names its subgraphs capture."""
    names = [n for n in node.input if n]
    for a in node.attribute:
        for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            names.extend(_captured_names(g))
    return names


def _captured_names(graph: onnx.GraphProto) -> set[str]:
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    local |= {o for n in graph.node for o in n.output}
    reads = {n for node in graph.node for n in _node_reads(node)}
    return reads - local


@dataclass
class NodeContext:
    """What an op registered with ``context=True`` may ask about its node."""

    step: Step
    backend: Backend
    num_outputs: int
    run_subgraph: Callable[[onnx.GraphProto, Sequence[Any]], list[Any]]
    opset: int = 0
    # a value on the host: syncs a device value, or raises SyncNeeded while planning
    to_host: Callable[[Any], np.ndarray] | None = None


class SyncNeeded(DynamicShapeError):
    """Raised while planning when a node needs a device value on the host."""


@dataclass
class Interpreter:
    """Walks a program. ``sync=False`` forbids moving device values to the host (planning)."""

    program: Program
    backend: Backend
    sync: bool = True
    trace: list[tuple[Step, list[Any]]] | None = None
    scope: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, Any] = field(default_factory=dict)  # the values of the last run
    # planning: the index inputs (trace position, step, bound) that the signature checks at each call
    guards: list[tuple[int, Step, Any]] | None = None

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        env = collections.ChainMap(dict(feeds), self.program.initializers, dict(self.scope))
        # planning an eager backend: a device value past its last reader becomes a stand-in of its shape and dtype
        # (all the replay's planning reads of it), so the walk frees activations as it goes, as the replay does
        # (BGE-base 32x128 on torch: the walk peaked at 3.3 GB, the replay at ~1 GB)
        shadows = self.trace is not None and not self.backend.traces
        dead = self.program.dead_after() if shadows else []
        places: dict[str, list[tuple[list[Any], int]]] = collections.defaultdict(list)  # a value's trace slots
        for index, step in enumerate(self.program.steps):
            args = [env[n] if n else None for n in step.inputs]
            outs = self.run_step(step, args, env)
            if self.trace is not None:
                self.trace.append((step, args))
            env.maps[0].update(zip(step.outputs, outs))
            if shadows:
                for i, n in enumerate(step.inputs):
                    if n in env.maps[0]:
                        places[n].append((args, i))
                _stand_ins(self.backend, env.maps[0], dead[index], places)
        self.env = env
        return {n: env[n] for n in self.program.output_names}

    def run_step(self, step: Step, args: list[Any], env: Mapping[str, Any] | None = None) -> list[Any]:
        spec = step.spec
        try:
            captured = [env[n] for n in step.captures if n in env] if env is not None else []
            B = self._backend_for(step, args + captured)
            call_args = self._prepare(step, args, B)
            if spec.index_bounds is not None:
                self._check_indices(step, args, call_args, B)
            kwargs = dict(step.attrs)
            if spec.context:
                kwargs["ctx"] = self.context_for(step, B, env)
            if B.is_host:  # ONNX math makes inf and nan where it must (T5's log of position 0): no numpy warning
                with np.errstate(all="ignore"):
                    out = spec.fn(B, *call_args, **kwargs)
            else:
                out = call_op(spec.fn, B, call_args, kwargs)
        except ConverterError as e:
            if isinstance(e, DynamicShapeError | OpError):
                raise
            raise OpError(f"node {step.label}: {e}") from e
        except Exception as e:
            raise OpError(f"node {step.label} with inputs {_describe(args)}: {type(e).__name__}: {e}") from e
        outs = list(out) if isinstance(out, tuple) else [out]
        return outs + [None] * (len(step.outputs) - len(outs))

    def _check_indices(self, step: Step, args: list[Any], call_args: list[Any], B: Backend) -> None:
        """Checks the op's index inputs (``bounds``): host values now; device values now when this run may
        sync, else (planning) at each call of the signature. A device index is clamped in any case."""
        for bound in step.spec.index_bounds(B, call_args, step.attrs):
            if bound.input >= len(args) or args[bound.input] is None:
                continue
            name = step.inputs[bound.input]
            if is_host(args[bound.input]):
                check_values(step.label, name, bound, np.asarray(args[bound.input]))
                continue
            if self.sync:
                check_values(step.label, name, bound, self.backend.to_numpy(args[bound.input]))
            elif self.guards is not None:
                self.guards.append((len(self.trace or ()), step, bound))
            call_args[bound.input] = clamp(B, call_args[bound.input], bound)

    def context_for(self, step: Step, B: Backend, env: Mapping[str, Any] | None) -> NodeContext:
        """The ``ctx`` of a context op's call: its node, and subgraphs run in ``env`` (the outer scope)."""
        run = lambda g, ins: self._subgraph(g, ins, env)  # noqa: E731
        to_host = lambda v: self._host_value(step, v)  # noqa: E731
        return NodeContext(step, B, len(step.outputs), run, self._opset(step.spec), to_host)

    def _opset(self, spec: OpSpec) -> int:
        return self.program.opsets.get(spec.domain, 1)

    def _backend_for(self, step: Step, args: list[Any]) -> Backend:
        spec = step.spec
        tensors = [a for a in args if a is not None]
        if spec.shape_only:
            return self.backend
        if all(is_host(a) for a in tensors):
            return HOST
        # host-only ops (``host`` may be a test of the backend and attributes, e.g. a Cast to
        # float8), and host values of a dtype the device lacks (float8, int4, strings)
        host = spec.host(self.backend, step.attrs) if callable(spec.host) else spec.host
        # static inputs reach the op as numpy whatever their dtype, so they don't count here
        operands = [a for i, a in enumerate(args) if a is not None and i not in spec.static_inputs]
        if host or any(_host_only_dtype(a, self.backend) for a in operands):
            self._need_sync(step, "it runs on the host" if host else "an input's dtype has no device type")
            return HOST
        return self.backend

    def _prepare(self, step: Step, args: list[Any], B: Backend) -> list[Any]:
        out = []
        for i, a in enumerate(args):
            if a is None or step.spec.shape_only:
                out.append(a)
            elif i in step.spec.static_inputs:
                if not is_host(a):
                    self._need_sync(step, f"input {i} ({step.inputs[i]!r}) must be known on the host")
                    a = self.backend.to_numpy(a)
                out.append(np.asarray(a))
            elif B.is_host:
                out.append(_to_host(self.program.host_value(step.inputs[i], a, self.backend), self.backend))
            elif (owner := self.program.constant_owner(step.inputs[i], a)) is not None:
                out.append(_device_weight(owner, step.inputs[i], a, B))
            else:
                out.append(_to_device(a, B))
        return out
    def _host_value(self, step: Step, v: Any) -> Any:
        if not is_host(v):
            self._need_sync(step, "a value it reads must be known on the host")
        return _to_host(v, self.backend)

    def _need_sync(self, step: Step, why: str) -> None:
        if not self.sync:
            raise SyncNeeded(f"node {step.label}: {why}, but it is computed on the device")

    def _subgraph(self, graph: onnx.GraphProto, inputs: Sequence[Any], env: Mapping[str, Any] | None) -> list[Any]:
        program = self.program.subprogram(graph)
        sub = Interpreter(program, self.backend, self.sync, None, env if env is not None else {})
        feeds = dict(zip(program.input_names, inputs))
        return list(sub.run(feeds).values())


def _device_weight(owner: Program, name: str, value: Any, B: Backend) -> Any:
    """An initializer of ``owner`` on the device, converted once (eager runs read weights every call)."""
    key = (name, B.name)
    if key not in owner.device_constants:
        owner.device_constants[key] = _to_device(value, B)
    return owner.device_constants[key]


def _host_only_dtype(a: Any, B: Backend) -> bool:
    if isinstance(a, list):
        return any(_host_only_dtype(x, B) for x in a)
    return isinstance(a, np.ndarray | np.generic) and not B.supports_dtype(a.dtype)


def _to_host(a: Any, B: Backend) -> Any:
    if isinstance(a, list):
        return [_to_host(x, B) for x in a]
    return a if is_host(a) else B.to_numpy(a)


def _shortcut(step: Step, plan: list[tuple[str, Any]], args: list[Any], env: Mapping[str, Any],
              B: Backend, ctx: NodeContext | None) -> tuple[str, Any] | None:
    """What an eager replay may run instead of the step's op, given the planning walk's values: its output's
    shape or dtype for an op that declares ``replay_as`` (``("reshape", (1, 9, 64))``), or the op's own kernel
    for these shapes (``("kernel", fn)``, from ``specialise``); None for the op itself."""
    spec = step.spec
    form = spec.replay_as
    out = env.get(step.outputs[0]) if step.outputs and step.outputs[0] else None
    if form == "identity":
        return form, None
    if form is not None and out is not None and B.is_array(out):
        if form == "astype" and args and B.is_array(args[0]) and B.dtype(args[0]) == B.dtype(out):
            return "identity", None  # a Cast to the dtype it has (T5's softmax in float32): the value itself
        return form, B.dtype(out) if form == "astype" else tuple(int(d) for d in B.shape(out))
    if spec.specialise is not None:
        context = {"ctx": ctx} if spec.context else {}
        kernel = spec.specialise(B, *[a if n else c for (n, c), a in zip(plan, args)], **step.attrs, **context)
        return None if kernel is None else ("kernel", kernel)
    return None


def _step_key(step: Step, plan: list[tuple[str, Any]], args: list[Any]) -> tuple | None:
    """What a replay step computes, as a key equal for two steps with the same op, attributes and inputs (device
    values by name, small host values by value); None for a step never merged (control flow, odd attributes)."""
    attrs = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in step.attrs.items()))
    plain = int | float | str | bytes | None
    if step.spec.context or not all(isinstance(v, plain) or isinstance(v, tuple) and all(isinstance(x, plain) for x in v)
                                    for _, v in attrs):
        return None
    inputs = []
    for (name, _), a in zip(plan, args):
        if name:
            inputs.append(name)
        elif isinstance(a, np.ndarray | np.generic) and a.nbytes <= 1024:
            inputs.append((a.dtype.str, a.shape, a.tobytes()))
        else:
            inputs.append(id(a))  # a large host value: the same only as itself
    return (step.spec, attrs, tuple(inputs))


def _last_uses(steps: Sequence[tuple[Sequence[str], Sequence[str]]], keep: set[str]) -> list[list[str]]:
    """For each step, given as (the names it reads, the names it makes), the names read for the last time there or
    made there and never read, ``keep`` excepted: what may be freed once the step has run."""
    last: dict[str, int] = {}
    for i, (reads, makes) in enumerate(steps):
        last.update((n, i) for n in reads if n)
        last.update((n, i) for n in makes if n and n not in last)  # never read: freed at once
    dead: list[list[str]] = [[] for _ in steps]
    for n, i in last.items():
        if n not in keep:
            dead[i].append(n)
    return dead


def _stand_ins(B: Backend, values: dict[str, Any], names: list[str],
               places: dict[str, list[tuple[list[Any], int]]]) -> None:
    """Each device value of ``names`` in ``values`` and in the trace slots ``places`` that hold it replaced by an
    array of its shape and dtype that holds one element (a broadcast zero)."""
    for n in names:
        value = values.get(n)
        if value is not None and B.is_array(value):
            values[n] = stand_in = B.broadcast_to(B.zeros((), B.dtype(value)), B.shape(value))
            for slots, i in places.pop(n, ()):
                slots[i] = stand_in


def _to_device(a: Any, B: Backend) -> Any:
    if isinstance(a, list):
        return [_to_device(x, B) for x in a]
    if isinstance(a, np.ndarray | np.generic) and B.supports_dtype(a.dtype):
        return B.asarray(a)
    return a


def _has_data(v: Any) -> bool:
    return any(_has_data(x) for x in v) if isinstance(v, list) else v is not None


def call_op(fn: Any, B: Backend, args: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
    """``fn(B, *args, **attrs)``; once more in ``B.retry_place(error)`` where the backend has one for its error."""
    try:
        return fn(B, *args, **attrs)
    except Exception as e:
        place = B.retry_place(e)
        if place is None:
            raise
        with place:
            return fn(B, *args, **attrs)


def _describe(args: Sequence[Any]) -> str:
    parts = []
    for a in args:
        if a is None:
            parts.append("-")
        elif isinstance(a, list):
            parts.append(f"seq[{len(a)}]")
        else:
            shape = getattr(a, "shape", ())
            parts.append(f"{getattr(a, 'dtype', type(a).__name__)}{list(shape)}")
    return "(" + ", ".join(parts) + ")"


def _weakly(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` as a function that holds its object weakly: kept on that object (``Executable.replay``), a bound
    method made a reference cycle, so a dropped model's weights (its signatures' constants) stayed in memory until
    Python's cyclic collector ran (Qwen3-0.6B's int4 export on mlx: 2.4 GB after its pipeline was dropped)."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        return ref()(*args)

    return call


class Executable:
    """A program specialised to one input signature: a replay of its device nodes.

    ``compiled`` tells whether the replay is traced (``mx.compile`` on mlx); ``eager_reason``
    says why not, when a node needs device values on the host. ``guards`` are the index inputs it
    checks at each call (``bounds``). ``compile="on_reuse"`` leaves a signature untraced until its second
    call: a shape used once (a step of a cache that grows) never pays for a trace.
    """

    def __init__(
        self,
        program: Program,
        backend: Backend,
        feeds: Mapping[str, Any],
        compile: bool | str = True,
        constant_feeds: frozenset[str] = frozenset(),
    ):
        self.program = program
        self.backend = backend
        self.eager_reason: str | None = None
        self.guards: list[Guard] = []
        trace: list[tuple[Step, list[Any]]] = []
        found: list[tuple[int, Step, Any]] = []
        interp = Interpreter(program, backend, sync=False, trace=trace, guards=found)
        # a host feed (strings) changes per call: it must not be baked into a replay, unless its
        # value is part of the signature (``constant_feeds``: flags such as use_cache_branch)
        held = [n for n, v in feeds.items() if is_host(v) and _has_data(v) and n not in constant_feeds]
        self._first_outputs: dict[str, Any] | None = None
        try:
            if held:
                raise SyncNeeded(f"input(s) {held} have no device type and are read on the host")
            self._first_outputs = interp.run(feeds)
        except SyncNeeded as e:
            self.eager_reason = str(e)
            self.replay = None
            self.compiled = False
            return
        self._build_replay(trace, feeds, interp, {position for position, _, _ in found})
        self.guards = self._guards(found, trace, interp.env)
        # the steps, for recomputing guarded indices on the host; not the walk's values, which would hold every
        # activation of the planning call for as long as the signature lives (BGE-base 32x128 on torch: 2.6 GB)
        self._trace = [(step, []) for step, _ in trace]
        self._guards_at: dict[int, list[Guard]] = {}
        for g in self.guards:
            self._guards_at.setdefault(g.step_index, []).append(g)
        # host values a subgraph may capture from the outer scope (only those: the planning walk's
        # other host values include folded weights, which a replay holds on the device already)
        captured = {n for step, _ in self.steps for n in step.captures}
        self._host_env = {k: v for k, v in interp.env.items() if k in captured and is_host(v)}
        self._interp = Interpreter(program, backend, sync=False)
        self._host_interp = Interpreter(program, HOST, sync=True)
        self._trace_on_reuse = compile == "on_reuse" and backend.traces
        compile = compile is True or (compile == "on_reuse" and not backend.traces)
        self.compiled = compile
        self.traced = compile and backend.traces
        self.replay = backend.compile(_weakly(self._replay)) if compile else _weakly(self._replay)
        # an untraced replay runs as written-out Python (``replay.py``), written at its first run
        self._code: StraightLine | None = None
        self._write_code = not self.traced
        if self.traced or any(not g.on_host for g in self.guards):
            # a traced replay gives every call of a signature the same numbers, and device checks come
            # from the replay: don't keep the planning walk's graph alive
            self._first_outputs = None

    def _guards(self, found: list[tuple[int, Step, Any]], trace: list[tuple[Step, list[Any]]],
                env: Mapping[str, Any]) -> list[Guard]:
        """The planning walk's device index inputs, each recomputed on the host where it can be."""
        feeds = set(self.feed_names)
        guards = []
        for position, step, bound in found:
            name = step.inputs[bound.input]
            source = host_source(name, trace, env, feeds)
            guard = Guard(step.label, name, bound, position)
            if source is not None:
                guard.source, guard.feeds, guard.constants = source
            guards.append(guard)
        return guards

    def take_first_outputs(self) -> dict[str, Any] | None:
        """The outputs of the planning walk (an untraced replay would repeat its work), once; None when
        the first call must run the replay. Only the caller that planned the signature may take them."""
        out, self._first_outputs = self._first_outputs, None
        return out

    def _build_replay(self, trace: list[tuple[Step, list[Any]]], feeds: Mapping[str, Any],
                      interp: Interpreter, guarded: set[int]) -> None:
        """Keep the steps that produced a device value that is read; bake in the host values they read. ``interp``:
        the planning walk, whose values' shapes and dtypes the signature fixes (``shortcuts``);
        ``guarded``: the trace positions of steps whose indices are checked (kept whether read or not)."""
        B, env = self.backend, interp.env
        # step index -> what an eager replay runs instead of the op (``replay.py``)
        self.shortcuts: dict[int, tuple[str, Any]] = {}
        self.feed_names = [n for n in self.program.input_names if n in feeds and not is_host(feeds[n])]
        device = set(self.feed_names)
        self.steps: list[tuple[Step, list[tuple[str, Any]]]] = []
        self._trace_positions: list[int] = []
        host_values: dict[str, Any] = {}
        constant = set(self.program.initializers)  # values that no input influences
        # a step that repeats an earlier one (same op, attributes and inputs: each layer's copy of the mask)
        # runs once; its outputs become names for the first one's
        first: dict[tuple, Step] = {}
        alias: dict[str, str] = {}
        kept_names = set(self.program.output_names) | {n for step, _ in trace for n in step.captures}
        for position, (step, args) in enumerate(trace):
            reads = step.inputs + step.captures  # a subgraph's outer-scope reads count as inputs
            reads_device = any(n in device for n in reads if n)
            if not reads_device or step.spec.shape_only:
                if not step.spec.shape_only and all(n in constant for n in reads if n):
                    constant.update(step.outputs)
                continue  # a host step: its outputs are constants of this signature
            plan = []
            for i, (n, a) in enumerate(zip(step.inputs, args)):
                if not n or n in device:
                    plan.append((alias.get(n, n), None))
                elif i in step.spec.static_inputs:
                    plan.append(("", np.asarray(a) if is_host(a) else a))
                else:
                    cache = self.program.device_constants if n in constant else host_values
                    key = (n, B.name)
                    if key not in cache:
                        cache[key] = _to_device(a, B)
                    plan.append(("", cache[key]))
            key = _step_key(step, plan, args)
            if key is not None and key in first and not kept_names.intersection(step.outputs):
                alias.update((o, f) for o, f in zip(step.outputs, first[key].outputs) if o)
                device.update(o for o in step.outputs if o)
                continue
            if key is not None:
                first[key] = step
            ctx = interp.context_for(step, B, None) if step.spec.context else None
            shortcut = _shortcut(step, plan, args, env, B, ctx)
            if shortcut is not None:
                self.shortcuts[len(self.steps)] = shortcut
            self.steps.append((step, plan))
            self._trace_positions.append(position)
            device.update(o for o in step.outputs if o)
        names = self.program.output_names
        self.host_outputs = {n: self._first_outputs[n] for n in names if n not in device}
        self.device_output_names = [n for n in names if n in device]
        self._drop_unread(guarded)
        self.constant_names: list[str] = []
        self.constant_values: list[Any] = []
        if B.traces:
            self._lift_scalar_constants()
        # each device value is dropped after its last reader, so an eager replay (torch) frees activations as
        # PyTorch eager does instead of holding every one of them to the end (MiniLM 32x128: 1.9 GB peak)
        uses = [((*(n for n, _ in plan), *step.captures), step.outputs) for step, plan in self.steps]
        self._drop_after = _last_uses(uses, set(self.device_output_names))

    def _drop_unread(self, guarded: set[int]) -> None:
        """Drop the steps whose device values nothing reads but shapes (``Shape``, ``Size``: constants of the
        signature): a ``repeat_kv`` chain that the fused attention reads around stays in the graph for its shape,
        and would otherwise copy the key and value cache out per head at every step."""
        needed, live = set(self.device_output_names), []
        for i in reversed(range(len(self.steps))):
            step, plan = self.steps[i]
            if self._trace_positions[i] in guarded or any(o in needed for o in step.outputs if o):
                live.append(i)
                needed.update(n for n, _ in plan if n)
                needed.update(n for n in step.captures if n)
        live.reverse()
        self.shortcuts = {new: self.shortcuts[old] for new, old in enumerate(live) if old in self.shortcuts}
        self.steps = [self.steps[i] for i in live]
        self._trace_positions = [self._trace_positions[i] for i in live]

    def _lift_scalar_constants(self) -> None:
        """Make the steps' one-element device constants arguments of the replay (``constant_names``, fed
        ``constant_values``). ``mx.compile`` writes the value of a captured one-element array into the source of
        each fused kernel that reads it, so every layer's own scale got a kernel of its own, built with the system
        C++ compiler on a CPU and compiled anew on a GPU: SmolLM2-135M's q8 export made 484 kernels, 93 s of its
        first call on a cold cache (``/tmp/mlx``)."""
        lifted: dict[int, str] = {}
        for _, plan in self.steps:
            for i, (name, value) in enumerate(plan):
                if name or is_host(value) or isinstance(value, list) or math.prod(self.backend.shape(value)) != 1:
                    continue
                if id(value) not in lifted:
                    lifted[id(value)] = f"\0constant{len(lifted)}"  # no ONNX value has this name
                    self.constant_names.append(lifted[id(value)])
                    self.constant_values.append(value)
                plan[i] = (lifted[id(value)], None)

    def _replay(self, *arrays: Any) -> tuple[Any, ...]:
        """The device outputs, then the extremes of each index checked on the device."""
        call_scope.begin()
        try:
            return self._replay_steps(*arrays)
        finally:
            call_scope.end()

    def _replay_steps(self, *arrays: Any) -> tuple[Any, ...]:
        """``_replay`` within its call scope: the written function, or the walk where it has none or raises."""
        if self._write_code:
            self._code, self._write_code = straight_line(self), False
        code = self._code
        if code is None:
            return self._walk(*arrays)
        try:
            return code(*arrays)
        except Exception:
            pass
        # the walk names the node that fails; where it runs instead (a backend's ``retry_place``), it stays
        out = self._walk(*arrays)
        self._code = None
        return out

    def _walk(self, *arrays: Any) -> tuple[Any, ...]:
        """``_replay`` as a loop over the steps, each op called through ``call_op`` and its errors labelled."""
        env = dict(zip(self.feed_names + self.constant_names, arrays))
        B = self.backend
        found = []
        for index, ((step, plan), position) in enumerate(zip(self.steps, self._trace_positions)):
            args = [env[n] if n else const for n, const in plan]
            for g in self._guards_at.get(position, ()):
                if not g.on_host:
                    found.append(extremes(B, args[g.bound.input], g.bound))
                args[g.bound.input] = clamp(B, args[g.bound.input], g.bound)
            spec = step.spec
            if spec.context:  # rare (control flow, Split): the general path, with the outer scope
                outs = self._interp.run_step(step, args, collections.ChainMap(env, self._host_env))
            else:
                try:
                    out = call_op(spec.fn, B, args, step.attrs)
                except Exception as e:
                    raise OpError(f"node {step.label} with inputs {_describe(args)}: {type(e).__name__}: {e}") from e
                outs = out if isinstance(out, tuple) else (out,)
            env.update(zip(step.outputs, outs))
            for n in self._drop_after[index]:
                env.pop(n, None)
        return tuple(env[n] for n in self.device_output_names) + tuple(found)

    def check_on_host(self, feeds: Mapping[str, Any], host_feeds: Mapping[str, np.ndarray],
                      unchecked: frozenset[str] = frozenset()) -> None:
        """Checks the indices computed from feeds, on the host, before the device runs. A feed given as a
        device array is read back (a wait) unless ``unchecked`` names it: its indices are then clamped."""
        values: dict[str, np.ndarray] = {}
        for g in self.guards:
            if not g.on_host or any(f in unchecked and f not in host_feeds for f in g.feeds):
                continue
            if g.name not in values:
                given = {f: host_feeds[f] if f in host_feeds else self.backend.to_numpy(feeds[f]) for f in g.feeds}
                values[g.name] = host_value(g, self._trace, given, self._host_step)
            origin = f" (computed from {', '.join(repr(f) for f in sorted(g.feeds))})" if g.name not in g.feeds else ""
            check_values(g.label, g.name, g.bound, values[g.name], origin)

    def _host_step(self, step: Step, args: list[Any]) -> list[Any]:
        return self._host_interp.run_step(step, args)

    def __call__(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Run the signature on device ``feeds`` (after ``check_on_host``); device-checked indices are read
        back and checked after the run."""
        if self.replay is None:
            return Interpreter(self.program, self.backend, sync=True).run(feeds)
        if self._trace_on_reuse:  # a second call: the shape recurs, so a trace pays for itself
            self._trace_on_reuse = self._write_code = False  # a trace walks the steps once
            self.replay, self.compiled, self.traced = self.backend.compile(_weakly(self._replay)), True, True
        outs = self.replay(*(feeds[n] for n in self.feed_names), *self.constant_values)
        n = len(self.device_output_names)
        device_guards = [g for g in self.guards if not g.on_host]
        for g, found in zip(device_guards, outs[n:]):
            check_extremes(g.label, g.name, g.bound, self.backend.to_numpy(found))
        result = dict(self.host_outputs)
        result.update(zip(self.device_output_names, outs[:n]))
        return {name: result[name] for name in self.program.output_names}
