"""The numpy, mlx and torch backends agree on a handful of primitives (numpy is the reference)."""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from transmuter_mlx import _blas
from transmuter_mlx.converters.backends import get_backend

DEVICE = ["mlx", "torch"]
rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 4)).astype(np.float32)
Y = rng.standard_normal((2, 3, 4)).astype(np.float32)
IDX = np.array([[2, 0], [1, 3]], dtype=np.int64)


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -c code`` in a fresh process: what the package sets up at import shows only there."""
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=True)

def _run(name: str, fn):
    B = get_backend(name)
    out = fn(B)
    if isinstance(out, list | tuple):
        return [np.asarray(B.to_numpy(o)) for o in out]
    return np.asarray(B.to_numpy(out))


CASES = {
    "add": lambda B: B.add(B.asarray(X), B.asarray(Y)),
    "divide": lambda B: B.divide(B.asarray(X), B.asarray(Y)),
    "exp": lambda B: B.exp(B.asarray(X)),
    "erf": lambda B: B.erf(B.asarray(X)),
    "gelu": lambda B: B.gelu(B.asarray(X * 3)),
    "sigmoid": lambda B: B.sigmoid(B.asarray(X)),
    "where": lambda B: B.where(B.greater(B.asarray(X), B.asarray(Y)), B.asarray(X), B.asarray(Y)),
    "sum": lambda B: B.sum(B.asarray(X), (0, 2), True),
    "mean": lambda B: B.mean(B.asarray(X), 1, False),
    "max": lambda B: B.max(B.asarray(X), -1, False),
    "argmax": lambda B: B.argmax(B.asarray(X), 1, False),
    "softmax": lambda B: B.softmax(B.asarray(X), -1),
    "logsumexp": lambda B: B.logsumexp(B.asarray(X), 2, True),
    "cumsum": lambda B: B.cumsum(B.asarray(X), 1),
    "reshape": lambda B: B.reshape(B.asarray(X), (6, 4)),
    "transpose": lambda B: B.transpose(B.asarray(X), (2, 0, 1)),
    "broadcast_to": lambda B: B.broadcast_to(B.asarray(X[:, :1]), (2, 3, 4)),
    "concatenate": lambda B: B.concatenate([B.asarray(X), B.asarray(Y)], 1),
    "split": lambda B: B.split(B.asarray(X), [1, 3], 2),
    "slice": lambda B: B.slice(B.asarray(X), (0, 2, 3), (2, 0, 0), (1, -1, -2)),
    "pad": lambda B: B.pad(B.asarray(X), [(0, 0), (1, 2), (0, 1)], 0.5),
    "take": lambda B: B.take(B.asarray(X), B.asarray(IDX), 2),
    "take_along_axis": lambda B: B.take_along_axis(B.asarray(X), B.asarray(np.argsort(X, axis=2)), 2),
    "matmul": lambda B: B.matmul(B.asarray(X), B.asarray(np.swapaxes(Y, 1, 2))),
    "einsum": lambda B: B.einsum("bij,bkj->bik", B.asarray(X), B.asarray(Y)),
    "astype": lambda B: B.astype(B.asarray(X * 10), np.int32),
    "arange": lambda B: B.arange(0, 10, 3, np.int64),
    "full": lambda B: B.full((2, 3), 1.5, np.float32),
}


@pytest.mark.parametrize("backend", DEVICE)
@pytest.mark.parametrize("case", list(CASES))
def test_primitive_matches_numpy(case, backend):
    want = _run("numpy", CASES[case])
    got = _run(backend, CASES[case])
    if isinstance(want, list):
        assert len(got) == len(want)
        pairs = list(zip(got, want))
    else:
        pairs = [(got, want)]
    for g, w in pairs:
        assert g.shape == w.shape, f"{case}: shape {g.shape} != {w.shape}"
        assert g.dtype == w.dtype, f"{case}: dtype {g.dtype} != {w.dtype}"
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=case)


@pytest.mark.parametrize("backend", ["numpy", *DEVICE])
def test_dtype_round_trip(backend):
    B = get_backend(backend)
    for dtype in (np.float32, np.float16, np.int64, np.int32, np.bool_, np.uint8):
        a = B.asarray(np.ones((2, 2), dtype=dtype))
        assert B.dtype(a) == np.dtype(dtype)
        assert B.shape(a) == (2, 2)
        assert B.to_numpy(a).dtype == np.dtype(dtype)


@pytest.mark.parametrize("backend", ["numpy", *DEVICE])
def test_start_leaves_values_unchanged(backend):
    """``start`` (mlx: async_eval) queues the work; reading the arrays afterwards gives their values."""
    B = get_backend(backend)
    a = B.matmul(B.asarray(X), B.asarray(np.swapaxes(Y, 1, 2)))
    b = B.argmax(a, -1, False)
    assert B.start(a, b) is None
    np.testing.assert_allclose(B.to_numpy(a), X @ np.swapaxes(Y, 1, 2), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(B.to_numpy(b), np.argmax(X @ np.swapaxes(Y, 1, 2), -1))


def test_mlx_compile_traces_backend_ops():
    B = get_backend("mlx")
    fn = B.compile(lambda a, b: (B.softmax(B.matmul(a, b), -1),))
    a, b = X[0], np.swapaxes(Y[0], 0, 1)
    (got,) = fn(B.asarray(a), B.asarray(b))
    np.testing.assert_allclose(B.to_numpy(got), get_backend("numpy").softmax(a @ b, -1), rtol=1e-5, atol=1e-6)


def test_mlx_matmul_with_loaded_blas():
    """Whatever BLAS transmuter_mlx gave MLX (docs/performance.md), its matmul matches numpy."""
    from transmuter_mlx._blas import blas_info

    info = blas_info()
    if sys.platform.startswith("linux"):
        assert info["status"] != "not set up"  # importing transmuter_mlx ran the set-up
    B = get_backend("mlx")
    a = rng.standard_normal((96, 200)).astype(np.float32)
    b = rng.standard_normal((200, 72)).astype(np.float32)
    np.testing.assert_allclose(B.to_numpy(B.matmul(B.asarray(a), B.asarray(b))), a @ b, rtol=1e-4, atol=1e-4)
    m = (rng.standard_normal((3, 16, 16)) + 16 * np.eye(16)).astype(np.float32)
    np.testing.assert_allclose(B.to_numpy(B.matmul(B.asarray(m), B.asarray(m))), m @ m, rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------- random numbers (backends/threefry.py)
SEEDS = (0, 7, 2**31, 2**40 + 5, 2**64 - 1)


def _keys() -> np.ndarray:
    """The keys of SEEDS, (5, 1, 2): a leading axis more than one row of keys."""
    from transmuter_mlx.converters.backends.threefry import key

    return np.stack([key(s) for s in SEEDS]).reshape(len(SEEDS), 1, 2)


@pytest.mark.parametrize("backend", ["numpy", *DEVICE])
def test_random_split_is_mlx_split(backend):
    """Every backend splits keys into the words of ``mx.random.split``, bit for bit."""
    mx = pytest.importorskip("mlx.core")
    B = get_backend(backend)
    got = B.to_numpy(B.random_split(B.asarray(_keys()), 3))
    want = np.stack([np.array(mx.random.split(mx.random.key(s), 3)) for s in SEEDS]).reshape(len(SEEDS), 1, 3, 2)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["numpy", *DEVICE])
@pytest.mark.parametrize("count", [1, 2, 7, 512, 50257])
def test_gumbel_is_mlx_gumbel(backend, count):
    """``mx.random.gumbel((count,), key=k)`` of each key: exactly on mlx; elsewhere the same bits through
    another library's ``log`` (within a few ulps)."""
    mx = pytest.importorskip("mlx.core")
    B = get_backend(backend)
    got = B.to_numpy(B.gumbel(B.asarray(_keys()), count))
    want = np.stack([np.array(mx.random.gumbel((count,), key=mx.random.key(s))) for s in SEEDS])
    want = want.reshape(len(SEEDS), 1, count)
    assert got.dtype == np.float32 and got.shape == want.shape
    if backend == "mlx":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", ["numpy", *DEVICE])
