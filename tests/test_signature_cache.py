"""The per-signature cache of a Model: least recently used signatures are dropped beyond
``max_signatures`` (memory stays flat over many shapes), and the first call of a signature is its
caller's own (no other thread receives its outputs). Numbers are checked against onnxruntime."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import transmuter_mlx as tm
from transmuter_mlx.converters.graph import Executable

BACKENDS = ("mlx", "torch")


def _small_model() -> onnx.ModelProto:
    """An embedding, a matmul and a softmax over a (batch, length) id input: a few ops, cheap to plan."""
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((50, 16)).astype(np.float32), "table")
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("MatMul", ["e", "w"], ["m"]),
        helper.make_node("Softmax", ["m"], ["y"], axis=-1),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "length"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "length", 8])
    graph = helper.make_graph(nodes, "small", [ids], [y], [table, w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort(proto: onnx.ModelProto, feeds: dict) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _run(model: tm.Model, ids: np.ndarray) -> np.ndarray:
    return np.asarray(model.backend.to_numpy(model({"ids": ids})["y"]))


def _resident_mb() -> float:
    """Resident memory after returning freed heap pages to the system (glibc), in MB."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.parametrize("backend", BACKENDS)
def test_least_recently_used_signatures_are_dropped(backend: str) -> None:
    proto = _small_model()
    model = tm.load(proto, backend=backend, max_signatures=3)
    shapes = [(1, 2), (1, 3), (2, 2), (1, 2), (3, 1)]  # (1, 2) is used again before (3, 1) arrives
    for shape in shapes:
        ids = np.arange(np.prod(shape)).reshape(shape) % 50
        np.testing.assert_allclose(_run(model, ids), _ort(proto, {"ids": ids}), atol=1e-6)
    kept = [dict(k)["ids"][0] for k in model.signatures()]
    assert kept == [(2, 2), (1, 2), (3, 1)]  # (1, 3), the least recently used, went


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_stays_flat_over_1000_calls_of_varied_shapes(backend: str) -> None:
    proto = _small_model()
    model = tm.load(proto, backend=backend, max_signatures=4)
    rng = np.random.default_rng(1)
    marks = {}
    for i in range(1000):
        ids = rng.integers(0, 50, (1 + i % 3, 1 + (i * 7) % 61))  # 183 shapes, each a new plan past the cap
        out = _run(model, ids)
        if i % 250 == 0:
            np.testing.assert_allclose(out, _ort(proto, {"ids": ids}), atol=1e-6)
        if i in (299, 999):
            marks[i] = _resident_mb()
    assert len(model.signatures()) == 4
    assert marks[999] - marks[299] < 8, marks  # MB: flat once the caches are warm


