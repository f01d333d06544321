"""A loaded model holds each weight once: the device copy, with the host value a view of it (mlx, and
torch on the CPU), and no copy left in the ONNX proto it read. Outputs are checked against onnxruntime."""

from __future__ import annotations

import weakref
from pathlib import Path

import numpy as np
import onnx
import pytest

import transmuter_mlx as tm
from tests.fixtures import TINY_BERT, build
from transmuter_mlx.converters.backends.torch import _ONEDNN_LINEAR

ort = pytest.importorskip("onnxruntime")


def _feeds(rows: int = 2, length: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 90, (rows, length)).astype(np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def _large(model: tm.Model) -> dict[str, np.ndarray]:
    return {n: v for n, v in model.program.initializers.items() if isinstance(v, np.ndarray) and v.size >= 1024}


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_host_weights_are_views_of_the_device_copies(backend):
    path = build(TINY_BERT) / "onnx" / "model.onnx"
    model = tm.load(str(path), backend=backend)
    large = _large(model)
    assert large, "the fixture has weights of 1024 values or more"
    B = model.backend
    proto = onnx.load(str(path))
    for name, host in large.items():
        device = model.program.device_constants[(name, B.name)]
        assert not host.flags.owndata and np.shares_memory(host, B.host_view(device)), name
        if name in model.program.device_only:  # the device's own layout alone: a zero-strided stand-in on the host
            assert not any(host.strides)
            want = onnx.numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == name))
            np.testing.assert_array_equal(B.to_numpy(device), want)
    # torch on x86-64 holds its linear layers' weights blocked for oneDNN alone, the rest as views
    assert bool(model.program.device_only) == (backend == "torch" and _ONEDNN_LINEAR)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for feeds in (_feeds(2, 7), _feeds(3, 5)):  # a second signature reads the same device weights
        got = B.to_numpy(model(feeds)["last_hidden_state"])
        np.testing.assert_allclose(got, session.run(["last_hidden_state"], feeds)[0], rtol=1e-4, atol=1e-5)