@pytest.mark.parametrize("count", [3, 8, 513])
def test_threefry_is_written_once_for_every_backend(backend, count):
    """The shared threefry code gives the same words on every backend's arrays; through mlx's own ``log``
    its Gumbel draws are ``mx.random.gumbel``'s to the bit (odd counts' layout included)."""
    from transmuter_mlx.converters.backends import threefry

    B = get_backend(backend)
    words = B.to_numpy(threefry.random_bits(B, B.asarray(_keys()), count))
    np.testing.assert_array_equal(words, threefry.random_bits(get_backend("numpy"), _keys(), count))
    assert words.min() >= 0 and words.max() < 2**32
    if backend == "mlx":
        np.testing.assert_array_equal(B.to_numpy(threefry.gumbel(B, B.asarray(_keys()), count)),
                                      B.to_numpy(B.gumbel(B.asarray(_keys()), count)))


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="the mkl wheel is a dependency on Linux x86-64 only")
def test_the_package_brings_a_fast_blas_on_linux():
    """The mkl wheel (a dependency here) is a candidate, and MLX runs its matmuls on it when it is the one
    loaded: a fresh machine without a system OpenBLAS gets a fast BLAS from ``pip install`` alone."""
    from transmuter_mlx._blas import _candidates

    mkl = [c for c in _candidates() if "libmkl_rt" in c]
    assert mkl, "no libmkl_rt under sys.prefix/lib: the mkl dependency is missing"
    # 512 x 512: large enough that MKL runs it on its threads, which are TBB's (``_mkl_threading``)
    code = ("import numpy as np, transmuter_mlx, mlx.core as mx; from transmuter_mlx._blas import blas_info; "
            "a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32); "
            "error = float(np.abs(np.array(mx.array(a) @ mx.array(a)) - a @ a).max()); "
            "layer = [m.split('/')[-1].strip() for m in open('/proc/self/maps') if 'libmkl_' in m and '_thread' in m]; "
            "print(blas_info()['status'], error, blas_info()['mkl_threading'], layer[:1])")
    env = {k: v for k, v in os.environ.items() if k != "MKL_THREADING_LAYER"}
    out = run_python(code, {**env, "TRANSMUTER_MLX_BLAS": mkl[0]}).stdout.split()
    assert out[0] == "loaded" and float(out[1]) < 1e-3
    assert out[2:] == ["TBB", "['libmkl_tbb_thread.so.3']"]
    out = run_python(code, {**env, "TRANSMUTER_MLX_BLAS": mkl[0], "MKL_THREADING_LAYER": "SEQUENTIAL"}).stdout.split()
    assert float(out[1]) < 1e-3 and out[2:] == ["SEQUENTIAL", "(MKL_THREADING_LAYER)", "[]"]  # MKL's to read


