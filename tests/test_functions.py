"""The function-body fallback: ops the spec defines as functions run without a converter of their own."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from transmuter_mlx.converters.errors import UnsupportedOpError
from transmuter_mlx.converters.functions import expand_functions
from transmuter_mlx.converters.model import load
from transmuter_mlx.converters.ops import registry

F = TensorProto.FLOAT


@pytest.fixture
def without(monkeypatch):
    """Hide registered converters, so that only the spec's function body can run the op."""

    def hide(*op_types: str) -> None:
        for op in op_types:
            monkeypatch.delitem(registry._REGISTRY, ("", op), raising=False)

    return hide


def _model(nodes, inputs, outputs, opset):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _compare(model, feeds, backend):
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    ours = load(model, backend=backend)
    got = ours(feeds)
    for o, e in zip(model.graph.output, expected):
        np.testing.assert_allclose(ours.backend.to_numpy(got[o.name]), e, rtol=1e-5, atol=1e-6)


def _affine_grid_model(opset=20):
    return _model(
        [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=1)],
        [helper.make_tensor_value_info("theta", F, [2, 2, 3]), helper.make_tensor_value_info("size", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("grid", F, [2, 4, 5, 2])],
        opset,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_plain_function_body(without, backend):
    """AffineGrid (a plain function body whose nodes include If) against onnxruntime."""
    without("AffineGrid")
    theta = np.random.default_rng(0).standard_normal((2, 2, 3)).astype(np.float32)
    _compare(_affine_grid_model(), {"theta": theta, "size": np.array([2, 3, 4, 5], np.int64)}, backend)


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_context_dependent_function_inside_a_subgraph(without, backend):
    """SoftmaxCrossEntropyLoss (its body depends on the input types) in an If branch."""
    without("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")
    loss = helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["l"], reduction="mean")
    branch = helper.make_graph([loss], "then", [], [helper.make_tensor_value_info("l", F, [])])
    other = helper.make_graph(
        [helper.make_node("ReduceSum", ["scores"], ["s"], keepdims=0)],
        "else",
        [],
        [helper.make_tensor_value_info("s", F, [])],
    )
    model = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)],
        [helper.make_tensor_value_info("scores", F, [3, 5]), helper.make_tensor_value_info("labels", TensorProto.INT64, [3]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", F, [])],
        13,
    )  # fmt: skip
    feeds = {
        "scores": np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32),
        "labels": np.array([0, 4, 2], np.int64),
        "c": np.array(True),
    }
    _compare(model, feeds, backend)


def test_expansion_leaves_the_caller_model_alone(without):
    without("AffineGrid")
    model = _affine_grid_model()
    before = model.SerializeToString()
    expanded, opsets = expand_functions(model, {"": 20})
    assert model.SerializeToString() == before
    assert "AffineGrid" not in {n.op_type for n in expanded.graph.node}
    assert opsets[""] == 20


def test_unsupported_error_lists_only_ops_without_a_body(without):
    without("AffineGrid")
    model = _affine_grid_model()
    model.graph.node.append(helper.make_node("NoSuchOp", ["grid"], ["z"], domain="example.domain"))
    model.graph.output.append(helper.make_tensor_value_info("z", F, None))
    model.opset_import.append(helper.make_opsetid("example.domain", 1))
    with pytest.raises(UnsupportedOpError) as info:
        load(model, backend="mlx")
    assert [op for _, op, _ in info.value.missing] == ["NoSuchOp"]


def test_onnx_checker_accepts_the_expanded_model(without):
    without("AffineGrid")
    expanded, _ = expand_functions(_affine_grid_model(), {"": 20})
    onnx.checker.check_model(expanded)