def test_max_signatures_is_checked() -> None:
    with pytest.raises(ValueError, match="max_signatures must be a positive integer, got 0"):
        tm.load(_small_model(), backend="numpy", max_signatures=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_first_call_is_its_callers_own(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread A plans a signature; right after it is stored, thread B calls the same signature with other
    ids and finishes first. Each gets the outputs of its own ids (before: B could get A's)."""
    proto = _small_model()
    model = tm.load(proto, backend=backend)
    a_ids, b_ids = np.array([[1, 2, 3]]), np.array([[7, 8, 9]])
    b_done = threading.Event()
    results: dict[str, np.ndarray] = {}
    original = Executable.check_on_host

    def check_then_let_b_run(self, *args, **kwargs):  # A, between storing the signature and its result
        if threading.current_thread().name == "A" and not b_done.is_set():
            thread_b = threading.Thread(target=lambda: results.__setitem__("B", _run(model, b_ids)), name="B")
            thread_b.start()
            thread_b.join(30)
            b_done.set()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Executable, "check_on_host", check_then_let_b_run)
    thread_a = threading.Thread(target=lambda: results.__setitem__("A", _run(model, a_ids)), name="A")
    thread_a.start()
    thread_a.join(60)
    assert b_done.is_set()
    np.testing.assert_allclose(results["A"], _ort(proto, {"ids": a_ids}), atol=1e-6)
    np.testing.assert_allclose(results["B"], _ort(proto, {"ids": b_ids}), atol=1e-6)


def test_on_reuse_traces_a_signature_at_its_second_call() -> None:
    """A step of a growing cache is planned untraced (no compile for a shape used once) and traced when the
    shape comes again; both give onnxruntime's numbers."""
    proto = _small_model()
    model = tm.load(proto, backend="mlx")
    ids = np.array([[3, 1, 4, 1, 5]])
    expected = _ort(proto, {"ids": ids})
    states = []
    for _ in range(3):
        out = np.asarray(model({"ids": ids}, compile="on_reuse")["y"])
        np.testing.assert_allclose(out, expected, atol=1e-6)
        states.append(list(model.signatures().values())[0])
    assert states == [False, True, True]


LAYERS_WITH_OWN_SCALARS = """
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort
import transmuter_mlx as tm

rng = np.random.default_rng(0)
nodes, inits, x = [], [], "x"
for i in range(int(sys.argv[1])):  # a matmul, then Mul and Add (one fused kernel) of this layer's own scalars, Tanh
    inits += [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{i}"),
              numpy_helper.from_array(np.array(1.0 + i / 7, np.float32), f"scale{i}"),
              numpy_helper.from_array(np.array(i / 5, np.float32), f"shift{i}")]
    nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]), helper.make_node("Mul", [f"m{i}", f"scale{i}"], [f"s{i}"]),
              helper.make_node("Add", [f"s{i}", f"shift{i}"], [f"a{i}"]), helper.make_node("Tanh", [f"a{i}"], [f"t{i}"])]
    x = f"t{i}"
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, 8])], inits)
proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
m = tm.load(proto, backend="mlx")
for _ in range(2):
    np.testing.assert_allclose(np.asarray(m(feeds)[x]), want, rtol=1e-5, atol=1e-5)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MLX builds CPU kernels with g++ on Linux only")
def test_layers_with_their_own_scalars_share_compiled_kernels(tmp_path) -> None:
    """``mx.compile`` writes a captured one-element array's value into its fused CPU kernel's source, so layers whose
    scalars differ each built a C++ kernel of their own (SmolLM2-135M's q8 export: 484, 93 s of a cold first call).
    Fed as arguments of the replay, they share theirs: 3 layers and 6 build as many kernels (MLX's kernel cache,
    counted in a temporary folder for each run; before, 12 and 15)."""
    pytest.importorskip("onnxruntime")
    counts = []
    for layers in (3, 6):
        folder = tmp_path / str(layers)
        folder.mkdir()
        env = {**os.environ, "TMPDIR": str(folder)}
        subprocess.run([sys.executable, "-c", LAYERS_WITH_OWN_SCALARS, str(layers)], env=env, check=True, timeout=300)
        counts.append(len(list(folder.rglob("*.so"))))
    assert counts[0] > 0 and counts[0] == counts[1], counts


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("compile_mode", [True, False, "on_reuse"])
def test_a_dropped_model_frees_its_signatures_at_once(backend, compile_mode):
    """A model and its planned signatures (which hold its weights) are freed when the last reference goes, not
    at Python's next cyclic collection: an Executable kept its bound replay, a reference cycle that held a dropped
    pipeline's 2.4 GB (Qwen3-0.6B int4 on mlx) until the collector ran. The outputs stay onnxruntime's."""
    import gc
    import weakref

    proto = _small_model()
    feeds = {"ids": np.array([[1, 7, 3]], np.int64)}
    model = tm.load(proto, backend=backend, compile=compile_mode)
    for _ in range(3):  # planned, then replayed (traced on mlx: at once, or at the second call)
        got = np.asarray(model.backend.to_numpy(model(feeds)["y"]))
    np.testing.assert_allclose(got, _ort(proto, feeds), rtol=1e-5, atol=1e-6)
    (exe,) = model._executables.values()
    refs = [weakref.ref(model), weakref.ref(exe)]
    gc.collect()
    gc.disable()
    try:
        del model, exe
        assert [r() is None for r in refs] == [True, True]
    finally:
        gc.enable()