SYSTEM_OPENBLAS = next((p for p in _blas._SYSTEM_OPENBLAS if os.path.exists(p)), None)


@pytest.mark.skipif(SYSTEM_OPENBLAS is None, reason="no system OpenBLAS")
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_keeps_its_own_gemm_beside_mlxs_openblas():
    """The BLAS loaded globally for MLX took torch's ``sgemm_`` too when torch loaded after it (its pthreads
    then fought torch's OpenMP workers); libtorch_cpu is now loaded first and binds its own, while MLX still binds
    the OpenBLAS. Read from the dynamic linker's own report (LD_DEBUG=bindings), with no OpenMP setting made."""
    code = ("import os, transmuter_mlx, torch, mlx.core as mx; torch.ones(64, 64) @ torch.ones(64, 64); "
            "mx.eval(mx.ones((64, 64)) @ mx.ones((64, 64))); print(os.environ.get('OMP_WAIT_POLICY'))")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env |= {"TRANSMUTER_MLX_BLAS": SYSTEM_OPENBLAS, "LD_DEBUG": "bindings"}
    done = run_python(code, env)
    bound = {}
    for line in done.stderr.splitlines():
        for lib, symbol in (("libtorch_cpu.so", "`sgemm_'"), ("libmlx.so", "`cblas_sgemm'")):
            if f"/{lib} [0] to " in line and line.endswith(f"normal symbol {symbol}"):
                bound[lib] = line.split(" to ")[1].split(" [")[0]
    assert bound["libtorch_cpu.so"].endswith("/libtorch_cpu.so"), bound
    assert "openblas" in os.path.basename(bound["libmlx.so"]), bound
    assert done.stdout.split() == ["None"]  # no OMP_WAIT_POLICY forced on the user's torch


