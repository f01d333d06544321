"""Errors name what they are about: the missing ops, the input, the file."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import transmuter_mlx as tm


def _model(nodes, inputs, outputs, initializers=(), opsets=(("", 17),)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _relu_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y])


def _matmul_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(64 * 16, dtype=np.float32).reshape(64, 16), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], [w])


def test_unsupported_ops_listed_at_load():
    nodes = [
        helper.make_node("Foo", ["x"], ["a"], domain="com.example", name="foo_first"),
        helper.make_node("Foo", ["a"], ["b"], domain="com.example", name="foo_second"),
        helper.make_node("Bar", ["b"], ["c"], domain="com.example", name="bar_first"),
        helper.make_node("NoSuchOnnxOp", ["c"], ["d"], name="std_first"),
        helper.make_node("Relu", ["d"], ["y"], name="relu"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    model = _model(nodes, [x], [y], opsets=(("", 17), ("com.example", 3)))
    with pytest.raises(tm.UnsupportedOpError) as info:
        tm.load(model, backend="numpy")
    message = str(info.value)
    assert "3 unsupported op(s)" in message
    assert "com.example::Foo (opset 3), first at node 'foo_first'" in message
    assert "com.example::Bar (opset 3), first at node 'bar_first'" in message
    assert "ai.onnx::NoSuchOnnxOp (opset 17), first at node 'std_first'" in message
    assert "foo_second" not in message and "Relu" not in message
    assert set(info.value.missing) == {
        ("com.example", "Foo", 3),
        ("com.example", "Bar", 3),
        ("", "NoSuchOnnxOp", 17),
    }


def test_unsupported_op_inside_subgraph():
    then = helper.make_graph(
        [helper.make_node("Baz", ["x"], ["t"], domain="com.example", name="inner_baz")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])],
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch")
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    model = _model([node], [c, x], [y], opsets=(("", 17), ("com.example", 1)))
    with pytest.raises(
        tm.UnsupportedOpError, match=r"com\.example::Baz \(opset 1\), first at node 'inner_baz'"
    ):
        tm.load(model, backend="numpy")


@pytest.mark.parametrize(
    "feeds, pattern",
    [
        (
            {"x": np.zeros((2, 3), np.float32), "z": np.zeros(1, np.float32)},
            r"unknown input\(s\) \['z'\].*takes \['x'\]",
        ),
        ({}, r"missing input\(s\) \['x'\].*x: float32 \[batch, 3\]"),
        ({"x": np.zeros((2, 3), np.int64)}, r"input 'x' has dtype int64, expected float32"),
        ({"x": np.zeros((2, 3, 1), np.float32)}, r"input 'x' has rank 3 .*expected rank 2 \[batch, 3\]"),
        ({"x": np.zeros((2, 4), np.float32)}, r"input 'x' has shape \[2, 4\], expected \[batch, 3\]"),
    ],
    ids=["unknown-feed", "missing-feed", "wrong-dtype", "wrong-rank", "wrong-dim"],
)
def test_input_errors_name_the_input(feeds, pattern):
    model = tm.load(_relu_model(), backend="numpy")
    with pytest.raises(tm.InputError, match=pattern):
        model(feeds)


def test_good_feed_runs():
    model = tm.load(_relu_model(), backend="numpy")
    x = np.array([[-1, 0, 2], [3, -4, 5]], np.float32)
    np.testing.assert_array_equal(np.asarray(model({"x": x})["y"]), np.maximum(x, 0))


def test_corrupt_file(tmp_path):
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(b"\x00not an onnx model\xff" * 16)
    with pytest.raises(tm.ModelLoadError, match="corrupt.onnx"):
        tm.load(path, backend="numpy")


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_truncated_file(tmp_path, fraction):
    data = _matmul_model().SerializeToString()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(tm.ModelLoadError, match="truncated.onnx"):
        tm.load(path, backend="numpy")


def test_empty_and_missing_files(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(tm.ModelLoadError, match="empty.onnx"):
        tm.load(tmp_path / "empty.onnx", backend="numpy")
    with pytest.raises(tm.ModelLoadError, match="absent.onnx"):
        tm.load(tmp_path / "absent.onnx", backend="numpy")


def test_corrupt_bytes():
    with pytest.raises(tm.ModelLoadError, match="<bytes>"):
        tm.load(b"\x00\x01garbage" * 8, backend="numpy")


def test_missing_external_data(tmp_path):
    path = tmp_path / "external.onnx"
    onnx.save_model(
        _matmul_model(), str(path), save_as_external_data=True, location="weights.bin", size_threshold=0
    )
    model = tm.load(path, backend="numpy")  # loads while the data file is there
    assert [i.name for i in model.inputs] == ["x"]
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(tm.ModelLoadError) as info:
        tm.load(path, backend="numpy")
    assert "external.onnx" in str(info.value) and "weights.bin" in str(info.value)
