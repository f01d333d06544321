"""The eager replay (``converters/replay.py`` and ``Executable._build_replay``): the written-out function, its
shortcuts, repeated steps run once, and errors that still name the node.

Every case runs a graph twice on an eager backend (torch, and mlx with ``compile=False``): the first call is the
planning walk, the second the written replay; both are compared with onnxruntime on the same graph.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import transmuter_mlx as tm
from transmuter_mlx.converters.errors import OpError

ort = pytest.importorskip("onnxruntime")

EAGER = [("torch", True), ("mlx", False)]  # (backend, compile): replays that run the written function
rng = np.random.default_rng(0)


def const(name: str, value, dtype=np.int64) -> onnx.NodeProto:
    return oh.make_node("Constant", [], [name], name=f"c_{name}", value=numpy_helper.from_array(np.asarray(value, dtype)))


def make(nodes, feeds: dict[str, np.ndarray], outputs: list[str]) -> onnx.ModelProto:
    ins = [oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()]
    outs = [oh.make_empty_tensor_value_info(n) for n in outputs]  # types from inference
    return oh.make_model(oh.make_graph(nodes, "g", ins, outs), opset_imports=[oh.make_opsetid("", 18)])


def load_twice(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str, compile: bool):
    """The model, its one executable, and the outputs of the planning walk and of the replay, after checking both
    against onnxruntime (float32, 1e-6)."""
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    m = tm.load(proto, backend=backend, compile=compile)
    runs = [m(feeds), m(feeds)]
    for out in runs:
        for r, g in zip(ref, out.values()):
            got = np.asarray(m.backend.to_numpy(g))
            assert got.shape == r.shape and got.dtype == r.dtype, backend
            np.testing.assert_allclose(got, r, rtol=1e-6, atol=1e-6, err_msg=backend)
    (exe,) = m._executables.values()
    return m, exe


def shape_ops_graph():
    """Reshape, Unsqueeze, Squeeze, Flatten, Expand, Cast, Identity between element-wise ops; a Transpose and a
    Concat of two outputs (an op that returns a tuple: Split)."""
    feeds = {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)}
    nodes = [
        const("shape", [6, 4]), const("axes", [1]), const("expand", [2, 6, 5, 4]),
        oh.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        oh.make_node("Relu", ["r"], ["a"], name="relu"),
        oh.make_node("Unsqueeze", ["a", "axes"], ["u"], name="unsqueeze"),
        oh.make_node("Expand", ["u", "expand"], ["e"], name="expand"),
        oh.make_node("Cast", ["e"], ["c"], name="cast", to=TensorProto.DOUBLE),
        oh.make_node("Identity", ["c"], ["i"], name="identity"),
        oh.make_node("Flatten", ["i"], ["f"], name="flatten", axis=2),
        oh.make_node("Split", ["x"], ["s1", "s2"], name="split", axis=2, num_outputs=2),
        oh.make_node("Transpose", ["s2"], ["t"], name="transpose", perm=[0, 2, 1]),
        oh.make_node("Squeeze", ["u", "axes"], ["q"], name="squeeze"),
        oh.make_node("Sub", ["q", "r"], ["d"], name="sub"),
    ]
    return make(nodes, feeds, ["f", "s1", "t", "d"]), feeds


@pytest.mark.parametrize(("backend", "compile"), EAGER)
def test_written_replay_matches_onnxruntime(backend, compile):
    proto, feeds = shape_ops_graph()
    m, exe = load_twice(proto, feeds, backend, compile)
    assert exe._code is not None  # the second call ran the written function
    forms = {step.spec.op_type: exe.shortcuts.get(i, ("op",))[0] for i, (step, _) in enumerate(exe.steps)}
    assert forms == {"Reshape": "reshape", "Relu": "op", "Unsqueeze": "reshape", "Expand": "broadcast_to",
                     "Cast": "astype", "Identity": "identity", "Flatten": "reshape", "Split": "op",
                     "Transpose": "op", "Squeeze": "reshape", "Sub": "op"}
    walked = exe._walk(*(m._to_backend(feeds[n]) for n in exe.feed_names))
    written = exe._code(*(m._to_backend(feeds[n]) for n in exe.feed_names))
    for a, b in zip(walked, written):
        np.testing.assert_array_equal(m.backend.to_numpy(a), m.backend.to_numpy(b))


@pytest.mark.parametrize(("backend", "compile"), EAGER)
def test_a_cast_to_the_dtype_it_has_is_the_value_itself(backend, compile):
    """T5's exports cast float32 scores to float32 before each softmax: the replay passes the value on, no call; a
    Cast to another dtype stays one."""
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32)}
    nodes = [oh.make_node("Relu", ["x"], ["r"], name="relu"),
             oh.make_node("Cast", ["r"], ["same"], name="cast_same", to=TensorProto.FLOAT),
             oh.make_node("Cast", ["r"], ["wide"], name="cast_wide", to=TensorProto.DOUBLE),
             oh.make_node("Neg", ["same"], ["y"], name="neg")]
    _, exe = load_twice(make(nodes, feeds, ["y", "wide"]), feeds, backend, compile)
    forms = {step.name: exe.shortcuts.get(i, ("op",))[0] for i, (step, _) in enumerate(exe.steps)}
    assert forms == {"relu": "op", "cast_same": "identity", "cast_wide": "astype", "neg": "op"}
    assert exe._code.source.count("astype(") == 1


@pytest.mark.parametrize(("backend", "compile"), EAGER)
def test_a_node_repeated_per_layer_runs_once(backend, compile):
    """Two Wheres on one mask with equal constants of other names (optimum writes one per layer)."""
    feeds = {"keep": rng.random((2, 5)) > 0.3, "x": rng.standard_normal((2, 5)).astype(np.float32)}
    nodes = []
    for layer in (0, 1):
        nodes += [const(f"zero{layer}", 0.0, np.float32), const(f"low{layer}", -1e9, np.float32),
                  oh.make_node("Where", ["keep", f"zero{layer}", f"low{layer}"], [f"m{layer}"], name=f"where{layer}"),
                  oh.make_node("Add", ["x" if layer == 0 else "y0", f"m{layer}"], [f"y{layer}"], name=f"add{layer}")]
    nodes += [const("other", -2e9, np.float32),  # a different constant: a different step
              oh.make_node("Where", ["keep", "zero0", "other"], ["m2"], name="where2"),
              oh.make_node("Add", ["y1", "m2"], ["y2"], name="add2")]
    _, exe = load_twice(make(nodes, feeds, ["y2"]), feeds, backend, compile)
    assert sorted(s.spec.op_type for s, _ in exe.steps) == ["Add", "Add", "Add", "Where", "Where"]


@pytest.mark.parametrize(("backend", "compile"), EAGER)
def test_a_failing_node_is_named(backend, compile, monkeypatch):
    feeds = {"x": rng.standard_normal((3,)).astype(np.float32)}
    proto = make([oh.make_node("Exp", ["x"], ["e"], name="exp"), oh.make_node("Neg", ["e"], ["y"], name="neg")],
                 feeds, ["y"])
    m, exe = load_twice(proto, feeds, backend, compile)

    def broken(x):
        raise RuntimeError("device lost")

    monkeypatch.setattr(m.backend, "negative", broken)
    with pytest.raises(OpError, match=r"node 'neg' \[ai.onnx::Neg v\d+\] with inputs \(.*\[3\]\): RuntimeError: device lost"):
        m(feeds)


@pytest.mark.parametrize(("backend", "compile"), EAGER)
def test_a_node_the_walk_recovers_keeps_the_walk(backend, compile, monkeypatch):
    """A backend whose ``retry_place`` recovers from an error (mlx puts a float64 op on the CPU stream): the walk
    runs instead of the written function, from then on."""
    feeds = {"x": rng.standard_normal((3,)).astype(np.float32)}
    proto = make([oh.make_node("Exp", ["x"], ["e"], name="exp"), oh.make_node("Neg", ["e"], ["y"], name="neg")],
                 feeds, ["y"])
    m, exe = load_twice(proto, feeds, backend, compile)
    B, negative, place = m.backend, m.backend.negative, m.backend.retry_place
    retried = []

    class Place:
        def __enter__(self):
            retried.append(True)

        def __exit__(self, *exc):
            return False

    def fails_outside_the_place(x):
        if not retried:
            raise ValueError("float64 is not supported here")
        return negative(x)

    monkeypatch.setattr(B, "negative", fails_outside_the_place)
    monkeypatch.setattr(B, "retry_place", lambda e: Place() if "float64" in str(e) else place(e))
    got = B.to_numpy(m(feeds)["y"])
    np.testing.assert_allclose(got, -np.exp(feeds["x"]), rtol=1e-6)
    assert retried and exe._code is None


@pytest.mark.parametrize(("backend", "compile"), EAGER)
def test_context_ops_run_with_a_fixed_context(backend, compile):
    """A context op without a subgraph (LayerNormalization, Split) is called directly with its node's ``ctx``: one
    LayerNormalization whose statistics are unread runs as the backend's kernel, one whose mean and inv_std are read
    (and one over two axes) as the op; Gelu (opset 20) runs as ``B.gelu``."""
    feeds = {"x": rng.standard_normal((2, 3, 8)).astype(np.float32)}
    w, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    w2 = rng.standard_normal((3, 8)).astype(np.float32)
    nodes = [
        const("w", w, np.float32), const("b", b, np.float32), const("w2", w2, np.float32),
        oh.make_node("LayerNormalization", ["x", "w", "b"], ["y"], name="plain", epsilon=1e-5),
        oh.make_node("LayerNormalization", ["x", "w"], ["z", "mean", "inv"], name="stats"),
        oh.make_node("LayerNormalization", ["x", "w2"], ["two"], name="two_axes", axis=-2),
        oh.make_node("Gelu", ["y"], ["g"], name="gelu"),
        oh.make_node("Split", ["g"], ["g1", "g2"], name="split", axis=2, num_outputs=2),
    ]
    proto = make(nodes, feeds, ["g1", "g2", "z", "mean", "inv", "two"])
    proto.opset_import[0].version = 20
    m, exe = load_twice(proto, feeds, backend, compile)
    forms = {step.name: exe.shortcuts.get(i, ("op",))[0] for i, (step, _) in enumerate(exe.steps)}
    assert forms == {"plain": "kernel", "stats": "op", "two_axes": "op", "gelu": "kernel", "split": "op"}
    assert "step" not in exe._code.source  # no step went through the interpreter (``stepN``: a context step)


@pytest.mark.parametrize(("backend", "compile"), EAGER)
def test_a_subgraph_reads_the_outer_scope(backend, compile):
    """An If on a host flag whose branch reads an outer device value still runs through the interpreter's step."""
    feeds = {"x": rng.standard_normal((4,)).astype(np.float32)}
    then = oh.make_graph([oh.make_node("Neg", ["e"], ["out"], name="neg")], "then", [],
                         [oh.make_tensor_value_info("out", TensorProto.FLOAT, [4])])
    other = oh.make_graph([oh.make_node("Abs", ["e"], ["out"], name="abs")], "else", [],
                          [oh.make_tensor_value_info("out", TensorProto.FLOAT, [4])])
    nodes = [oh.make_node("Exp", ["x"], ["e"], name="exp"), const("flag", True, np.bool_),
             oh.make_node("If", ["flag"], ["y"], name="if", then_branch=then, else_branch=other)]
    m, exe = load_twice(make(nodes, feeds, ["y"]), feeds, backend, compile)
    assert "step" in exe._code.source