def test_mlx_cpu_keeps_freed_buffers_of_a_model_call():
    """MLX's CPU allocator caches 32 MB of freed buffers by default, so larger activations were unmapped and
    page-faulted in at every call; the mlx backend raises the limit on the CPU device unless the user set one."""
    code = ("import mlx.core as mx, transmuter_mlx.converters.backends.mlx as m; "
            "print(mx.default_device() == mx.cpu, mx.set_cache_limit(0), m._cpu_cache_limit())")
    out = run_python(code).stdout.split()
    if out[0] == "True":
        assert int(out[1]) == int(out[2]) >= 256 << 20, out  # a 24 GB machine: 1.5 GB
    code = ("import mlx.core as mx; mx.set_cache_limit(100 << 20); import transmuter_mlx.converters.backends.mlx; "
            "print(mx.set_cache_limit(0))")
    out = run_python(code).stdout.split()
    assert out == [str(100 << 20)]  # the user's own limit stays


def test_mlx_cpu_cache_filled_by_another_model_is_cleared(monkeypatch):
    """MLX's CPU cache keeps a freed buffer only while there is room and never evicts: a model that starts on a
    cache another model filled would miss at every call (AST after wav2vec2-base: 6.3 s a call against 3.9). The
    model that starts on such a nearly full cache clears it; the same model again, or a cache with room, keeps it."""
    import mlx.core as mx
    from onnx import TensorProto, helper

    from transmuter_mlx.converters.backends import mlx as mlx_backend
    from transmuter_mlx.converters.model import load

    if mx.default_device() != mx.cpu:
        pytest.skip("the CPU allocator's cache")
    x = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)  # 1 MB activations
    models = []
    for op in ("Relu", "Sigmoid"):
        graph = helper.make_graph(
            [helper.make_node(op, ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)])
        models.append(load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), backend="mlx"))
    a, b = models
    cleared = []
    clear = mx.clear_cache
    monkeypatch.setattr(mx, "clear_cache", lambda: cleared.append(True) or clear())

    def call(model):
        mx.eval(model({"x": x})["y"])

    call(a)
    call(a)
    monkeypatch.setattr(mlx_backend, "_cpu_cache_size", mx.get_cache_memory())  # a's buffers fill the cache
    call(a)
    assert not cleared  # its own buffers
    call(b)
    assert cleared == [True]
    np.testing.assert_allclose(np.asarray(b({"x": x})["y"]), -1 / (1 + np.exp(-x)), rtol=1e-6, atol=1e-7)
    monkeypatch.setattr(mlx_backend, "_cpu_cache_size", 1 << 40)  # room for both
    call(a)
    call(b)
    assert cleared == [True]


def test_mlx_float32_stays_float32_on_gpus_with_tf32():
    """MLX_ENABLE_TF32 defaults to 1 (CUDA, Apple M5: float32 matmuls in TF32); the mlx backend sets it to 0 so
    float32 models compute as transformers does, unless the user set it."""
    code = ("import os; from transmuter_mlx.converters.backends import get_backend; get_backend('mlx'); "
            "print(os.environ.get('MLX_ENABLE_TF32'))")
    env = {k: v for k, v in os.environ.items() if k != "MLX_ENABLE_TF32"}
    assert run_python(code, env).stdout.split() == ["0"]
    assert run_python(code, env | {"MLX_ENABLE_TF32": "1"}).stdout.split() == ["1"]  # the user's own choice stays