def test_a_callers_proto_keeps_its_weights():
    proto = onnx.load(str(build(TINY_BERT) / "onnx" / "model.onnx"))
    count = len(proto.graph.initializer)
    model = tm.load(proto)
    assert len(proto.graph.initializer) == count and count > 0
    assert "last_hidden_state" in model(_feeds())


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_a_subgraph_reads_its_outer_graphs_weights_without_copying_them(backend, monkeypatch):
    """An If branch that reads a weight of the main graph (an optimum merged decoder reads them all from its
    branches) gets the one device copy: nothing is converted again at later calls."""
    h = onnx.helper
    weight = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)

    def branch(name: str, scale: float) -> onnx.GraphProto:
        return h.make_graph(
            [h.make_node("MatMul", ["x", "W"], [f"{name}_m"]),
             h.make_node("Mul", [f"{name}_m", f"{name}_s"], [f"{name}_y"])],
            name, [], [h.make_tensor_value_info(f"{name}_y", onnx.TensorProto.FLOAT, None)],
            [h.make_tensor(f"{name}_s", onnx.TensorProto.FLOAT, [], [scale])])

    graph = h.make_graph(
        [h.make_node("If", ["flag"], ["y"], then_branch=branch("then", 2.0), else_branch=branch("else", 3.0))],
        "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, 64]),
              h.make_tensor_value_info("flag", onnx.TensorProto.BOOL, [1])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(weight, "W")])
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    model = tm.load(proto, backend=backend)
    converted = []
    asarray = model.backend.asarray
    monkeypatch.setattr(model.backend, "asarray", lambda x, *a, **k: (
        converted.append(np.shape(x)), asarray(x, *a, **k))[1])
    for rows in (2, 3, 4):  # a new signature each call: each is planned, reading the branch's weight
        feeds = {"x": np.ones((rows, 64), np.float32) * rows, "flag": np.array([rows % 2 == 0])}
        got = model.backend.to_numpy(model(feeds)["y"])
        np.testing.assert_allclose(got, session.run(["y"], feeds)[0], rtol=1e-5, atol=1e-4)
    assert (64, 64) not in converted[1:] and converted.count((64, 64)) <= 1, converted


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_a_linear_weight_is_held_transposed(backend):
    """A weight that only MatMuls read as their right operand is held (N, K) and read transposed (``B.matmul_weight``,
    as nn.Linear and mlx-lm hold theirs), or blocked for oneDNN alone (torch on x86-64: the host value a zero-strided
    stand-in); one that another op also reads keeps its own layout. The host value is still a view of the one device
    copy, and the outputs are onnxruntime's."""
    h = onnx.helper
    rng = np.random.default_rng(0)
    w, e = rng.standard_normal((64, 96)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    graph = h.make_graph(
        [h.make_node("MatMul", ["x", "W"], ["y"]), h.make_node("MatMul", ["x", "E"], ["z"]),
         h.make_node("Relu", ["E"], ["r"])],
        "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, 3, 64])],
        [h.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("y", "z", "r")],
        [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(e, "E")])
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    model = tm.load(proto, backend=backend)
    B = model.backend
    strides = {}
    for name, host in (("W", w), ("E", e)):
        view = B.host_view(model.program.device_constants[(name, B.name)])
        assert view.shape == host.shape and np.shares_memory(view, model.program.initializers[name])
        strides[name] = view.strides
    blocked = backend == "torch" and _ONEDNN_LINEAR
    # W held (96, 64), or blocked; E, which Relu reads too, as it is
    assert strides == {"W": (0, 0) if blocked else (4, 4 * 64), "E": (4 * 32, 4)}
    np.testing.assert_array_equal(B.to_numpy(model.program.device_constants[("W", B.name)]), w)
    feeds = {"x": rng.standard_normal((2, 3, 64)).astype(np.float32)}
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for _ in range(2):
        for r, got in zip(ref, model(feeds).values()):
            np.testing.assert_allclose(B.to_numpy(got), r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_a_product_computed_on_the_host_reads_a_device_only_weight(backend):
    """A linear layer's weight held on the device alone (oneDNN's layout on torch) still serves a product the
    planning walk computes on the host (its left operand a constant too) and a vector's product; onnxruntime's
    outputs."""
    h = onnx.helper
    rng = np.random.default_rng(1)
    w, c = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((5, 64)).astype(np.float32)
    graph = h.make_graph(
        [h.make_node("MatMul", ["C", "W"], ["cw"]), h.make_node("MatMul", ["x", "W"], ["xw"]),
         h.make_node("Add", ["xw", "cw"], ["y"]), h.make_node("MatMul", ["v", "W"], ["vw"])],
        "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, 5, 64]),
              h.make_tensor_value_info("v", onnx.TensorProto.FLOAT, [64])],
        [h.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("y", "vw")],
        [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(c, "C")])
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    model = tm.load(proto, backend=backend)
    assert ("W" in model.program.device_only) == (backend == "torch" and _ONEDNN_LINEAR)
    feeds = {"x": rng.standard_normal((2, 5, 64)).astype(np.float32), "v": rng.standard_normal(64).astype(np.float32)}
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for _ in range(2):  # the planning walk, then the replay
        for r, got in zip(ref, model(feeds).values()):
            np.testing.assert_allclose(model.backend.to_numpy(got), r, rtol=1e-5, atol=1e-4)


def test_embedded_weights_are_read_apart_before_the_check(monkeypatch):
    """A file with its weights inside: they are taken into numpy before the ONNX checker runs, which then checks a
    copy without them (it serialized the whole proto: 1.8 s and 650 MB more at SmolLM2-135M), and the model's
    outputs are still onnxruntime's."""
    path = build(TINY_BERT) / "onnx" / "model.onnx"
    checked = []
    check = onnx.checker.check_model
    monkeypatch.setattr(onnx.checker, "check_model", lambda proto, *a, **k: (checked.append(proto.ByteSize()),
                                                                               check(proto, *a, **k))[1])
    model = tm.load(str(path), backend="torch")
    weights = sum(v.nbytes for v in _large(model).values())
    assert len(checked) == 1 and checked[0] < path.stat().st_size - weights
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = _feeds()
    np.testing.assert_allclose(model.backend.to_numpy(model(feeds)["last_hidden_state"]),
                               session.run(["last_hidden_state"], feeds)[0], rtol=1e-4, atol=1e-5)


def _unary_chain(*ops: str) -> tm.Model:
    """A torch model of ``x`` (4, 8) through the unary ``ops`` in turn, to ``y``."""
    h = onnx.helper
    names = ["x", *(f"v{i}" for i in range(len(ops) - 1)), "y"]
    nodes = [h.make_node(op, [a], [b]) for op, a, b in zip(ops, names, names[1:])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    return tm.load(h.make_model(graph, opset_imports=[h.make_opsetid("", 18)]), backend="torch")


def _outputs_of(B, name: str, monkeypatch) -> list[weakref.ref]:
    """Weak references to every array ``B.<name>`` makes from now on."""
    made, fn = [], getattr(B, name)
    monkeypatch.setattr(B, name, lambda x: (made.append(weakref.ref(out := fn(x))), out)[1])
    return made


def test_a_signature_keeps_none_of_its_planning_walks_values(monkeypatch):
    """After its first call a signature holds its replay, not the activations of the walk that planned it (the
    steps kept for index checks held them: BGE-base's 32x128 signature kept 2.6 GB on torch)."""
    import gc

    model = _unary_chain("Exp", "Neg")
    made = _outputs_of(model.backend, "exp", monkeypatch)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    y = model({"x": x})["y"]
    gc.collect()
    assert len(made) == 1 and made[0]() is None  # the walk's Exp output is gone; the signature stays
    np.testing.assert_allclose(model.backend.to_numpy(y), -np.exp(x), rtol=1e-6)
    assert len(model.signatures()) == 1


def test_the_planning_walk_frees_a_value_after_its_last_reader(monkeypatch):
    """On an eager backend the walk that plans a signature keeps a stand-in of a value's shape and dtype once its
    last reader has run (as the replay frees it), not the value: by the time Abs runs, Exp's output is gone."""
    import gc

    model = _unary_chain("Exp", "Neg", "Abs")
    B, alive = model.backend, []
    made, absolute = _outputs_of(B, "exp", monkeypatch), B.abs

    def abs_checking(x):
        gc.collect()
        alive.append(made[0]() is not None)
        return absolute(x)

    monkeypatch.setattr(B, "abs", abs_checking)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    for _ in range(2):  # the planning walk, then the replay
        np.testing.assert_allclose(B.to_numpy(model({"x": x})["y"]), np.exp(x), rtol=1e-6)
    assert alive[0] is False


def _with_external_data(folder) -> Path:
    """The tiny BERT saved in ``folder`` with its weights in ``model.onnx_data``."""
    path = folder / "model.onnx"
    onnx.save(onnx.load(str(build(TINY_BERT) / "onnx" / "model.onnx")), str(path), save_as_external_data=True,
              all_tensors_to_one_file=True, location="model.onnx_data", size_threshold=1024)
    return path


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_external_weights_are_mapped_from_their_file_and_copied_once(backend, tmp_path):
    """Weights in an external data file are the file's pages (an ndarray over an ``np.memmap``), not a copy read into
    memory: each is copied once, into its device array (the matmul weights transposed on the way). Outputs are
    onnxruntime's."""
    from transmuter_mlx.converters.model import read_model

    path = _with_external_data(tmp_path)
    _, _, weights = read_model(path, weights_apart=True)
    # a plain ndarray: np.asarray gives back the same object, which ops key their caches by
    assert weights and all(type(w) is np.ndarray and np.asarray(w) is w and isinstance(w.base, np.memmap)
                           and not w.flags.writeable for w in weights.values())
    assert {w.base.filename for w in weights.values()} == {str((tmp_path / "model.onnx_data").resolve())}
    model = tm.load(str(path), backend=backend)
    B = model.backend
    for name, mapped in weights.items():  # the host value is a view of the device copy now, not of the file
        host = model.program.initializers[name]
        assert np.shares_memory(host, B.host_view(model.program.device_constants[(name, B.name)])), name
        if name in model.program.device_only:  # a stand-in: the values are the device's (oneDNN's layout)
            np.testing.assert_array_equal(B.to_numpy(model.program.device_constants[(name, B.name)]), mapped)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = _feeds()
    np.testing.assert_allclose(B.to_numpy(model(feeds)["last_hidden_state"]),
                               session.run(["last_hidden_state"], feeds)[0], rtol=1e-4, atol=1e-5)


def test_a_truncated_external_data_file_is_named(tmp_path):
    path = _with_external_data(tmp_path)
    data = tmp_path / "model.onnx_data"
    data.write_bytes(data.read_bytes()[:-100])  # the last weight is 25 values short
    with pytest.raises(tm.ModelLoadError, match=r"model.onnx_data is truncated \(tensor '"):
        tm.load(str(path))
