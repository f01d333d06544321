"""If, Loop and Scan against onnxruntime on both backends, on the eager and the compiled path."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from transmuter_mlx.converters.model import load

BACKENDS = ["mlx", "torch"]
F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, opset=17, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _check(model, backend, feeds):
    """Our outputs match onnxruntime's; returns our model so the test can look at its signatures."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    expected = dict(zip(names, sess.run(None, feeds)))
    ours = load(model, backend=backend)
    got = ours(feeds)
    for n in names:
        np.testing.assert_allclose(
            np.asarray(ours.backend.to_numpy(got[n])), expected[n], rtol=1e-5, atol=1e-6
        )
    return ours


def _branches():
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F, None)],
    )
    return then, other


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_on_a_flag_input_compiles_once_per_value(backend):
    """A scalar bool feed (use_cache_branch) is part of the signature, so its If is folded."""
    then, other = _branches()
    model = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        [
            helper.make_tensor_value_info("x", F, [3]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", F, [3])],
    )
    ours = load(model, backend=backend)
    for x in (np.array([1.0, 2.0, 3.0], np.float32), np.array([-1.0, 0.5, 4.0], np.float32)):
        for cond in (True, False):
            want = x + x if cond else x * x
            got = ours.backend.to_numpy(ours({"x": x, "c": np.array(cond)})["y"])
            np.testing.assert_allclose(got, want, rtol=1e-6)
    assert list(ours.signatures().values()) == [True, True]


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_on_a_computed_condition_runs_eagerly(backend):
    then, other = _branches()
    zero = helper.make_tensor("zero", F, [], [0.0])
    model = _model(
        [
            helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        ],
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("y", F, [3])],
        initializers=[zero],
    )
    for x in (np.array([1.0, 2.0, 3.0], np.float32), np.array([-1.0, -2.0, 0.5], np.float32)):
        ours = _check(model, backend, {"x": x})
        assert list(ours.signatures().values()) == [False]


@pytest.mark.parametrize("backend", BACKENDS)
def test_if_on_a_folded_condition_stays_compiled(backend):
    """The condition comes from the input's shape; the branches read ``x`` from the outer scope."""
    then, other = _branches()
    two = helper.make_tensor("two", TensorProto.INT64, [], [2])
    model = _model(
        [
            helper.make_node("Size", ["x"], ["n"]),
            helper.make_node("Greater", ["n", "two"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
            helper.make_node("Neg", ["y"], ["z"]),
        ],
        [helper.make_tensor_value_info("x", F, ["n"])],
        [helper.make_tensor_value_info("z", F, ["n"])],
        initializers=[two],
    )
    ours = load(model, backend=backend)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in (np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32), np.array([7, 8], np.float32)):
        got = ours.backend.to_numpy(ours({"x": x})["z"])  # the second call replays the same signature
        np.testing.assert_allclose(got, sess.run(None, {"x": x})[0])
    assert list(ours.signatures().values()) == [True, True]


def _loop_body(cond_from_body: bool):
    """acc += x * i; emits acc each step; optionally stops once acc exceeds 10 (a device condition)."""
    nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Mul", ["x", "fi"], ["xi"]),
        helper.make_node("Add", ["acc_in", "xi"], ["acc_out"]),
        helper.make_node("Identity", ["acc_out"], ["scan"]),
    ]
    if cond_from_body:
        nodes += [
            helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "ten"], ["c_out"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    return helper.make_graph(
        nodes,
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", F, [2]),
         helper.make_tensor_value_info("scan", F, [2])],
    )  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cond_from_body", [False, True])
def test_loop(backend, cond_from_body):
    ten = helper.make_tensor("ten", F, [], [10.0])
    trip = helper.make_tensor("trip", TensorProto.INT64, [], [5])
    cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
    model = _model(
        [
            helper.make_node(
                "Loop", ["trip", "cond", "acc0"], ["acc", "steps"], body=_loop_body(cond_from_body)
            )
        ],
        [helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("acc0", F, [2])],
        [helper.make_tensor_value_info("acc", F, [2]), helper.make_tensor_value_info("steps", F, ["T", 2])],
        initializers=[ten, trip, cond],
    )
    feeds = {"x": np.array([1.0, 0.5], np.float32), "acc0": np.zeros(2, np.float32)}
    ours = _check(model, backend, feeds)
    # a fixed trip count keeps the loop compiled; a condition computed on the device needs eager mode
    assert list(ours.signatures().values()) == [not cond_from_body]


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_reverse_and_axes(backend):
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "x_t"], ["y_t"]),
        ],
        "body",
        [helper.make_tensor_value_info("s_in", F, [2]), helper.make_tensor_value_info("x_t", F, [2])],
        [helper.make_tensor_value_info("s_out", F, [2]), helper.make_tensor_value_info("y_t", F, [2])],
    )
    model = _model(
        [helper.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1, scan_input_axes=[1],
                          scan_input_directions=[1], scan_output_axes=[-1])],
        [helper.make_tensor_value_info("s0", F, [2]), helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("s", F, [2]), helper.make_tensor_value_info("y", F, [2, 4])],
    )  # fmt: skip
    feeds = {"s0": np.array([1.0, -1.0], np.float32), "x": np.arange(8, dtype=np.float32).reshape(2, 4)}
    ours = _check(model, backend, feeds)
    assert list(ours.signatures().values()) == [True]