def test_mlx_float64_op_runs_again_on_the_cpu_stream(monkeypatch):
    """MLX's GPUs (Metal, CUDA) raise for a float64 op: it runs again on the CPU stream (on an H200 the ONNX node
    suite's 60 double cases failed so). Here on the CPU device, the GPU is stood in for by ``default_device``."""
    import mlx.core as mx

    from transmuter_mlx.converters.graph import call_op

    B = get_backend("mlx")
    gpu_error = ValueError("[exp] float64 is not supported on the GPU")
    assert B.retry_place(gpu_error) is None  # on the CPU device nothing is retried
    monkeypatch.setattr(mx, "default_device", lambda: mx.gpu)
    assert B.retry_place(ValueError("shapes (2,) and (3,) cannot be broadcast")) is None
    assert get_backend("torch").retry_place(gpu_error) is None and get_backend("numpy").retry_place(gpu_error) is None
    calls = []

    def exp_like_a_gpu(B, x):  # raises on its first call, as op construction on a GPU stream does
        calls.append(x.dtype)
        if len(calls) == 1:
            raise gpu_error
        return mx.exp(x)

    x = np.linspace(-2, 2, 5)
    got = call_op(exp_like_a_gpu, B, [B.asarray(x)], {})
    assert len(calls) == 2 and B.dtype(got) == np.float64
    np.testing.assert_allclose(B.to_numpy(got), np.exp(x), rtol=1e-6)  # MLX's exp: float32-accurate
    with pytest.raises(ValueError, match="broadcast"):
        call_op(lambda B, x: (_ for _ in ()).throw(ValueError("shapes cannot be broadcast")), B, [x], {})


def test_mlx_strided_conv_transpose_on_a_gpu_inserts_its_zeros(monkeypatch):
    """mlx-cuda's ``conv_general(input_dilation > 1)`` gave wrong values for the node suite's 5 strided
    ConvTranspose cases on an H200; on a GPU the backend inserts the zeros itself. That path, run here on the CPU
    (``default_device`` says GPU), passes those cases against their expected outputs."""
    import mlx.core as mx

    from transmuter_mlx.conformance import collect_cases, run_case
    from transmuter_mlx.converters.backends import mlx as mlx_backend

    names = {"test_convtranspose_autopad_same", "test_convtranspose_kernel_shape", "test_convtranspose_output_shape",
             "test_convtranspose_pad", "test_convtranspose_pads"}
    cases = [c for c in collect_cases() if c.name in names]
    assert len(cases) == len(names)
    dilated = []
    original = mlx_backend._dilate
    monkeypatch.setattr(mlx_backend, "_dilate", lambda x, s: dilated.append(s) or original(x, s))
    monkeypatch.setattr(mx, "default_device", lambda: mx.gpu)
    for case in cases:
        result = run_case(case, "mlx")
        assert result.status == "pass", (case.name, result.message)
    assert len(dilated) >= len(names)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed")
