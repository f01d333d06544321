"""onnxruntime as an exact reference for int8 models on CPUs where its uint8 x int8 kernels saturate.

On an x86 CPU without VNNI (AVX2 only: an AMD EPYC VM that hides AVX-512, older Intel), onnxruntime multiplies
uint8 activations by int8 weights with ``vpmaddubsw``, which sums each pair of products into a saturating int16:
``255 * 127 + 255 * 127`` comes out as 32,767, not 64,770. Its MatMulInteger, QLinearConv, DynamicQuantizeMatMul,
DynamicQuantizeLSTM... then differ from the ONNX definition (exact int32 sums), which our backends follow; a q8 BERT's
scores move by 1e-3, a single product by thousands. Its uint8 x uint8 kernels widen to int16 first and are exact.

``exact_int8(model)`` rewrites every int8 weight of those ops as uint8 ``w + 128`` with its zero point moved by 128
too (``(w + 128) - (z + 128) = w - z``: the same products), so that onnxruntime takes its exact uint8 x uint8
kernels. ``reference(model)`` applies it only where the running onnxruntime saturates (``saturates()``, probed once).

>>> import numpy as np
>>> from onnx import TensorProto, helper, numpy_helper
>>> w = numpy_helper.from_array(np.array([[127], [127]], np.int8), "w")
>>> g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w"], ["y"])], "g",
...                      [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])],
...                      [helper.make_tensor_value_info("y", TensorProto.INT32, None)], [w])
>>> m = exact_int8(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
>>> [(i.name, numpy_helper.to_array(i).ravel().tolist()) for i in m.graph.initializer]
[('w', [127, 127]), ('w::u8', [255, 255]), ('w::zero_point::u8', [128])]
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

#: (domain, op) -> (index of the int8 weight, index of its zero point) for each weight of the op
WEIGHTS = {
    ("", "MatMulInteger"): ((1, 3),),
    ("", "ConvInteger"): ((1, 3),),
    ("", "QLinearMatMul"): ((3, 5),),
    ("", "QLinearConv"): ((3, 5),),
    ("com.microsoft", "DynamicQuantizeMatMul"): ((1, 3),),
    ("com.microsoft", "MatMulIntegerToFloat"): ((1, 5),),
    ("com.microsoft", "DynamicQuantizeLSTM"): ((1, 9), (2, 11)),
    ("com.microsoft", "QAttention"): ((1, 7),),
}


@functools.cache
def saturates() -> bool:
    """Whether this onnxruntime's uint8 x int8 product saturates (255 * 127 twice, summed: 32,767, not 64,770)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    w = numpy_helper.from_array(np.full((2, 1), 127, np.int8), "w")
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w"], ["y"])], "probe",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], [w])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return int(session.run(None, {"a": np.full((1, 2), 255, np.uint8)})[0][0, 0]) != 2 * 255 * 127


def reference(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` as onnxruntime should run it to compute the ONNX definition: ``exact_int8(model)`` where
    onnxruntime saturates, else ``model`` itself."""
    return exact_int8(model) if saturates() else model


def reference_source(path: str | Path) -> str | bytes:
    """What ``onnxruntime.InferenceSession`` should load for the file ``path``: the path, or where onnxruntime
    saturates and the file has int8 weights, the bytes of ``exact_int8`` of it."""
    if not saturates():
        return str(path)
    model = onnx.load(str(path))
    exact = exact_int8(model)
    return str(path) if exact is model else exact.SerializeToString()


def exact_int8(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with each int8 weight initializer of an integer product (``WEIGHTS``) as uint8 + 128 and
    its zero point as uint8 + 128; ``model`` itself when it has none."""
    if not _rewrites(model.graph):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    _rewrite(copy.graph, {})
    return copy


def _int8_weights(graph: onnx.GraphProto, scope: dict[str, onnx.TensorProto]):
    """(node, weight index, zero point index) of each int8 weight initializer in ``graph`` (not its subgraphs)."""
    for node in graph.node:
        for w, z in WEIGHTS.get((node.domain if node.domain != "ai.onnx" else "", node.op_type), ()):
            name = node.input[w] if w < len(node.input) else ""
            if name in scope and scope[name].data_type == onnx.TensorProto.INT8:
                yield node, w, z


def _subgraphs(graph: onnx.GraphProto):
    for node in graph.node:
        for a in node.attribute:
            yield from ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))


def _rewrites(graph: onnx.GraphProto, outer: dict | None = None) -> bool:
    scope = {**(outer or {}), **{t.name: t for t in graph.initializer}}
    return any(True for _ in _int8_weights(graph, scope)) or any(_rewrites(g, scope) for g in _subgraphs(graph))


def _rewrite(graph: onnx.GraphProto, outer: dict[str, onnx.TensorProto]) -> None:
    scope = {**outer, **{t.name: t for t in graph.initializer}}
    made: dict[str, str] = {}  # an int8 initializer's name -> its uint8 copy's (a weight may be shared by nodes)
    for node, w, z in list(_int8_weights(graph, scope)):
        weight = node.input[w]
        zero = node.input[z] if z < len(node.input) else ""
        node.input[w] = _shifted(graph, made, weight, numpy_helper.to_array(scope[weight]))
        if zero:
            node.input[z] = _shifted(graph, made, zero, numpy_helper.to_array(scope[zero]))
        else:  # the default zero point, 0, becomes 128
            node.input.extend([""] * (z + 1 - len(node.input)))
            node.input[z] = _shifted(graph, made, f"{weight}::zero_point", np.zeros((), np.int8))
    for g in _subgraphs(graph):
        _rewrite(g, scope)


def _shifted(graph: onnx.GraphProto, made: dict[str, str], name: str, values: np.ndarray) -> str:
    """The name of a uint8 initializer of ``graph`` holding int8 ``values`` + 128 (added once per ``name``; the
    int8 original stays for any other reader)."""
    if values.dtype != np.int8:
        raise TypeError(f"{name}: the zero point of an int8 weight should be int8, not {values.dtype}")
    if name not in made:
        made[name] = f"{name}::u8"
        graph.initializer.append(numpy_helper.from_array((values.astype(np.int16) + 128).astype(np.uint8), made[name]))
    return made[name]
