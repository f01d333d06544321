"""Expand ops that have no converter but that the ONNX spec defines as a function of other ops.

At load, every node whose op has no registered converter but whose schema has a function body
at the model's opset (plain, or context-dependent: built from the node's attributes and input
types) is replaced by the body's nodes, recursively and inside subgraphs. The replacement goes
through onnx's own inliner (unique renaming, attribute references, subgraphs): each such node
becomes a call to a model-local function made from its body, then the local functions are inlined.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
import onnx.inliner
import onnx.shape_inference
from onnx import defs

from .ops.registry import normalize_domain, resolve

_LOCAL = "transmuter.functions"  # domain of the temporary local functions
_MAX_ROUNDS = 8  # a body may use ops that are functions themselves


def expand_functions(
    model: onnx.ModelProto, opsets: dict[str, int]
) -> tuple[onnx.ModelProto, dict[str, int]]:
    """``model`` with function-defined ops expanded, and its opsets (bodies may import new domains).

    >>> from onnx import TensorProto, helper
    >>> x, y = (helper.make_tensor_value_info(name, TensorProto.FLOAT, [2]) for name in "xy")
    >>> graph = helper.make_graph([helper.make_node("Swish", ["x"], ["y"])], "g", [x], [y])
    >>> model, opsets = expand_functions(helper.make_model(graph), {"": 24})
    >>> [n.op_type for n in model.graph.node], opsets       # Swish has a converter: it stays
    (['Swish'], {'': 24})

    An op without a converter whose spec gives a function body (``AffineGrid`` if none were
    registered) becomes the nodes of that body, inlined.
    """
    opsets = dict(opsets)
    for _ in range(_MAX_ROUNDS):
        todo = [n for n in _nodes(model.graph) if _needs_body(n, opsets)]
        if not todo:
            break
        model = _copy(model)  # never edit the caller's proto
        types = _value_types(model)
        functions = []
        for node in _nodes(model.graph):
            if not _needs_body(node, opsets):
                continue
            body = _body(node, opsets, types)
            if body is None:
                continue
            body.name, body.domain = f"{node.op_type}_{len(functions)}", _LOCAL
            node.op_type, node.domain = body.name, _LOCAL
            functions.append(body)
        if not functions:
            break
        for body in functions:
            for imp in body.opset_import:
                if normalize_domain(imp.domain) not in opsets:
                    opsets[normalize_domain(imp.domain)] = imp.version
                    model.opset_import.add(domain=imp.domain, version=imp.version)
        model.functions.extend(functions)
        model.opset_import.add(domain=_LOCAL, version=1)
        model = onnx.inliner.inline_local_functions(model)
        _drop_local_import(model)
    return model, opsets


def _needs_body(node: onnx.NodeProto, opsets: dict[str, int]) -> bool:
    domain = normalize_domain(node.domain)
    return domain != _LOCAL and resolve(domain, node.op_type, opsets.get(domain, 1)) is None


def _body(
    node: onnx.NodeProto, opsets: dict[str, int], types: dict[str, onnx.TypeProto]
) -> onnx.FunctionProto | None:
    """The spec's function body for ``node`` at the model's opset, or None when there is none."""
    domain = normalize_domain(node.domain)
    opset = opsets.get(domain, 1)
    try:
        schema = defs.get_schema(node.op_type, opset, node.domain)
    except defs.SchemaError:
        return None
    given = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():  # the body refers to defaulted attributes too
        if name not in given and attr.default_value.type != onnx.AttributeProto.UNDEFINED:
            node.attribute.append(attr.default_value)
    plain = [v for v in schema.function_opset_versions if v <= opsets.get("", opset)]
    if schema.has_function and plain:
        return onnx.FunctionProto.FromString(schema.get_function_with_opset_version(max(plain)))
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opsets.get("", opset)]
    if not (schema.has_context_dependent_function and dependent):
        return None
    if any(name and name not in types for name in node.input):
        return None  # the body depends on input types that inference could not give
    input_types = [
        types[n].SerializeToString() if n else onnx.TypeProto().SerializeToString() for n in node.input
    ]
    data = schema.get_context_dependent_function_with_opset_version(
        max(dependent), node.SerializeToString(), input_types
    )
    return onnx.FunctionProto.FromString(data) if data else None


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every value's type that the model declares or that shape inference finds, subgraphs included."""
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is a best effort here; declared types still count
        pass
    types: dict[str, onnx.TypeProto] = {}
    for graph in _graphs(model.graph):
        for v in list(graph.input) + list(graph.value_info) + list(graph.output):
            if v.type.WhichOneof("value"):
                types[v.name] = v.type
        for t in graph.initializer:
            types[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
    return types


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for a in node.attribute:
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                yield from _graphs(g)


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for g in _graphs(graph):
        yield from g.node


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _drop_local_import(model: onnx.ModelProto) -> None:
    keep = [imp for imp in model.opset_import if imp.domain != _LOCAL]
    del model.opset_import[:]
    model.opset_import.extend(keep)
