"""``model(feeds, last_position=[...])`` (``converters/last_position.py``): outputs at the last position of axis 1
only, against onnxruntime's full output cut to its last position; where the head allows it the product runs on
that row alone (a Slice before it), elsewhere the output is cut after the run."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import transmuter_mlx as tm
from transmuter_mlx.converters.errors import InputError

ort = pytest.importorskip("onnxruntime")

rng = np.random.default_rng(0)
BACKENDS = ["mlx", "torch"]
WIDTH, VOCAB = 8, 11


def init(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def head_model(head: list[onnx.NodeProto], extra_outputs: tuple[str, ...] = (), weight_t: bool = False,
               inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    """x (batch, length, WIDTH) -> Tanh -> ``h``; then the ``head`` nodes make ``logits`` from ``h`` and ``W``
    (WIDTH, VOCAB), or ``Wt`` (VOCAB, WIDTH) through a Transpose where ``weight_t``."""
    w = rng.standard_normal((WIDTH, VOCAB)).astype(np.float32)
    nodes = [oh.make_node("Tanh", ["x"], ["h"], name="body")]
    weights = [init("Wt", w.T.copy())] if weight_t else [init("W", w)]
    if weight_t:
        nodes.append(oh.make_node("Transpose", ["Wt"], ["W"], name="tied", perm=[1, 0]))
    outs = ["logits", *extra_outputs]
    graph = oh.make_graph(nodes + head, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "l", WIDTH])],
                          [oh.make_tensor_value_info(n, TensorProto.FLOAT, ["b", "l", None]) for n in outs],
                          initializer=weights + list(inits))
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def check(proto: onnx.ModelProto, backend: str, rewritten: bool) -> None:
    x = rng.standard_normal((2, 5, WIDTH)).astype(np.float32)
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    m = tm.load(proto, backend=backend)
    program, left = m._program_for(frozenset(["logits"]))
    assert (not left) == rewritten
    for _ in range(2):  # the planning walk, then the replay
        out = m({"x": x}, last_position=["logits"])
        got = np.asarray(m.backend.to_numpy(out["logits"]))
        assert got.shape == (2, 1, VOCAB)
        np.testing.assert_allclose(got, ref[0][:, -1:], rtol=1e-5, atol=1e-6)
        for name, r in zip([o.name for o in proto.graph.output][1:], ref[1:]):  # other outputs: whole
            np.testing.assert_allclose(np.asarray(m.backend.to_numpy(out[name])), r, rtol=1e-5, atol=1e-6)
    full = np.asarray(m.backend.to_numpy(m({"x": x})["logits"]))  # without the option: every position
    np.testing.assert_allclose(full, ref[0], rtol=1e-5, atol=1e-6)
    if rewritten:
        (product,) = [s for s in program.steps if s.spec.op_type in ("MatMul", "MatMulAdd")]
        assert product.inputs[0].endswith("::last_position")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plain_head_multiplies_the_last_row(backend):
    check(head_model([oh.make_node("MatMul", ["h", "W"], ["logits"], name="lm_head")]), backend, rewritten=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tied_head_with_a_bias_and_a_soft_cap(backend):
    """Gemma's soft cap (Div, Tanh, Mul by scalars) and a bias after a head tied to a transposed matrix."""
    head = [oh.make_node("MatMul", ["h", "W"], ["p"], name="lm_head"),
            oh.make_node("Add", ["p", "bias"], ["pb"], name="bias"),
            oh.make_node("Div", ["pb", "cap"], ["d"], name="cap_div"),
            oh.make_node("Tanh", ["d"], ["t"], name="cap_tanh"),
            oh.make_node("Mul", ["t", "cap"], ["logits"], name="cap_mul")]
    inits = [init("bias", rng.standard_normal(VOCAB).astype(np.float32)), init("cap", np.float32(3.0))]
    check(head_model(head, weight_t=True, inits=inits), backend, rewritten=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_head_not_made_of_rows_is_cut_after_the_run(backend):
    """A Softmax over the vocabulary is not among the row-wise ops known; an intermediate value that is also an
    output, or an output another node reads, must stay whole: each gives the last position of the full output."""
    softmax = [oh.make_node("MatMul", ["h", "W"], ["p"], name="lm_head"),
               oh.make_node("Softmax", ["p"], ["logits"], name="softmax", axis=-1)]
    check(head_model(softmax), backend, rewritten=False)
    shared = [oh.make_node("MatMul", ["h", "W"], ["p"], name="lm_head"),
              oh.make_node("Neg", ["p"], ["logits"], name="neg")]
    check(head_model(shared, extra_outputs=("p",)), backend, rewritten=False)
    read = [oh.make_node("MatMul", ["h", "W"], ["logits"], name="lm_head"),
            oh.make_node("Neg", ["logits"], ["q"], name="neg")]
    check(head_model(read, extra_outputs=("q",)), backend, rewritten=False)  # q needs every position


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_output_of_unknown_rank_is_cut_after_the_run(backend):
    proto = head_model([oh.make_node("MatMul", ["h", "W"], ["logits"], name="lm_head")])
    proto.graph.output[0].type.tensor_type.ClearField("shape")
    check(proto, backend, rewritten=False)


def test_an_unknown_output_is_named():
    m = tm.load(head_model([oh.make_node("MatMul", ["h", "W"], ["logits"], name="lm_head")]))
    x = rng.standard_normal((1, 3, WIDTH)).astype(np.float32)
    with pytest.raises(InputError, match=r"last_position names \['scores'\], not outputs of the model"):
        m({"x": x}, last_position=["scores"])
