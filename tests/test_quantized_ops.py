"""Quantized ops against onnxruntime on mlx and torch, and the quantized_matmul primitive.

Integer outputs must match exactly; float outputs of the same math within ``RTOL`` of the output's
scale (the block sums are ordered differently from onnxruntime's kernels).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import transmuter_mlx
from parity.exact_int8 import reference
from transmuter_mlx.converters.backends import get_backend
from transmuter_mlx.converters.backends.base import pack_quantized, unpack_quantized

ort = pytest.importorskip("onnxruntime")
BACKENDS = ["mlx", "torch"]
RTOL = 1e-5
MS = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    # int8 weights as uint8 where onnxruntime's int8 kernels saturate (no VNNI): its exact path
    sess = ort.InferenceSession(reference(model).SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _ours(model: onnx.ModelProto, feeds: dict, backend: str, calls: int = 1) -> list[np.ndarray]:
    """The outputs of the last of ``calls`` calls (the second on torch: the replay, with specialised kernels)."""
    m = transmuter_mlx.load(model, backend=backend)
    for _ in range(calls):
        out = m(feeds)
    B = m.backend
    return [
        B.to_numpy(out[o.name]) if B.is_array(out[o.name]) else np.asarray(out[o.name])
        for o in model.graph.output
    ]


def _check(model: onnx.ModelProto, feeds: dict, backend: str, rtol: float = RTOL) -> None:
    """Ours against onnxruntime at the first call and at the second."""
    refs = _ort(model, feeds)
    for calls in (1, 2):
        for ref, got in zip(refs, _ours(model, feeds, backend, calls)):
            assert got.dtype == ref.dtype and got.shape == ref.shape
            if ref.dtype.kind in "iu":
                np.testing.assert_array_equal(got, ref)
            else:
                scale = float(np.abs(ref.astype(np.float64)).max()) or 1.0
                np.testing.assert_allclose(got.astype(np.float64), ref, rtol=0, atol=rtol * scale)


def _model(nodes, inputs, outputs, inits=(), opsets=MS) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=opsets)


def _vi(name: str, dtype, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)


# -- the primitive ------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_pack_quantized_matches_byte_stream(bits):
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 2**bits, (3, 64)).astype(np.uint8)
    words = pack_quantized(codes, bits)
    assert words.dtype == np.uint32 and words.shape == (3, 64 * bits // 32)
    np.testing.assert_array_equal(unpack_quantized(words, bits), codes)
    # ONNX MatMulNBits packs low bits first in bytes: the same stream read as little-endian uint32
    per = 8 // bits
    stream = np.bitwise_or.reduce(codes.reshape(3, -1, per) << (bits * np.arange(per)), axis=-1).astype(
        np.uint8
    )
    np.testing.assert_array_equal(stream.view("<u4"), words)


@pytest.mark.parametrize("bits,group", [(4, 32), (8, 64), (2, 128), (4, 128)])
def test_quantized_matmul_backends_agree(bits, group):
    rng = np.random.default_rng(0)
    n, k = 6, 256
    words = pack_quantized(rng.integers(0, 2**bits, (n, k)), bits)
    scales = (rng.random((n, k // group)) * 0.1).astype(np.float32)
    biases = rng.standard_normal((n, k // group)).astype(np.float32)
    x = rng.standard_normal((2, 3, k)).astype(np.float32)
    numpy_backend = get_backend("numpy")
    ref = numpy_backend.quantized_matmul(x, numpy_backend.quantized_matmul_weight(words, scales, biases, group, bits))
    codes = unpack_quantized(words, bits).astype(np.float64)
    dense = codes * np.repeat(scales, group, 1) + np.repeat(biases, group, 1)
    np.testing.assert_allclose(ref, x.astype(np.float64) @ dense.T, rtol=1e-4, atol=1e-4)
    for name in BACKENDS:
        B = get_backend(name)
        got = B.quantized_matmul(B.asarray(x), B.quantized_matmul_weight(words, scales, biases, group, bits))
        np.testing.assert_allclose(B.to_numpy(got), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [6, 16, 40])
def test_torch_cpu_int4_gemm_reads_the_packed_weights(n):
    """torch on the CPU multiplies a few rows by 4-bit weights with its int4 kernel (weights laid out once, any
    N): within 1e-5 of the float64 dequantized product with float32 activations; with bfloat16 ones (which
    keep no codes besides the kernel's layout) within 1e-2 of the largest output at any number of rows."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(n)
    k, group = 128, 32
    words = pack_quantized(rng.integers(0, 16, (n, k)), 4)
    scales = (rng.random((n, k // group)) * 0.1).astype(np.float32)
    biases = rng.standard_normal((n, k // group)).astype(np.float32)
    dense = unpack_quantized(words, 4) * np.repeat(scales, group, 1).astype(np.float64) + np.repeat(biases, group, 1)
    B = get_backend("torch")
    for bf16, rows, tol in ((False, 1, 1e-5), (True, 1, 1e-2), (True, 37, 1e-2)):
        w = B.quantized_matmul_weight(words, scales, biases, group, 4, bf16_activations=bf16)
        if hasattr(torch, "_weight_int4pack_mm_for_cpu"):
            assert w.int4[2] == n and (w.codes is None) == bf16
        x = rng.standard_normal((2, rows, k)).astype(np.float32)
        ref = x.astype(np.float64) @ dense.T
        got = B.to_numpy(B.quantized_matmul(B.asarray(x), w))
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol * np.abs(ref).max())


# -- MatMulNBits ------------------------------------------------------------------------------


def _nbits_model(K, N, bits, block, zp, g_idx, bias, dtype=np.float32, lead=(3,), seed=0, accuracy_level=None):
    rng = np.random.default_rng(seed)
    kb = -(-K // block)
    inits = [
        numpy_helper.from_array(rng.integers(0, 256, (N, kb, block * bits // 8), dtype=np.uint8), "B"),
        numpy_helper.from_array((rng.random(N * kb) * 0.1 + 0.01).astype(dtype), "scales"),
    ]
    names = ["A", "B", "scales", "", "", ""]
    if zp == "packed":
        inits.append(
            numpy_helper.from_array(rng.integers(0, 256, N * -(-kb * bits // 8), dtype=np.uint8), "zp")
        )
        names[3] = "zp"
    elif zp == "float":
        inits.append(numpy_helper.from_array((rng.random(N * kb) * (2**bits - 1)).astype(dtype), "zp"))
        names[3] = "zp"
    if g_idx is not None:
        g = np.arange(K) // block if g_idx == "natural" else rng.permutation(np.arange(K) // block)
        inits.append(numpy_helper.from_array(g.astype(np.int32), "g_idx"))
        names[4] = "g_idx"
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(dtype), "bias"))
        names[5] = "bias"
    while names[-1] == "":
        names.pop()
    level = {} if accuracy_level is None else {"accuracy_level": accuracy_level}
    node = helper.make_node(
        "MatMulNBits", names, ["Y"], domain="com.microsoft", K=K, N=N, bits=bits, block_size=block, **level
    )
    model = _model([node], [_vi("A", dtype, [*lead, K])], [_vi("Y", dtype, None)], inits)
    return model, {"A": rng.standard_normal((*lead, K)).astype(dtype)}


NBITS_CASES = [
    # K, N, bits, block, zero points, g_idx, bias, leading dims
    (64, 8, 4, 32, None, None, False, (3,)),
    (80, 5, 4, 32, "packed", None, True, (2, 3)),  # K not a multiple of the block
    (256, 4, 8, 64, "packed", None, False, (1,)),  # 8 bits
    (96, 6, 4, 16, "packed", None, False, (4,)),  # block 16: no MLX group, dequantized
    (512, 3, 4, 256, None, None, True, (2,)),  # block 256 split into MLX groups of 128
    (64, 4, 2, 32, "packed", None, False, (3,)),  # 2 bits
    (128, 7, 4, 128, "float", None, False, (2, 1)),  # float zero points
    (96, 6, 4, 32, None, "natural", False, (3,)),
    (96, 6, 4, 32, "float", "permuted", True, (3,)),  # act-order groups: dequantized
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "case", NBITS_CASES, ids=[f"K{c[0]}N{c[1]}b{c[2]}bs{c[3]}-{c[4]}-{c[5]}" for c in NBITS_CASES]
)
def test_matmul_nbits(case, backend):
    K, N, bits, block, zp, g_idx, bias, lead = case
    model, feeds = _nbits_model(K, N, bits, block, zp, g_idx, bias, lead=lead)
    _check(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_nbits_float16(backend):
    model, feeds = _nbits_model(128, 8, 4, 32, "packed", None, True, dtype=np.float16)
    _check(model, feeds, backend, rtol=2e-3)


@pytest.mark.parametrize(("N", "rows", "allowed_by"), [
    (24, 1, "file"), (24, 37, "file"),  # N padded to 16 rows
    (4176, 1, "file"), (4176, 37, "file"),  # past one 4,096-row conversion chunk
    (24, 3, "env"),
])  # fmt: skip
def test_matmul_nbits_bf16_activations_on_torch_are_as_close_as_onnxruntime(N, rows, allowed_by, monkeypatch):
    """``accuracy_level=4`` lets A be int8 (onnxruntime quantizes it per block): the torch backend keeps the
    weights packed and runs torch's CPU int4 kernel on bfloat16 A (so does ``TRANSMUTER_MLX_NBITS=bf16`` for a
    file without the attribute). Against the float32 product (onnxruntime at ``accuracy_level=0``) its error
    is no larger than onnxruntime's own at level 4, at the largest and on average; mlx ignores the level
    (float32, within RTOL)."""
    from transmuter_mlx.converters.ops import quantized_contrib

    exact_model, feeds = _nbits_model(256, N, 4, 32, "packed", None, True, lead=(rows,), accuracy_level=0)
    level4, _ = _nbits_model(256, N, 4, 32, "packed", None, True, lead=(rows,), accuracy_level=4)
    exact = _ort(exact_model, feeds)[0].astype(np.float64)
    theirs = np.abs(_ort(level4, feeds)[0] - exact)
    model = level4
    if allowed_by == "env":
        monkeypatch.setenv(quantized_contrib.NBITS_ENV, "bf16")
        model, _ = _nbits_model(256, N, 4, 32, "packed", None, True, lead=(rows,))
    before = set(quantized_contrib._CACHE)
    loaded = transmuter_mlx.load(model, backend="torch")  # held: a dropped model's prepared weights go with it
    ours = np.abs(loaded(feeds)["Y"].numpy() - exact)
    assert 0 < ours.max() <= theirs.max() and ours.mean() <= theirs.mean(), (ours.max(), theirs.max())
    assert [v[0] for k, v in quantized_contrib._CACHE.items() if k not in before] == ["packed"]
    mlx_y = np.asarray(transmuter_mlx.load(model, backend="mlx")(feeds)["Y"], np.float64)
    np.testing.assert_allclose(mlx_y, exact, rtol=0, atol=RTOL * np.abs(exact).max())


@pytest.mark.parametrize("choice", ["packed", "dense", ""])
def test_matmul_nbits_weights_packed_or_dequantized_once(choice, monkeypatch):
    """TRANSMUTER_MLX_NBITS picks how the weights are held; by default packed where the backend's packed kernel
    is the faster (MLX on a GPU), dequantized once on a CPU. Either way one plan serves every call."""
    import mlx.core as mx

    from transmuter_mlx.converters.ops import quantized_contrib

    monkeypatch.setenv(quantized_contrib.NBITS_ENV, choice)
    model, feeds = _nbits_model(128, 8, 4, 64, "packed", None, False)
    before = set(quantized_contrib._CACHE)
    m = transmuter_mlx.load(model, backend="mlx")
    first = np.asarray(m(feeds)["Y"])
    np.testing.assert_allclose(np.asarray(m(feeds)["Y"]), first)  # the compiled replay reuses the plan
    plans = [v for k, v in quantized_contrib._CACHE.items() if k not in before]
    packed = choice == "packed" or (not choice and mx.default_device() != mx.cpu)
    assert len(plans) == 1 and plans[0][0] == ("packed" if packed else "dense")
    held = plans[0][1][0] if packed else plans[0][1]  # the packed plan's (words, scales, biases, group, bits)
    assert str(held.dtype) == ("mlx.core.uint32" if packed else "mlx.core.float32")
    _check(model, feeds, "mlx")
    del m


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_nbits_weights_from_external_data_are_planned_once(backend, tmp_path):
    """Packed weights read from an external data file (mapped, and kept on the host for the op) give one plan for
    every signature: the plan cache is keyed by the weight's identity, which a memmap changed at each np.asarray
    (Qwen3-0.6B's int4 export dequantized per signature, 17 GB at its peak)."""
    from transmuter_mlx.converters.ops import quantized_contrib

    model, _ = _nbits_model(256, 64, 4, 32, "packed", None, True, lead=(2,))
    model.graph.input[0].CopyFrom(_vi("A", np.float32, ["n", 256]))
    model.graph.output[0].CopyFrom(_vi("Y", np.float32, ["n", 64]))
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="model.onnx_data", size_threshold=1024)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    before = set(quantized_contrib._CACHE)
    m = transmuter_mlx.load(str(path), backend=backend)
    rng = np.random.default_rng(1)
    for lead in ((2,), (3,), (1,), (2,)):  # three signatures, one of them twice
        feeds = {"A": rng.standard_normal((*lead, 256)).astype(np.float32)}
        np.testing.assert_allclose(m.backend.to_numpy(m(feeds)["Y"]), session.run(["Y"], feeds)[0],
                                   rtol=1e-4, atol=1e-4)
    assert len([k for k in quantized_contrib._CACHE if k not in before]) == 1


# -- GatherBlockQuantized ------------------------------------------------------------------------


def _gbq_model(kind, shape, bits, block, quantize_axis, gather_axis, zp, idx_shape=(2, 3), seed=0):
    rng = np.random.default_rng(seed)
    sshape = list(shape)
    sshape[quantize_axis] = -(-shape[quantize_axis] // block)
    if kind == "uint8":
        packed = list(shape)
        packed[-1] = shape[-1] * bits // 8
        data = numpy_helper.from_array(rng.integers(0, 256, packed, dtype=np.uint8), "data")
    else:
        T, lo, hi = (TensorProto.INT4, -8, 8) if kind == "int4" else (TensorProto.UINT4, 0, 16)
        data = helper.make_tensor("data", T, shape, rng.integers(lo, hi, shape).reshape(-1).tolist())
    inits = [data, numpy_helper.from_array((rng.random(sshape) * 0.1 + 0.01).astype(np.float32), "scales")]
    names = ["data", "idx", "scales"]
    if zp and kind == "uint8":
        zshape = sshape[:-1] + [-(-sshape[-1] * bits // 8)]
        inits.append(numpy_helper.from_array(rng.integers(0, 256, zshape, dtype=np.uint8), "zp"))
        names.append("zp")
    elif zp:
        T, lo, hi = (TensorProto.INT4, -8, 8) if kind == "int4" else (TensorProto.UINT4, 0, 16)
        inits.append(helper.make_tensor("zp", T, sshape, rng.integers(lo, hi, sshape).reshape(-1).tolist()))
        names.append("zp")
    attrs = dict(bits=bits, block_size=block, quantize_axis=quantize_axis, gather_axis=gather_axis)
    node = helper.make_node("GatherBlockQuantized", names, ["Y"], domain="com.microsoft", **attrs)
    model = _model([node], [_vi("idx", np.int64, list(idx_shape))], [_vi("Y", np.float32, None)], inits)
    idx = rng.integers(-shape[gather_axis], shape[gather_axis], idx_shape).astype(np.int64)
    return model, {"idx": idx}


GBQ_CASES = [
    # data kind, shape, bits, block, quantize_axis, gather_axis, zero points
    ("uint8", (10, 64), 4, 32, 1, 0, False),
    ("uint8", (10, 64), 4, 32, 1, 0, True),
    ("uint8", (10, 48), 8, 16, 1, 0, True),
    ("int4", (10, 64), 4, 32, 1, 0, True),
    ("uint4", (10, 48), 4, 32, 1, 0, False),  # last block is partial
    ("int4", (6, 64, 4), 4, 16, 1, 0, True),
    ("uint4", (32, 6), 4, 16, 0, 1, True),  # gather along the second axis
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "case", GBQ_CASES, ids=[f"{c[0]}{list(c[1])}b{c[2]}q{c[4]}g{c[5]}zp{int(c[6])}" for c in GBQ_CASES]
)
def test_gather_block_quantized(case, backend):
    model, feeds = _gbq_model(*case)
    _check(model, feeds, backend, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tied_int4_embedding_is_prepared_once(backend):
    """The genai exports' tied embedding: GatherBlockQuantized reads a Reshape (its shape a Constant node) of the
    head's packed int4 weight, which MatMulNBits reads too. The Reshape of initializers is folded to an
    initializer (a view), so the gather's tables are made once for every signature, and both ops agree with
    onnxruntime at two lengths."""
    from transmuter_mlx.converters.ops import quantized_contrib

    rng = np.random.default_rng(7)
    vocab, hidden, block = 48, 64, 32
    packed = rng.integers(0, 256, (vocab, hidden // block, block // 2), dtype=np.uint8)
    scales = (rng.random((vocab, hidden // block)) * 0.1 + 0.01).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([vocab, hidden // 2]))),
        helper.make_node("Reshape", ["head", "shape"], ["table"]),
        helper.make_node("GatherBlockQuantized", ["table", "ids", "scales"], ["embedded"], domain="com.microsoft",
                         bits=4, block_size=block, gather_axis=0, quantize_axis=1),
        helper.make_node("MatMulNBits", ["embedded", "head", "scales"], ["logits"], domain="com.microsoft",
                         K=hidden, N=vocab, bits=4, block_size=block),
    ]  # fmt: skip
    inits = [numpy_helper.from_array(packed, "head"), numpy_helper.from_array(scales, "scales")]  # shared, as genai
    model = _model(nodes, [_vi("ids", np.int64, [1, "n"])], [_vi("logits", np.float32, None)], inits)
    m = transmuter_mlx.load(model, backend=backend)
    before = set(quantized_contrib._CACHE)
    for n in (3, 5):
        feeds = {"ids": rng.integers(0, vocab, (1, n)).astype(np.int64)}
        ref = _ort(model, feeds)[0]
        np.testing.assert_allclose(np.asarray(m(feeds)["logits"]), ref, rtol=0, atol=RTOL * np.abs(ref).max())
    tables = [v for k, v in quantized_contrib._CACHE.items() if k not in before and not isinstance(v[0], str)]
    assert len(tables) == 1 and len(m.signatures()) == 2


# -- standard quantization ops ---------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(4, 6), (2, 5, 8)])
def test_dynamic_quantize_then_matmul_integer(shape, backend):
    rng = np.random.default_rng(len(shape))
    k, n = shape[-1], 7
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.int8(3), "wz")]
    outs = [
        _vi("y", np.int32, None),
        _vi("xq", np.uint8, None),
        _vi("xs", np.float32, None),
        _vi("xz", np.uint8, None),
    ]
    model = _model(nodes, [_vi("x", np.float32, list(shape))], outs, inits, [helper.make_opsetid("", 13)])
    _check(model, {"x": rng.standard_normal(shape).astype(np.float32) * 3}, backend)


def _dql_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs of a decode step's shape (1, 576) that reach every branch of DynamicQuantizeLinear: both signs, one sign
    (the range then includes 0), all zero, a constant, values on and near the half-way points between codes, and
    ranges whose zero point falls half-way (the rounding ties)."""
    xs = [rng.standard_normal((1, 576)).astype(np.float32) * s for s in (1e-3, 0.7, 3.0, 40.0)]
    xs += [np.abs(xs[1]), -np.abs(xs[2]), np.zeros((1, 576), np.float32), np.full((1, 576), 2.5, np.float32)]
    for lo, hi in ((-1.0, 1.0), (-0.3, 2.2), (-5.0, 0.25), (-0.5, 254.5), (-2.5, 252.5)):  # zero points 0.5, 2.5
        scale = np.float32(np.float32(hi) - np.float32(lo)) / np.float32(255)
        halves = (rng.integers(-300, 300, 574) + 0.5).astype(np.float32) * scale
        x = np.clip(np.concatenate([[lo, hi], halves]), lo, hi).astype(np.float32)
        xs += [x[None], np.nextafter(x, np.float32(np.inf))[None]]
    return xs


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_quantize_linear_bit_for_bit(backend):
    """Codes, scale and zero point equal onnxruntime's and the ONNX reference implementation's bit for bit, on torch
    through the backend's one-call path (``dynamic_quantize_uint8``: the range on the host) and on mlx through the op's
    formula. For an all-zero input onnxruntime's scale is 1 where the spec's is 1 / 255 (its codes and zero point
    agree): there the reference implementation decides."""
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"])
    outs = [_vi("xq", np.uint8, None), _vi("xs", np.float32, None), _vi("xz", np.uint8, None)]
    model = _model([node], [_vi("x", np.float32, [1, 576])], outs, opsets=[helper.make_opsetid("", 13)])
    m = transmuter_mlx.load(model, backend=backend)
    assert (m.backend.dynamic_quantize_uint8(m.backend.asarray(np.ones(3, np.float32))) is not None) == (
        backend == "torch")
    spec = ReferenceEvaluator(model)
    for x in _dql_inputs(np.random.default_rng(5)):
        refs = spec.run(None, {"x": x})
        if x.any():
            ort_refs = _ort(model, {"x": x})
            for ref, theirs in zip(refs, ort_refs):
                np.testing.assert_array_equal(np.asarray(ref), theirs)  # the two references agree
        got = m({"x": x})
        for ref, name in zip(refs, ("xq", "xs", "xz")):
            value, ref = m.backend.to_numpy(got[name]), np.asarray(ref)
            assert value.dtype == ref.dtype and value.shape == ref.shape, name
            np.testing.assert_array_equal(value.view(np.uint32) if ref.dtype == np.float32 else value, ref.view(
                np.uint32) if ref.dtype == np.float32 else ref, err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_matmul_integer_long_reduction(backend):
    """K > 256: the exact chunked int32 accumulation, with per-row and per-column zero points."""
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (3, 5, 700), dtype=np.uint8)
    b = rng.integers(0, 256, (700, 4), dtype=np.uint8)
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.uint8(7), "az"),
             numpy_helper.from_array(rng.integers(0, 256, 4, dtype=np.uint8), "bz")]  # fmt: skip
    model = _model([node], [_vi("a", np.uint8, [3, 5, 700])], [_vi("y", np.int32, None)], inits,
                   [helper.make_opsetid("", 13)])  # fmt: skip
    _check(model, {"a": a}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,axis,block", [((4, 64), 1, 16), ((3, 10, 6), 1, 4), ((8, 5), 0, 3)])
def test_quantize_dequantize_blocked(shape, axis, block, backend):
    rng = np.random.default_rng(block)
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // block)
    scale = (rng.random(sshape) * 0.05 + 0.01).astype(np.float32)
    zp = rng.integers(-20, 20, sshape).astype(np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis, block_size=block),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=axis, block_size=block),
    ]
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")]
    model = _model(nodes, [_vi("x", np.float32, list(shape))], [_vi("q", np.int8, None), _vi("y", np.float32, None)],
                   inits, [helper.make_opsetid("", 21)])  # fmt: skip
    _check(model, {"x": rng.standard_normal(shape).astype(np.float32)}, backend)


# -- graphs made by onnxruntime's own quantizers --------------------------------------------------


def _float_model(K=64, N=32) -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"])]  # fmt: skip
    inits = [numpy_helper.from_array(rng.standard_normal((K, N)).astype(np.float32) * 0.2, "w1"),
             numpy_helper.from_array(rng.standard_normal((N, 16)).astype(np.float32) * 0.2, "w2"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b2")]  # fmt: skip
    model = _model(nodes, [_vi("x", np.float32, [4, K])], [_vi("y", np.float32, None)], inits,
                   [helper.make_opsetid("", 17)])  # fmt: skip
    return model, {"x": rng.standard_normal((4, K)).astype(np.float32)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_ort_quantize_dynamic(tmp_path, backend):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model, feeds = _float_model()
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    q = onnx.load(dst)
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= {n.op_type for n in q.graph.node}
    _check(q, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("symmetric", [True, False])
def test_ort_matmul_nbits_quantizer(backend, symmetric):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model, feeds = _float_model(K=128, N=64)
    quant = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=symmetric)
    quant.process()
    q = quant.model.model
    assert "MatMulNBits" in {n.op_type for n in q.graph.node}
    _check(q, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("group", [1, 2])
def test_conv_integer_long_reduction(group, backend):
    """40 channels x 3x3 > 256 terms: chunks of input channels, each exact in float32."""
    rng = np.random.default_rng(group)
    x = rng.integers(0, 256, (2, 40, 7, 6), dtype=np.uint8)
    w = rng.integers(0, 256, (4, 40 // group, 3, 3), dtype=np.uint8)
    node = helper.make_node(
        "ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=group, pads=[1, 0, 1, 1], strides=[2, 1]
    )
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(100), "xz"),
             numpy_helper.from_array(np.uint8(120), "wz")]  # fmt: skip
    model = _model([node], [_vi("x", np.uint8, list(x.shape))], [_vi("y", np.int32, None)], inits,
                   [helper.make_opsetid("", 13)])  # fmt: skip
    _check(model, {"x": x}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_qlinear_conv_per_channel(backend):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 8, 9, 9), dtype=np.uint8)
    w = rng.integers(-128, 128, (6, 8, 3, 3), dtype=np.int8)
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1])
    inits = [numpy_helper.from_array(np.float32(0.02), "xs"), numpy_helper.from_array(np.uint8(128), "xz"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array((rng.random(6) * 0.01).astype(np.float32), "ws"),
             numpy_helper.from_array(np.zeros(6, np.int8), "wz"), numpy_helper.from_array(np.float32(0.05), "ys"),
             numpy_helper.from_array(np.uint8(120), "yz"),
             numpy_helper.from_array(rng.integers(-500, 500, 6).astype(np.int32), "b")]  # fmt: skip
    model = _model([node], [_vi("x", np.uint8, list(x.shape))], [_vi("y", np.uint8, None)], inits,
                   [helper.make_opsetid("", 13)])  # fmt: skip
    _check(model, {"x": x}, backend)