def test_torch_linear_layers_run_on_onednn_blocked_weights():
    """On an x86-64 CPU the torch backend blocks each float32 linear weight for oneDNN at load (a MatMul's, a fused
    MatMulAdd's, MatMulNBits' dequantized one) and its products match onnxruntime at every row count, few rows of a
    small weight on a plain copy of it (``_PLAIN_WORK``) and more on oneDNN; the tensors the graph holds keep their
    (K, N) shape; ``TRANSMUTER_MLX_ONEDNN=off`` keeps torch's own matmul."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from transmuter_mlx.converters.backends import torch as torch_backend

    if not torch_backend._ONEDNN_LINEAR:
        pytest.skip("no oneDNN linear here (not x86-64, or torch without mkldnn)")
    import transmuter_mlx as tm

    rng = np.random.default_rng(0)
    k, n, out, block = 64, 96, 32, 32
    codes = rng.integers(0, 256, (out, n // block, block // 2), dtype=np.uint8)
    weights = [numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w1"),
               numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b1"),
               numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "w2"),
               numpy_helper.from_array(codes, "q"),
               numpy_helper.from_array(rng.uniform(0.01, 0.1, (out, n // block)).astype(np.float32), "s")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["m"]),
             helper.make_node("MatMulNBits", ["m", "q", "s"], ["y"], domain="com.microsoft", K=n, N=out, bits=4,
                              block_size=block)]
    graph = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["r", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["r", out])], weights)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    reference = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    model = tm.load(onnx.load_from_string(proto.SerializeToString()), backend="torch")
    blocked = model.backend._onednn  # the backend's: shared by the torch models of the process
    linear = [id(model.program.device_constants[(name, "torch")]) for name in ("w1", "w2")]
    assert all(key in blocked for key in linear)  # w1 (MatMulAdd), w2 (MatMul): at load
    held_at_load = set(blocked)
    for rows in (1, 8, 37, 64):  # 64 rows of w1 and w2 are past _PLAIN_WORK: oneDNN's call
        x = rng.standard_normal((rows, k)).astype(np.float32)
        want = reference.run(None, {"x": x})[0]
        got = model.backend.to_numpy(model({"x": x})["y"])
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
        if rows == 1:
            assert all(key in model.backend._plain for key in linear)  # plain copies, made at the first row
    assert 64 * n * n > torch_backend._PLAIN_WORK >= 37 * k * n
    assert len(set(blocked) - held_at_load) == 1  # q's dequantized weight, at its first product
    assert sorted(tuple(model.program.initializers[name].shape) for name in ("w1", "w2")) == [(k, n), (n, n)]
    done = run_python("from transmuter_mlx.converters.backends import torch as t; print(t._ONEDNN_LINEAR)",
                      {**os.environ, "TRANSMUTER_MLX_ONEDNN": "off"})
    assert done.stdout.split() == ["False"], done.stderr


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize(("a_shape", "b_shape"), [((5, 6, 1, 8), (1, 6, 8, 30)), ((3, 2, 4, 7), (1, 2, 7, 5)),
                                                  ((4, 3, 8), (1, 8, 2))])
def test_matmul_of_rows_over_an_operand_they_share(backend, a_shape, b_shape):
    """A right operand of batch 1 broadcast over the left's rows (beams over one cross-attention cache): torch reads it
    once with the rows folded together (``_rows_over_shared``). Against numpy in float64, within 1e-5."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    B = get_backend(backend)
    got = B.to_numpy(B.matmul(B.asarray(a), B.asarray(b)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [(1,), (3,), (2, 5)])
def test_int8_matmul_is_exact_where_a_backend_has_one(rows):
    """torch's int8 GEMM (a CPU device) gives numpy's int32 product, extremes included (-128 x -128 over 1,100 rows
    sums past 2**24, where float32 would round); mlx and numpy have none and say so with None."""
    rng = np.random.default_rng(0)
    k, n = 1100, 24
    a = rng.integers(-128, 128, (*rows, k)).astype(np.int8)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    a[..., 0, :], w[:, 0] = -128, -128
    assert get_backend("mlx").int8_matmul_weight(w) is None and get_backend("numpy").int8_matmul_weight(w) is None
    B = get_backend("torch")
    held = B.int8_matmul_weight(w)
    if held is None:
        pytest.skip("this torch device has no int8 GEMM")
    out = np.asarray(B.to_numpy(B.int8_matmul(B.asarray(a), held)))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a.astype(np.int64) @ w.astype(np.int64))


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_reshape_of_a_transposed_view_keeps_a_memory_order_its_kernels_read():
    """An export's ``Transpose`` + ``Reshape`` of (1, 4096, 256) to (1, 256, 64, 64) (SegFormer's decode head):
    channels-last memory, whose unit batch axis gets the dense layout's stride, so that torch's kernels read it as
    channels-last; the values are numpy's, and the bilinear resize of it equals that of its NCHW copy."""
    import torch

    B = get_backend("torch")
    x = rng.standard_normal((1, 4096, 256)).astype(np.float32)
    y = B.reshape(B.transpose(B.asarray(x), (0, 2, 1)), (1, 256, 64, 64))
    want = x.transpose(0, 2, 1).reshape(1, 256, 64, 64)
    np.testing.assert_array_equal(B.to_numpy(y), want)
    assert y.stride() == (256 * 64 * 64, 1, 64 * 256, 256)
    assert y.is_contiguous(memory_format=torch.channels_last)
    resized = B.interpolate_2d(y, (128, 128), "linear", False)
    reference = torch.nn.functional.interpolate(torch.from_numpy(want), size=(128, 128), mode="bilinear")
    np.testing.assert_allclose(B.to_numpy(resized), reference.numpy(), rtol=1e-6, atol=1e-6)
