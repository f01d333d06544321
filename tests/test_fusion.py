"""Load-time fusion (``converters/fusion.py``): exported GELU and attention chains become one node.

Each case builds the chain with ``onnx.helper``, checks that the loaded program has (or, when a
value of the chain is read elsewhere, has not) the fused node, and compares the outputs on mlx and
torch with onnxruntime on the original graph.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import transmuter_mlx as tm
from transmuter_mlx.converters.backends import get_backend
from transmuter_mlx.converters.ops.fused import _with_padding, scaled_dot_product_attention_1
from transmuter_mlx.converters.ops.quantized_matmul import weight_chunks

ort = pytest.importorskip("onnxruntime")

BACKENDS = ("mlx", "torch")
FUSED = {"Gelu": "com.microsoft", "FastGelu": "com.microsoft", "ScaledDotProductAttention": "ai.transmuter", "MatMulAdd": "ai.transmuter",
         "RMSNorm": "ai.transmuter", "RotateHalfEmbedding": "ai.transmuter", "Silu": "ai.transmuter",
         "IntegerLinear": "ai.transmuter", "GroupNorm": "ai.transmuter", "FusedConv": "ai.transmuter"}
rng = np.random.default_rng(0)
SQRT2 = math.sqrt(2)


def const(name: str, value, dtype=np.float32) -> onnx.NodeProto:
    return oh.make_node(
        "Constant", [], [name], name=f"c_{name}", value=numpy_helper.from_array(np.asarray(value, dtype))
    )


def model(nodes, inputs: dict[str, np.ndarray], outputs: list[str], opset: int = 17) -> onnx.ModelProto:
    vis = [
        oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in inputs.items()
    ]
    outs = [oh.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    graph = oh.make_graph(nodes, "g", vis, outs)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def fused_ops(m) -> list[str]:
    return [s.spec.op_type for s in m.program.steps if FUSED.get(s.spec.op_type) == s.spec.domain]


def check(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], want_fused: list[str], tol: float = 1e-5):
    """Fused as ``want_fused`` says, and equal to onnxruntime on the first call (the planning walk: the op itself)
    and the second (the replay: on torch the kernel the op's ``specialise`` chose)."""
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for backend in BACKENDS:
        m = tm.load(proto, backend=backend)
        assert fused_ops(m) == want_fused, backend
        for _ in range(2):
            got = [np.asarray(m.backend.to_numpy(v)) for v in m(feeds).values()]
            for r, g in zip(ref, got):
                assert g.shape == r.shape and g.dtype == r.dtype, (backend, g.shape, r.shape, g.dtype, r.dtype)
                np.testing.assert_allclose(g, r, rtol=tol, atol=tol, err_msg=backend)


# -- GELU ---------------------------------------------------------------------------------------


def gelu_nodes(scale="div", half_first=False, swap=False, sqrt2=SQRT2):
    """x -> Div(sqrt 2)|Mul(1/sqrt 2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5); ``swap`` flips operand orders."""
    pair = (lambda a, b: [b, a]) if swap else (lambda a, b: [a, b])
    if scale == "div":
        nodes = [const("s", sqrt2), oh.make_node("Div", ["x", "s"], ["d"], name="div")]
    else:
        nodes = [const("s", 1 / sqrt2), oh.make_node("Mul", pair("x", "s"), ["d"], name="mul_s")]
    nodes += [
        oh.make_node("Erf", ["d"], ["e"], name="erf"),
        const("one", 1.0),
        oh.make_node("Add", pair("e", "one"), ["a"], name="add"),
        const("half", 0.5),
    ]
    if half_first:  # x * 0.5 * (1 + erf)
        nodes += [
            oh.make_node("Mul", pair("x", "half"), ["h"], name="mul_half"),
            oh.make_node("Mul", pair("h", "a"), ["y"], name="mul"),
        ]
    else:  # x * (1 + erf) * 0.5
        nodes += [
            oh.make_node("Mul", pair("x", "a"), ["m"], name="mul"),
            oh.make_node("Mul", pair("m", "half"), ["y"], name="mul_half"),
        ]
    return nodes


@pytest.mark.parametrize("scale", ["div", "mul"])
@pytest.mark.parametrize("half_first", [False, True])
@pytest.mark.parametrize("swap", [False, True])
def test_gelu_fused(scale, half_first, swap):
    feeds = {"x": (rng.standard_normal((2, 8, 16)) * 3).astype(np.float32)}
    proto = model(gelu_nodes(scale, half_first, swap), feeds, ["y"])
    check(proto, feeds, ["Gelu"])
    m = tm.load(proto, backend="mlx")
    (step,) = [s for s in m.program.steps if s.spec.op_type == "Gelu"]
    assert "erf" in step.name and "mul_half" in step.name  # the fused node names the originals
    assert not any(s.spec.op_type == "Constant" for s in m.program.steps)


def test_gelu_not_fused_with_extra_reader_or_other_constant():
    feeds = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    extra = gelu_nodes() + [oh.make_node("Neg", ["e"], ["n"], name="neg")]  # Erf's output read elsewhere
    check(model(extra, feeds, ["y", "n"]), feeds, [])
    check(model(gelu_nodes(), feeds, ["y", "a"]), feeds, [])  # an intermediate is a graph output
    check(model(gelu_nodes(sqrt2=1.5), feeds, ["y"]), feeds, [])  # not GELU's constant


def gelu_tanh_nodes(cube="pow", half_first=True, swap=False, kappa=0.044715):
    """GELU's tanh form: x^3 (``Pow(x, 3)`` or ``x * (x * x)``) -> Mul(0.044715) -> Add(x) -> Mul(sqrt(2 / pi)) ->
    Tanh -> Add(1) -> GELU's end; GPT-2's ``gelu_new`` is ``cube="pow", half_first=True``, torch's
    ``gelu(approximate="tanh")`` (SigLIP, Gemma) ``cube="mul", half_first=False``."""
    pair = (lambda a, b: [b, a]) if swap else (lambda a, b: [a, b])
    if cube == "pow":
        nodes = [const("three", 3.0), oh.make_node("Pow", ["x", "three"], ["x3"], name="pow")]
    else:
        nodes = [oh.make_node("Mul", ["x", "x"], ["x2"], name="square"),
                 oh.make_node("Mul", pair("x", "x2"), ["x3"], name="cube")]
    nodes += [
        const("kappa", kappa), oh.make_node("Mul", pair("x3", "kappa"), ["k"], name="mul_kappa"),
        oh.make_node("Add", pair("x", "k"), ["inner"], name="add_inner"),
        const("beta", math.sqrt(2 / math.pi)), oh.make_node("Mul", pair("beta", "inner"), ["t_in"], name="mul_beta"),
        oh.make_node("Tanh", ["t_in"], ["t"], name="tanh"),
        const("one", 1.0), oh.make_node("Add", pair("t", "one"), ["a"], name="add"),
        const("half", 0.5),
    ]
    if half_first:
        return nodes + [oh.make_node("Mul", pair("x", "half"), ["h"], name="mul_half"),
                        oh.make_node("Mul", pair("h", "a"), ["y"], name="mul")]
    return nodes + [oh.make_node("Mul", pair("x", "a"), ["m"], name="mul"),
                    oh.make_node("Mul", pair("half", "m"), ["y"], name="mul_half")]


@pytest.mark.parametrize("cube", ["pow", "mul"])
@pytest.mark.parametrize("half_first", [False, True])
@pytest.mark.parametrize("swap", [False, True])
def test_gelu_tanh_fused(cube, half_first, swap):
    feeds = {"x": (rng.standard_normal((2, 8, 16)) * 3).astype(np.float32)}
    proto = model(gelu_tanh_nodes(cube, half_first, swap), feeds, ["y"])
    check(proto, feeds, ["FastGelu"])
    assert kernel_steps(proto, feeds) == ["kernel"]  # torch's gelu(approximate="tanh")


def test_gelu_tanh_not_fused_with_extra_reader_or_other_constant():
    feeds = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    check(model(gelu_tanh_nodes() + [oh.make_node("Neg", ["inner"], ["n"], name="neg")], feeds, ["y", "n"]), feeds, [])
    check(model(gelu_tanh_nodes(cube="mul"), feeds, ["y", "x2"]), feeds, [])  # the square is a graph output
    check(model(gelu_tanh_nodes(kappa=0.05), feeds, ["y"]), feeds, [])  # not GELU's constant


@pytest.mark.parametrize("backend", ["mlx", "torch", "numpy"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backend_op(backend, approximate):
    """``B.gelu`` on float32 against the float64 formulas, within 2e-6 relative and 1e-6 absolute (torch's vectorised
    erf is 2.6e-7 off near x = -3.5, where GELU is -1e-3)."""
    x = np.linspace(-8, 8, 4001).astype(np.float32)
    B = get_backend(backend)
    got = np.asarray(B.to_numpy(B.gelu(B.asarray(x), approximate)))
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        want = x64 / 2 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    else:
        want = x64 / 2 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


# -- attention ----------------------------------------------------------------------------------

B_, H, S, D = 2, 3, 5, 8
H_GQA = 6  # query heads over 2 key and value heads


def attention_feeds(mask=True):
    feeds = {
        "q": rng.standard_normal((B_, H, S, D)).astype(np.float32),
        "k": rng.standard_normal((B_, H, S, D)).astype(np.float32),
        "v": rng.standard_normal((B_, H, S, D)).astype(np.float32),
    }
    if mask:
        allowed = np.ones((B_, 1, 1, S), bool)
        allowed[1, ..., 3:] = False
        feeds["mask"] = np.where(allowed, 0, np.finfo(np.float32).min).astype(np.float32)
    return feeds


def attention_nodes(scale="div", mask_first=False, mask=True, q_name="q", perm=(0, 1, 3, 2)):
    """MatMul(Q, Transpose(K)) -> Div(sqrt d)|Mul(1/sqrt d) -> Add(mask) -> Softmax -> MatMul(V)."""
    nodes = [oh.make_node("Transpose", ["k"], ["kt"], name="kt", perm=list(perm))]
    nodes += [oh.make_node("MatMul", [q_name, "kt"], ["qk"], name="qk")]
    if scale == "div":
        nodes += [const("c", math.sqrt(D)), oh.make_node("Div", ["qk", "c"], ["s"], name="scale")]
    elif scale == "mul":
        nodes += [const("c", 1 / math.sqrt(D)), oh.make_node("Mul", ["c", "qk"], ["s"], name="scale")]
    else:
        nodes += [oh.make_node("Identity", ["qk"], ["s"], name="id")]
    if mask:
        ins = ["mask", "s"] if mask_first else ["s", "mask"]
        nodes += [oh.make_node("Add", ins, ["sm"], name="add_mask")]
    nodes += [
        oh.make_node("Softmax", ["sm" if mask else "s"], ["p"], name="softmax", axis=-1),
        oh.make_node("MatMul", ["p", "v"], ["y"], name="pv"),
    ]
    return nodes


@pytest.mark.parametrize("scale", ["div", "mul"])
@pytest.mark.parametrize("mask_first", [False, True])
def test_attention_fused(scale, mask_first):
    feeds = attention_feeds()
    check(model(attention_nodes(scale, mask_first), feeds, ["y"]), feeds, ["ScaledDotProductAttention"])


def test_attention_without_mask_or_scale():
    feeds = attention_feeds(mask=False)
    check(model(attention_nodes("mul", mask=False), feeds, ["y"]), feeds, ["ScaledDotProductAttention"])
    feeds = attention_feeds()
    nodes = [n for n in attention_nodes("none") if n.op_type != "Identity"]
    nodes[-3].input[0] = "qk"  # Add(qk, mask): no scale at all
    check(model(nodes, feeds, ["y"]), feeds, ["ScaledDotProductAttention"])


def test_attention_with_optimums_nan_guard():
    """optimum's decoders zero fully masked rows: Where(IsNaN(p), 0, p) between the Softmax and the MatMul."""
    feeds = attention_feeds()
    feeds["mask"][0, ..., :] = -np.inf  # a fully masked row: NaN probabilities, zeroed by the guard
    nodes = attention_nodes("div")
    nodes[-1].input[0] = "p0"
    nodes[-1:-1] = [const("zero", 0.0), oh.make_node("IsNaN", ["p"], ["nan"], name="isnan"),
                    oh.make_node("Where", ["nan", "zero", "p"], ["p0"], name="where")]
    check(model(nodes, feeds, ["y"]), feeds, ["ScaledDotProductAttention"])
    ref = ort.InferenceSession(model(nodes, feeds, ["y"]).SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.all(ref[0] == 0) and np.isfinite(ref).all()  # what the fused node reproduces
    nodes[-2].input[1] = "p"  # Where(IsNaN(p), p, p): not the guard, so no fusion
    check(model(nodes, feeds, ["y"]), feeds, [])


def test_attention_optimum_form_with_scale_from_shapes():
    """transformers' current export: K (b, s, h, d) transposed straight to K^T, sqrt(1/sqrt(d))
    multiplied into Q and K^T, the factor computed from Q's shape."""
    feeds = attention_feeds()
    feeds["k"] = np.ascontiguousarray(feeds["k"].transpose(0, 2, 1, 3))  # (b, s, h, d)
    nodes = [
        oh.make_node("Shape", ["q"], ["shape"], name="shape"),
        const("start", [-1], np.int64),
        const("end", [np.iinfo(np.int64).max], np.int64),
        oh.make_node("Slice", ["shape", "start", "end"], ["d"], name="slice"),
        oh.make_node("Cast", ["d"], ["df"], name="cast", to=TensorProto.FLOAT),
        oh.make_node("Sqrt", ["df"], ["sqrt_d"], name="sqrt"),
        const("one", [1.0]),
        oh.make_node("Div", ["one", "sqrt_d"], ["scale"], name="inv"),
        oh.make_node("Sqrt", ["scale"], ["f"], name="sqrt_scale"),
        oh.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 3, 1]),
        oh.make_node("Mul", ["q", "f"], ["qs"], name="mul_q"),
        oh.make_node("Mul", ["kt", "f"], ["kts"], name="mul_k"),
        oh.make_node("MatMul", ["qs", "kts"], ["qk"], name="qk"),
        oh.make_node("Add", ["qk", "mask"], ["sm"], name="add_mask"),
        oh.make_node("Softmax", ["sm"], ["p"], name="softmax", axis=-1),
        oh.make_node("MatMul", ["p", "v"], ["y"], name="pv"),
    ]
    check(model(nodes, feeds, ["y"]), feeds, ["ScaledDotProductAttention"])


def t5_attention_nodes(cast_to=TensorProto.FLOAT):
    """T5's attention: no scale, a position bias per head added to the scores, ``softmax(scores.float())``."""
    nodes = attention_nodes("none")
    nodes = [n for n in nodes if n.op_type != "Identity"]
    nodes[-3].input[0] = "qk"
    nodes[-2].input[0] = "sc"
    nodes[-2:-2] = [oh.make_node("Cast", ["sm"], ["sc"], name="cast", to=cast_to)]
    return nodes


def test_attention_with_t5s_cast_before_the_softmax():
    feeds = attention_feeds()
    feeds["mask"] = rng.standard_normal((1, H, S, S)).astype(np.float32)  # the relative position bias, per head
    check(model(t5_attention_nodes(), feeds, ["y"]), feeds, ["ScaledDotProductAttention"], tol=1e-6)
    assert kernel_steps(model(t5_attention_nodes(), feeds, ["y"]), feeds) == ["kernel"]  # B.sdpa
    # a cast to another dtype (float16 probabilities against float16 values): the chain, with the cast
    feeds["v"] = feeds["v"].astype(np.float16)
    proto = model(t5_attention_nodes(TensorProto.FLOAT16), feeds, ["y"])
    proto.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    check(proto, feeds, ["ScaledDotProductAttention"], tol=2e-3)


@pytest.mark.parametrize("mask", [None, "rows", "heads"])
def test_attention_over_a_key_and_value_the_rows_share(mask):
    """Beams reading one input's cross-attention cache: key and value of batch 1, the query's rows broadcast over
    them (ONNX MatMul). The fused node folds the rows into queries of one batch; masks by row or by head with them."""
    feeds = attention_feeds(mask=mask is not None)
    feeds["k"], feeds["v"] = feeds["k"][:1], feeds["v"][:1]
    if mask == "heads":
        feeds["mask"] = rng.standard_normal((1, H, S, S)).astype(np.float32)
    check(model(attention_nodes("div", mask=mask is not None), feeds, ["y"]), feeds, ["ScaledDotProductAttention"],
          tol=1e-6)


def test_attention_not_fused_with_extra_reader():
    feeds = attention_feeds()
    check(model(attention_nodes(), feeds, ["y", "p"]), feeds, [])  # the probabilities are an output
    extra = attention_nodes() + [oh.make_node("Neg", ["s"], ["n"], name="neg")]
    check(model(extra, feeds, ["y", "n"]), feeds, [])
    # the key transpose read elsewhere: fused, with K^T as the key (the Transpose stays)
    extra = attention_nodes() + [oh.make_node("Neg", ["kt"], ["n"], name="neg")]
    check(model(extra, feeds, ["y", "n"]), feeds, ["ScaledDotProductAttention"])


def kernel_steps(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str = "torch") -> list[str]:
    """How each step of the replay runs: "kernel" where the op's ``specialise`` chose one (the fused ``B.sdpa``)."""
    m = tm.load(proto, backend=backend)
    m(feeds)
    (exe,) = m._executables.values()
    return [exe.shortcuts.get(i, ("op",))[0] for i in range(len(exe.steps))]


def folded_heads_feeds(mask_shape=(B_, 1, 1, S)):
    """Q, K, V of rank 3, heads folded into the batch (b * h, L, E), as transformers' bmm attention has them."""
    feeds = {n: v.reshape(B_ * H, S, D) for n, v in attention_feeds(mask=False).items()}
    if mask_shape:
        allowed = rng.random(mask_shape) > 0.3
        allowed[..., 0] = True
        feeds["mask"] = np.where(allowed, 0, np.finfo(np.float32).min).astype(np.float32)
    return feeds


def folded_heads_nodes(heads_shape=(B_, H, S, S), rows_shape=(-1, S, S), probs_cast=None):
    """BART's, Whisper's, CLIP's and DETR's attention before SDPA (the Xenova exports of those years):
    ``bmm(q, k.transpose(1, 2))`` -> ``view(b, h, L, S) + mask`` -> ``view(b * h, L, S)`` -> softmax ->
    optional ``.to(value.dtype)`` -> ``bmm(., v)``."""
    nodes = [
        oh.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        oh.make_node("MatMul", ["q", "kt"], ["qk"], name="qk"),
        const("heads_shape", heads_shape, np.int64),
        oh.make_node("Reshape", ["qk", "heads_shape"], ["qk4"], name="unfold"),
        oh.make_node("Add", ["qk4", "mask"], ["sm4"], name="add_mask"),
        const("rows_shape", rows_shape, np.int64),
        oh.make_node("Reshape", ["sm4", "rows_shape"], ["sm"], name="fold"),
        oh.make_node("Softmax", ["sm"], ["p"], name="softmax", axis=-1),
    ]
    if probs_cast is not None:
        nodes += [oh.make_node("Cast", ["p"], ["pc"], name="cast", to=probs_cast)]
    return nodes + [oh.make_node("MatMul", ["pc" if probs_cast is not None else "p", "v"], ["y"], name="pv")]


@pytest.mark.parametrize("mask_shape", [(B_, 1, 1, S), (B_, 1, S, S), (B_, H, S, S)])
def test_attention_with_heads_folded_into_the_batch(mask_shape):
    feeds = folded_heads_feeds(mask_shape)
    proto = model(folded_heads_nodes(), feeds, ["y"])
    check(proto, feeds, ["ScaledDotProductAttention"], tol=1e-6)
    assert kernel_steps(proto, feeds) == ["kernel"]
    proto = model(folded_heads_nodes((-1, H, 0, S), (-1, S, 0)), feeds, ["y"])  # shapes with 0 and -1
    check(proto, feeds, ["ScaledDotProductAttention"], tol=1e-6)
    assert kernel_steps(proto, feeds) == ["kernel"]


def test_attention_with_heads_folded_and_no_mask_or_a_cast_after_the_softmax():
    """CLIP's and OWL-ViT's vision attention: no mask, ``attn_weights.to(value.dtype)`` after the softmax."""
    feeds = folded_heads_feeds(None)
    nodes = [n for n in folded_heads_nodes(probs_cast=TensorProto.FLOAT) if n.op_type not in ("Reshape", "Add")]
    nodes[nodes.index(next(n for n in nodes if n.op_type == "Softmax"))].input[0] = "qk"
    proto = model([n for n in nodes if n.op_type != "Constant"], feeds, ["y"])
    check(proto, feeds, ["ScaledDotProductAttention"], tol=1e-6)
    assert kernel_steps(proto, feeds) == ["kernel"]
    # a cast to another dtype: the chain, with the cast
    feeds["v"] = feeds["v"].astype(np.float16)
    nodes[-2].attribute[0].i = TensorProto.FLOAT16
    proto = model([n for n in nodes if n.op_type != "Constant"], feeds, ["y"])
    proto.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    check(proto, feeds, ["ScaledDotProductAttention"], tol=2e-3)
    assert kernel_steps(proto, feeds) == ["op"]


def test_attention_with_heads_folded_runs_the_chain_where_the_views_are_not_heads():
    """Scores unfolded to (b, h, 1, L * S) for a mask over all of a head's scores: not a (b, h, L, S) view."""
    feeds = folded_heads_feeds((B_, 1, 1, S * S))
    proto = model(folded_heads_nodes((B_, H, 1, S * S)), feeds, ["y"])
    check(proto, feeds, ["ScaledDotProductAttention"], tol=1e-6)
    assert kernel_steps(proto, feeds) == ["op"]


def test_attention_runs_the_chain_where_sdpa_does_not_apply():
    """A mask that broadcasts the scores up; rank-3 operands with no reshapes around the mask take the kernel as
    one batch of b * h heads."""
    feeds = {n: v.reshape(B_ * H, S, D) for n, v in attention_feeds(mask=False).items()}
    proto = model(attention_nodes(mask=False, perm=(0, 2, 1)), feeds, ["y"])
    check(proto, feeds, ["ScaledDotProductAttention"])
    assert kernel_steps(proto, feeds) == ["kernel"]
    feeds = attention_feeds()
    feeds["mask"] = rng.standard_normal((2, B_, H, S, S)).astype(np.float32)
    check(model(attention_nodes(), feeds, ["y"]), feeds, ["ScaledDotProductAttention"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_sdpa_matches_the_unfused_chain(backend):
    """B.sdpa against the chain's own ops on fp32, within 1e-6."""
    B = get_backend(backend)
    feeds = attention_feeds()
    q, k, v, mask = (B.asarray(feeds[n]) for n in ("q", "k", "v", "mask"))
    factor = np.asarray(math.sqrt(1 / math.sqrt(D)), np.float32)
    fused = scaled_dot_product_attention_1(B, q, k, v, mask, factor, factor, None, key_perm=(0, 1, 3, 2))
    fk = B.asarray(factor)
    scores = B.add(B.matmul(B.multiply(q, fk), B.multiply(B.transpose(k, (0, 1, 3, 2)), fk)), mask)
    chain = B.matmul(B.softmax(scores, -1), v)
    np.testing.assert_allclose(B.to_numpy(fused), B.to_numpy(chain), rtol=0, atol=1e-6)


# -- linear layers ----------------------------------------------------------------------------------


def linear_model(x_shape, bias_first=False, identity=False, bias_shape=None, extra_reader=False):
    w = rng.standard_normal((x_shape[-1], 5)).astype(np.float32)
    b = rng.standard_normal(bias_shape or (5,)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [oh.make_node("Identity", ["b"], ["b_shared"])] if identity else []
    bias = "b_shared" if identity else "b"
    nodes += [oh.make_node("MatMul", ["x", "w"], ["mm"], name="proj/MatMul"),
              oh.make_node("Add", [bias, "mm"] if bias_first else ["mm", bias], ["y"], name="proj/Add")]
    outputs = ["y", "mm"] if extra_reader else ["y"]
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    proto = model(nodes, feeds, outputs)
    proto.graph.initializer.extend(inits)
    return proto, feeds


@pytest.mark.parametrize("x_shape", [(7, 6), (2, 3, 6), (2, 2, 3, 6)])
@pytest.mark.parametrize("bias_first", [False, True])
@pytest.mark.parametrize("identity", [False, True])
def test_linear_fused(x_shape, bias_first, identity):
    proto, feeds = linear_model(x_shape, bias_first, identity)
    check(proto, feeds, ["MatMulAdd"])


@pytest.mark.parametrize("case", ["bias 2-D", "extra reader", "vector input"])
def test_linear_not_fused(case):
    if case == "vector input":  # fused, but a 1-D x runs as MatMul + Add (addmm needs rows)
        proto, feeds = linear_model((6,))
        check(proto, feeds, ["MatMulAdd"])
        return
    proto, feeds = linear_model((3, 6), bias_shape=(1, 5) if case == "bias 2-D" else None,
                                extra_reader=case == "extra reader")
    check(proto, feeds, [])


def linear_gelu_model(form: str, extra_reader: bool = False, dtype=np.float32):
    """``MatMul(inp, w) -> Add(b) -> x``, then GELU of ``x`` into ``y`` in ``form``: an exporter's erf or tanh chain,
    ONNX's ``Gelu`` (opset 20, either approximation) or onnxruntime's ``Gelu`` / ``FastGelu`` (with a bias or
    without)."""
    w, b = (rng.standard_normal(s).astype(dtype) for s in ((6, 5), (5,)))
    nodes = [oh.make_node("MatMul", ["inp", "w"], ["mm"], name="fc/MatMul"),
             oh.make_node("Add", ["mm", "b"], ["x"], name="fc/Add")]
    ms = {"domain": "com.microsoft"}
    nodes += {"erf": lambda: gelu_nodes(half_first=True), "tanh": lambda: gelu_tanh_nodes(cube="mul", half_first=False),
              "onnx none": lambda: [oh.make_node("Gelu", ["x"], ["y"], name="gelu")],
              "onnx tanh": lambda: [oh.make_node("Gelu", ["x"], ["y"], name="gelu", approximate="tanh")],
              "ms Gelu": lambda: [oh.make_node("Gelu", ["x"], ["y"], name="gelu", **ms)],
              "ms FastGelu": lambda: [oh.make_node("FastGelu", ["x"], ["y"], name="gelu", **ms)],
              "ms FastGelu bias": lambda: [oh.make_node("FastGelu", ["x", "b"], ["y"], name="gelu", **ms)]}[form]()
    nodes += [oh.make_node("Neg", ["x"], ["n"], name="neg")] if extra_reader else []
    feeds = {"inp": (rng.standard_normal((2, 3, 6)) * 2).astype(dtype)}
    proto = model(nodes, feeds, ["y", "n"] if extra_reader else ["y"], opset=20)
    proto.opset_import.append(oh.make_opsetid("com.microsoft", 1))
    proto.graph.initializer.extend([numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return proto, feeds


@pytest.mark.parametrize("form", ["erf", "tanh", "onnx none", "onnx tanh", "ms Gelu", "ms FastGelu"])
def test_linear_takes_in_the_gelu_after_it(form):
    proto, feeds = linear_gelu_model(form)
    check(proto, feeds, ["MatMulAdd"])  # torch: oneDNN's GELU post-op on the blocked weight; mlx: the GELU after
    (step,) = [s for s in tm.load(proto, backend="mlx").program.steps if s.spec.op_type == "MatMulAdd"]
    assert step.attrs["gelu"] == ("tanh" if "tanh" in form or "Fast" in form else "none")
    assert "fc/MatMul" in step.name and ("gelu" in step.name or "mul_half" in step.name)  # it names the originals


@pytest.mark.parametrize("case", ["extra reader", "FastGelu's bias"])
def test_linear_leaves_a_gelu_it_cannot_take_in(case):
    extra = case == "extra reader"
    proto, feeds = linear_gelu_model("ms Gelu" if extra else "ms FastGelu bias", extra_reader=extra)
    check(proto, feeds, ["MatMulAdd", "Gelu" if extra else "FastGelu"])


def test_linear_with_gelu_in_float16():
    """A half linear layer's GELU runs in float32, as ``com.microsoft::Gelu`` does, after the product."""
    proto, feeds = linear_gelu_model("onnx none", dtype=np.float16)
    proto.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    check(proto, feeds, ["MatMulAdd"], tol=2e-3)


# -- integer linear layers (quantize_dynamic) ------------------------------------------------------


def integer_linear_model(k: int, zero_point: str, rows: tuple[int, ...], cast: bool = False):
    """onnxruntime's ``quantize_dynamic`` layer: DynamicQuantizeLinear(x) -> MatMulInteger by a uint8 initializer
    weight with a zero point (one, one a column, or none), the int32 product as the output; ``cast``: the product
    cast to float32 and scaled, as that layer goes on."""
    n = 7
    w = rng.integers(0, 256, (k, n), dtype=np.uint8)
    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["xq", "w", "x_zp"]
    if zero_point != "none":
        zp = rng.integers(0, 256, (n,) if zero_point == "per column" else (), dtype=np.uint8)
        inits.append(numpy_helper.from_array(zp, "w_zp"))
        inputs.append("w_zp")
    nodes = [oh.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zp"]),
             oh.make_node("MatMulInteger", inputs, ["p" if cast else "y"], name="proj/MatMul_quant")]
    if cast:
        nodes += [oh.make_node("Cast", ["p"], ["pf"], to=TensorProto.FLOAT), oh.make_node("Mul", ["pf", "x_scale"], ["y"])]
    feeds = {"x": rng.standard_normal((*rows, k)).astype(np.float32) * 3}
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, feeds["x"].shape)],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT if cast else TensorProto.INT32, None)], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), feeds


@pytest.mark.parametrize("k", [200, 256, 600, 1536])  # one chunk of 256 terms, exactly one, several with a short last
@pytest.mark.parametrize("zero_point", ["scalar", "per column", "none"])
@pytest.mark.parametrize("rows", [(1,), (2, 5)])
def test_integer_linear_fused_and_exact(k, zero_point, rows):
    """The fused layer's int32 products equal onnxruntime's exactly (sums of up to 1536 products of 255 x 255 pass
    2**24, where float32 stops holding integers: the chunks keep each float sum below it)."""
    proto, feeds = integer_linear_model(k, zero_point, rows)
    check(proto, feeds, ["IntegerLinear"], tol=0)


@pytest.mark.parametrize("k", [200, 777])  # one range; four, whose float32 sum at 255 x 255 is not the cast int32 sum
@pytest.mark.parametrize("zero_point", ["scalar", "none"])
def test_integer_linear_takes_in_its_cast_to_float(k, zero_point):
    """``Cast(MatMulInteger(...), to=float)`` is one IntegerLinear: the same float32 values as onnxruntime's, exactly
    (a product of several ranges adds them in int32 first, so that the cast rounds the exact sum as ONNX's does)."""
    proto, feeds = integer_linear_model(k, zero_point, (2, 3), cast=True)
    check(proto, feeds, ["IntegerLinear"], tol=0)
    if k > 258:  # sums past 2**24 where float32 rounds: every input and weight 255 above its zero point
        proto.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.full((k, 7), 255, np.uint8), "w"))
        if zero_point != "none":
            proto.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array(0, np.uint8), "w_zp"))
        check(proto, {"x": np.full_like(feeds["x"], 2.0)}, ["IntegerLinear"], tol=0)
    assert "Cast" not in [s.spec.op_type for s in tm.load(proto).program.steps]


@pytest.mark.parametrize("w_type", [np.int8, np.uint8])
@pytest.mark.parametrize("a_zero_point", [True, False])
def test_integer_linear_of_int8_inputs(w_type, a_zero_point):
    """An int8 left operand (fed, its zero point one value or none) by an int8 or uint8 weight with a zero point a
    column: the int8 GEMM's corrections (torch) and the float32 ranges (mlx) give onnxruntime's int32 exactly."""
    k, n = 700, 9
    info = np.iinfo(w_type)
    inits = [numpy_helper.from_array(rng.integers(info.min, info.max + 1, (k, n)).astype(w_type), "w"),
             numpy_helper.from_array(rng.integers(info.min, info.max + 1, n).astype(w_type), "w_zp")]
    inputs = ["a", "w", "a_zp" if a_zero_point else "", "w_zp"]
    if a_zero_point:
        inits.append(numpy_helper.from_array(np.array(-37, np.int8), "a_zp"))
    feeds = {"a": rng.integers(-128, 128, (2, 5, k)).astype(np.int8)}
    graph = oh.make_graph([oh.make_node("MatMulInteger", inputs, ["y"])], "g",
                          [oh.make_tensor_value_info("a", TensorProto.INT8, feeds["a"].shape)],
                          [oh.make_tensor_value_info("y", TensorProto.INT32, None)], inits)
    check(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), feeds, ["IntegerLinear"], tol=0)


def test_integer_linear_not_fused_with_a_fed_weight():
    proto, feeds = integer_linear_model(300, "scalar", (3,))
    w = onnx.numpy_helper.to_array(proto.graph.initializer[0])
    del proto.graph.initializer[0]
    proto.graph.input.append(oh.make_tensor_value_info("w", TensorProto.UINT8, w.shape))
    check(proto, {**feeds, "w": w}, [], tol=0)


def test_integer_linear_exact_at_the_float32_limit():
    """Every input 255 above its zero point and every weight 255 above its: a range of K holds 258 rows (258 * 255 *
    255 <= 2**24 < 259 * 255 * 255), and the product over 1,536 rows is still exact."""
    proto, feeds = integer_linear_model(1536, "none", (2, 3))
    proto.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.full((1536, 7), 255, np.uint8), "w"))
    feeds = {"x": np.full_like(feeds["x"], 2.0)}  # zero point 0, every value quantized to 255
    check(proto, feeds, ["IntegerLinear"], tol=0)
    ranges = [(lo, hi) for lo, hi, _ in weight_chunks(get_backend("mlx"), np.full((1536, 7), 255, np.uint8), None)]
    assert ranges == [(lo, min(lo + 258, 1536)) for lo in range(0, 1536, 258)]


def test_integer_linear_one_range_for_trained_codes():
    """``quantize_dynamic``'s codes of a normal weight (scale from its largest value) are mostly small: one float32
    product holds all 1,536 rows exactly, against six of at most 256 rows before."""
    weight = rng.standard_normal((1536, 576)).astype(np.float32)
    codes = np.round(weight / np.abs(weight).max() * 127).astype(np.int8)
    assert len(weight_chunks(get_backend("mlx"), codes, np.zeros((), np.int8))) == 1
    proto, feeds = integer_linear_model(1536, "none", (4,))
    proto.graph.initializer[0].CopyFrom(numpy_helper.from_array(codes[:, :7], "w"))
    check(proto, feeds, ["IntegerLinear"], tol=0)


# -- RMSNorm ---------------------------------------------------------------------------------------


def rms_norm_model(opset=17, half=False, extra_reader=False, eps_input=False):
    """optimum's Llama RMSNorm: Cast to float, Pow, ReduceMean, Add(eps), Sqrt, Div(1, .), Mul(x), Cast back,
    Mul(weight); the float input also feeds a residual Add, as in a decoder layer."""
    dtype = np.float16 if half else np.float32
    feeds = {"x": rng.standard_normal((2, 3, 16)).astype(dtype)}
    if eps_input:
        feeds["eps"] = np.array(1e-6, np.float32)
    back = TensorProto.FLOAT16 if half else TensorProto.FLOAT
    nodes = [oh.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT), const("two", 2.0), const("one", 1.0),
             oh.make_node("Pow", ["xf", "two"], ["sq"])]
    if opset >= 18:
        nodes += [const("axes", [-1], np.int64), oh.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1)]
    else:
        nodes.append(oh.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1))
    if not eps_input:
        nodes.append(const("eps", 1e-6))
    nodes += [oh.make_node("Add", ["ms", "eps"], ["a"]), oh.make_node("Sqrt", ["a"], ["r"]),
              oh.make_node("Div", ["one", "r"], ["inv"]), oh.make_node("Mul", ["xf", "inv"], ["n"]),
              oh.make_node("Cast", ["n"], ["nc"], to=back), oh.make_node("Mul", ["w", "nc"], ["y"]),
              oh.make_node("Cast", ["y"], ["out"], to=TensorProto.FLOAT), oh.make_node("Add", ["xf", "out"], ["res"])]
    proto = model(nodes, feeds, ["out", "res"] + (["inv"] if extra_reader else []), opset)
    proto.graph.initializer.append(numpy_helper.from_array(rng.standard_normal(16).astype(dtype), "w"))
    return proto, feeds


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("half", [False, True])
def test_rms_norm_fused(opset, half):
    proto, feeds = rms_norm_model(opset, half)
    check(proto, feeds, ["RMSNorm"], tol=2e-3 if half else 1e-5)


@pytest.mark.parametrize("case", ["extra reader", "eps fed"])
def test_rms_norm_not_fused(case):
    proto, feeds = rms_norm_model(extra_reader=case == "extra reader", eps_input=case == "eps fed")
    check(proto, feeds, [])


# -- GroupNorm (torch's export of nn.GroupNorm) ---------------------------------------------------


def group_norm_model(groups=2, channels=6, bias=True, weight_shape=None, scale=1.0, fed_weight=False):
    """torch's export of ``nn.GroupNorm(groups, channels)`` on (2, channels, 5, 7) ``x``: Reshape [0, G, -1] ->
    InstanceNormalization(ones, zeros) -> Reshape(Shape(x)) -> Mul(weight (C, 1, 1)) -> Add(bias (C, 1, 1)).
    ``weight_shape`` overrides the weight's shape, ``scale`` the instance norm's scale, ``fed_weight`` makes the
    weight an input."""
    feeds = {"x": (rng.standard_normal((2, channels, 5, 7)) * 3 + 1).astype(np.float32)}
    weight = rng.standard_normal(weight_shape or (channels, 1, 1)).astype(np.float32)
    nodes = [const("groups", [0, groups, -1], np.int64), oh.make_node("Reshape", ["x", "groups"], ["r"], name="r"),
             const("scale", np.full(groups, scale)), const("zeros", np.zeros(groups)),
             oh.make_node("InstanceNormalization", ["r", "scale", "zeros"], ["n"], name="norm", epsilon=1e-5),
             oh.make_node("Shape", ["x"], ["shape"], name="shape"),
             oh.make_node("Reshape", ["n", "shape"], ["back"], name="back"),
             oh.make_node("Mul", ["back", "w"], ["y" if not bias else "m"], name="mul")]
    if bias:
        nodes.append(oh.make_node("Add", ["m", "b"], ["y"], name="add"))
    if fed_weight:
        feeds["w"] = weight
    proto = model(nodes, feeds, ["y"])
    if not fed_weight:
        proto.graph.initializer.append(numpy_helper.from_array(weight, "w"))
    proto.graph.initializer.append(numpy_helper.from_array(rng.standard_normal((channels, 1, 1)).astype(np.float32), "b"))
    return proto, feeds


@pytest.mark.parametrize("groups", [1, 2, 6])
@pytest.mark.parametrize("bias", [True, False])
def test_group_norm_fused(groups, bias):
    proto, feeds = group_norm_model(groups, bias=bias)
    check(proto, feeds, ["GroupNorm"])


def test_group_norm_of_another_weight_shape_runs_the_chain():
    """A weight along the last axis (7,) is fused at load, computed as the chain at run time."""
    proto, feeds = group_norm_model(weight_shape=(7,))
    check(proto, feeds, ["GroupNorm"])


@pytest.mark.parametrize("case", ["scaled norm", "fed weight"])
def test_group_norm_not_fused(case):
    proto, feeds = group_norm_model(scale=2.0 if case == "scaled norm" else 1.0, fed_weight=case == "fed weight")
    check(proto, feeds, [])


def test_group_norm_as_torch_exports_it():
    """``nn.GroupNorm`` with trained-like weights, exported by torch's ONNX exporter: one fused node, equal to the
    module's own output."""
    torch = pytest.importorskip("torch")
    import io

    module = torch.nn.GroupNorm(4, 8).eval()
    with torch.no_grad():
        module.weight.normal_(), module.bias.normal_()
    x = (rng.standard_normal((2, 8, 300)) * 2 + 0.5).astype(np.float32)
    buffer = io.BytesIO()
    torch.onnx.export(module, (torch.from_numpy(x),), buffer, dynamo=False, opset_version=17, input_names=["x"])
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    for backend in BACKENDS:
        m = tm.load(onnx.load_from_string(buffer.getvalue()), backend=backend)
        assert fused_ops(m) == ["GroupNorm"], backend
        (got,) = m({"x": x}).values()
        np.testing.assert_allclose(np.asarray(m.backend.to_numpy(got)), want, rtol=1e-5, atol=1e-5, err_msg=backend)


@pytest.mark.parametrize("backend", ["mlx", "torch", "numpy"])
@pytest.mark.parametrize("shape, groups", [((2, 6, 5, 7), 3), ((1, 4, 9), 4), ((3, 8), 2)])
def test_group_norm_backend_op(backend, shape, groups):
    """``B.group_norm`` against torch's ``group_norm``, with and without the per-channel weight and bias."""
    torch = pytest.importorskip("torch")
    x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
    weight, bias = rng.standard_normal((2, shape[1])).astype(np.float32)
    B = get_backend(backend)
    for w, b in ((weight, bias), (None, None)):
        vectors = [None if v is None else torch.from_numpy(v) for v in (w, b)]
        want = torch.nn.functional.group_norm(torch.from_numpy(x), groups, *vectors, 1e-5).numpy()
        vectors = [None if v is None else B.asarray(v) for v in (w, b)]
        got = B.group_norm(B.asarray(x), groups, *vectors, 1e-5)
        np.testing.assert_allclose(np.asarray(B.to_numpy(got)), want, rtol=1e-5, atol=1e-5)


# -- convolutions with a folded batch norm, a residual and ReLU ------------------------------------


def conv_model(chain=("mul", "add", "residual", "relu"), bias=False, pads=(1, 1, 1, 1), group=1, scale_shape=None,
               residual_shape=None, x_shape=(2, 4, 9, 11), fed_weight=False, extra_reader=False):
    """``Conv(x, w[, b])`` 3 x 3 to 6 channels, then the nodes ``chain`` names in order: ``Mul(scale)`` and ``Add(shift)``
    ((1, 6, 1, 1) initializers: a frozen batch norm as DETR's export writes it, or ``scale_shape``), ``Add(z)`` (a
    residual input of the output's shape, or ``residual_shape``), ``Relu``, and ``Clip`` by constants (0 and 6:
    MobileNet's ReLU6, 0 alone, 6 alone)."""
    c = x_shape[1]
    feeds = {"x": (rng.standard_normal(x_shape) * 2).astype(np.float32)}
    inits = {"w": rng.standard_normal((6, c // group, 3, 3)).astype(np.float32),
             "scale": (rng.random(scale_shape or (1, 6, 1, 1)) + 0.5).astype(np.float32),
             "shift": rng.standard_normal((1, 6, 1, 1)).astype(np.float32),
             "b": rng.standard_normal(6).astype(np.float32)}
    conv = oh.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["v0"], name="conv", pads=list(pads),
                        group=group, kernel_shape=[3, 3])
    nodes, value = [conv, const("zero", 0.0), const("six", 6.0)], "v0"
    for i, step in enumerate(chain, 1):
        op, others = {"mul": ("Mul", ["scale"]), "add": ("Add", ["shift"]), "residual": ("Add", ["z"]),
                      "relu": ("Relu", []), "relu6": ("Clip", ["zero", "six"]), "min": ("Clip", ["zero"]),
                      "max": ("Clip", ["", "six"])}[step]
        nodes.append(oh.make_node(op, [value, *others], [f"v{i}"], name=step))
        value = f"v{i}"
    nodes.append(oh.make_node("Identity", [value], ["y"], name="out"))
    outputs = ["y"]
    if extra_reader:
        nodes.append(oh.make_node("Neg", ["v0"], ["extra"], name="extra"))
        outputs.append("extra")
    if "residual" in chain:
        out = [x_shape[0], 6, x_shape[2] + pads[0] + pads[2] - 2, x_shape[3] + pads[1] + pads[3] - 2]
        feeds["z"] = rng.standard_normal(residual_shape or out).astype(np.float32)
    if fed_weight:
        feeds["w"] = inits.pop("w")
    proto = model(nodes, feeds, outputs)
    proto.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in inits.items())
    return proto, feeds


@pytest.mark.parametrize("chain", [("mul", "add", "residual", "relu"), ("mul", "add", "relu"), ("mul", "add"),
                                   ("add", "relu"), ("residual", "relu"), ("relu",), ("residual",), ("mul",),
                                   ("relu6",), ("mul", "add", "relu6"), ("residual", "relu6"), ("min",), ("max",)])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_fused(chain, bias):
    """Each chain is one node, equal to onnxruntime's unfused graph within float32 rounding (the fold rounds the
    weights' products once more)."""
    proto, feeds = conv_model(chain, bias=bias)
    check(proto, feeds, ["FusedConv"], tol=2e-5)


@pytest.mark.parametrize("case", ["asymmetric pads", "grouped", "one scale", "broadcast residual", "fed weight"])
def test_conv_fused_in_other_forms(case):
    """Pads that differ at the two ends, groups, one scale for every channel: fused and folded. A residual that
    broadcasts is fused and run as the ops; a weight fed as an input is fused, not folded."""
    proto, feeds = conv_model(
        ("residual", "relu") if case in ("broadcast residual", "fed weight") else ("mul", "add", "relu"),
        pads=(0, 1, 2, 1) if case == "asymmetric pads" else (1, 1, 1, 1), group=2 if case == "grouped" else 1,
        scale_shape=(1,) if case == "one scale" else None,
        residual_shape=(1, 6, 1, 11) if case == "broadcast residual" else None, fed_weight=case == "fed weight")
    fused = tm.load(proto, backend="numpy").program.steps
    folded = any(s.spec.op_type == "FusedConv" and s.inputs[1].endswith("folded_weight") for s in fused)
    assert folded == (case in ("asymmetric pads", "grouped", "one scale")), case
    check(proto, feeds, ["FusedConv"], tol=2e-5)
    # on torch's replay the geometry is worked out once, where the residual is the output's shape
    assert kernel_steps(proto, feeds)[0] == ("op" if case == "broadcast residual" else "kernel")  # then the Identity


def test_conv_blocks_shortcut_and_last_convolution_both_fused():
    """A ResNet block's end: the shortcut's convolution (first in the graph) and the block's last one, each with its
    batch norm, summed and ReLU'd. The shortcut's is fused with its batch norm alone, the last one takes the sum
    and the ReLU: two nodes, neither left as a plain Conv."""
    x = (rng.standard_normal((1, 4, 8, 8)) * 2).astype(np.float32)
    inits = {}
    nodes = []
    for branch in ("short", "last"):
        inits[f"{branch}_w"] = rng.standard_normal((6, 4, 1, 1)).astype(np.float32)
        inits[f"{branch}_s"] = (rng.random((1, 6, 1, 1)) + 0.5).astype(np.float32)
        inits[f"{branch}_t"] = rng.standard_normal((1, 6, 1, 1)).astype(np.float32)
        nodes += [oh.make_node("Conv", ["x", f"{branch}_w"], [f"{branch}_c"], name=f"{branch}_conv"),
                  oh.make_node("Mul", [f"{branch}_c", f"{branch}_s"], [f"{branch}_m"], name=f"{branch}_mul"),
                  oh.make_node("Add", [f"{branch}_m", f"{branch}_t"], [f"{branch}_a"], name=f"{branch}_add")]
    nodes += [oh.make_node("Add", ["last_a", "short_a"], ["sum"], name="sum"),
              oh.make_node("Relu", ["sum"], ["y"], name="relu")]
    proto = model(nodes, {"x": x}, ["y"])
    proto.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in inits.items())
    check(proto, {"x": x}, ["FusedConv", "FusedConv"], tol=2e-5)


@pytest.mark.parametrize("case", ["same padding", "zero value", "with own pads", "nonzero value", "channel axis",
                                  "reflect", "from shapes"])
def test_pad_before_conv_fused(case):
    """``Pad`` -> ``Conv`` -> ``Relu`` is one node. Zeros on the spatial axes join the convolution's padding
    (TensorFlow's "same" padding of MobileNet's export: one more row and column at the end); any other ``Pad`` (a
    value, the channel axis, another mode) runs before the convolution. Equal to onnxruntime either way."""
    x = rng.standard_normal((1, 4, 9, 8)).astype(np.float32)
    amounts = {"channel axis": [0, 1, 0, 0, 0, 1, 1, 1]}.get(case, [0, 0, 0, 0, 0, 0, 1, 1])
    nodes = [const("pads", amounts, np.int64), const("value", 0.0 if case == "zero value" else 0.5)]
    pad_inputs = ["x", "pads", "value"] if case in ("zero value", "nonzero value") else ["x", "pads"]
    if case == "from shapes":  # the amounts computed from the input's shape, as the export computes them
        nodes += [oh.make_node("Shape", ["x"], ["shape"], name="shape"), const("mod", 2, np.int64),
                  oh.make_node("Mod", ["shape", "mod"], ["odd"], name="odd"),
                  oh.make_node("Concat", ["odd", "odd"], ["computed"], name="computed", axis=0)]
        pad_inputs = ["x", "computed"]
    nodes += [oh.make_node("Pad", pad_inputs, ["p"], name="pad", mode="reflect" if case == "reflect" else "constant"),
              oh.make_node("Conv", ["p", "w"], ["c"], name="conv", kernel_shape=[3, 3], strides=[2, 2],
                           pads=[1, 0, 1, 0] if case == "with own pads" else [0, 0, 0, 0]),
              oh.make_node("Relu", ["c"], ["y"], name="relu")]
    proto = model(nodes, {"x": x}, ["y"])
    channels = 4 + amounts[1] + amounts[5]
    proto.graph.initializer.append(numpy_helper.from_array(rng.standard_normal((6, channels, 3, 3)).astype(np.float32),
                                                           "w"))
    check(proto, {"x": x}, ["FusedConv"])
    steps = tm.load(proto, backend="numpy").program.steps
    assert not any(step.spec.op_type == "Pad" for step in steps)
    # the replay on torch: oneDNN's call with the geometry worked out once where the Pad joins the padding (the
    # amounts computed from this input's shape pad its batch axis too)
    joined = case in ("same padding", "zero value", "with own pads")
    assert kernel_steps(proto, {"x": x}) == ["kernel" if joined else "op"]
    value = np.array(0.5 if case == "nonzero value" else 0.0, np.float32)
    mode = "reflect" if case == "reflect" else "constant"
    conv = {"pads": [1, 0, 1, 0] if case == "with own pads" else [0, 0, 0, 0]}
    padded, attrs = _with_padding(get_backend("numpy"), x, np.array(amounts), value, None, mode, conv)
    if case in ("same padding", "zero value", "with own pads", "from shapes"):  # joined: no copy of x
        assert padded is x and attrs["pads"] == [conv["pads"][0], 0, conv["pads"][2] + 1, 1]
    else:
        assert padded.shape != x.shape and attrs == conv


def test_fused_conv_kernel_runs_the_op_where_the_backend_has_no_fused_call():
    """``Pad`` (joined) -> ``Conv`` -> residual ``Add`` -> ``Clip(0, 6)``: oneDNN has no residual with a ReLU6, so the
    torch replay's kernel runs the ops one after the other on the joined padding (not joined twice),
    equal to onnxruntime at every call."""
    x = rng.standard_normal((1, 4, 9, 8)).astype(np.float32)
    z = rng.standard_normal((1, 6, 4, 4)).astype(np.float32)
    nodes = [const("pads", [0, 0, 0, 0, 0, 0, 1, 1], np.int64), const("zero", 0.0), const("six", 6.0),
             oh.make_node("Pad", ["x", "pads"], ["p"], name="pad"),
             oh.make_node("Conv", ["p", "w"], ["c"], name="conv", kernel_shape=[3, 3], strides=[2, 2]),
             oh.make_node("Add", ["c", "z"], ["s"], name="residual"),
             oh.make_node("Clip", ["s", "zero", "six"], ["y"], name="relu6")]
    proto = model(nodes, {"x": x, "z": z}, ["y"])
    proto.graph.initializer.append(numpy_helper.from_array(rng.standard_normal((6, 4, 3, 3)).astype(np.float32), "w"))
    (want,) = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x, "z": z})
    m = tm.load(proto, backend="torch")
    for _ in range(3):  # the planning walk, the replay written out, the replay
        (got,) = m({"x": x, "z": z}).values()
        np.testing.assert_allclose(np.asarray(m.backend.to_numpy(got)), want, rtol=1e-5, atol=1e-5)
    (exe,) = m._executables.values()
    assert [form for form, _ in exe.shortcuts.values()] == ["kernel"] and exe._code is not None  # no fallback walk


@pytest.mark.parametrize("case", ["extra reader", "scale per row"])
def test_conv_not_fused(case):
    """The convolution's output read by another node too, or scaled along another axis than the channels'."""
    proto, feeds = conv_model(("mul", "add", "relu"), extra_reader=case == "extra reader",
                              scale_shape=(1, 1, 9, 1) if case == "scale per row" else None)
    check(proto, feeds, [])


def test_conv_fold_drops_the_replaced_weight():
    """The folded weight replaces the file's in the graph, in the weights read apart from the proto too."""
    from transmuter_mlx.converters.fusion import fuse

    proto, _ = conv_model(("mul", "add", "relu"))
    weights = {"w": numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == "w"))}
    fused, _ = fuse(proto, {"": 17}, weights=weights)
    names = {t.name for t in fused.graph.initializer}
    assert "w" not in names and "w" not in weights and "v3/folded_weight" in weights and "v3/folded_weight" in names
    assert {"w", "scale"} <= {t.name for t in proto.graph.initializer}  # the caller's proto is not edited


@pytest.mark.parametrize("pads", [[(1, 1), (1, 1)], [(0, 2), (1, 0)]])
@pytest.mark.parametrize("groups", [1, 2])
def test_fused_conv_backend_op(pads, groups):
    """torch's ``B.fused_conv`` (oneDNN's post-ops, on the CPU) against torch's conv2d, bias, residual and ReLU or clip
    one after the other, with and without each."""
    torch = pytest.importorskip("torch")
    B = get_backend("torch")
    x = torch.from_numpy(rng.standard_normal((2, 4, 10, 9)).astype(np.float32))
    w = torch.from_numpy(rng.standard_normal((6, 4 // groups, 3, 3)).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal(6).astype(np.float32))
    padded = torch.nn.functional.pad(x, [v for p in reversed(pads) for v in p])
    plain = torch.nn.functional.conv2d(padded, w, None, (2, 1), 0, (1, 2), groups)
    z = torch.from_numpy(rng.standard_normal(tuple(plain.shape)).astype(np.float32))
    relu, relu6 = (0.0, math.inf), (0.0, 6.0)
    for bias, add, clip in [(b, z, relu), (b, None, relu), (None, z, None), (None, None, None), (b, None, None),
                            (b, None, relu6), (None, None, (-1.0, math.inf))]:
        got = B.fused_conv(x, w, bias, add, clip, (2, 1), pads, (1, 2), groups)
        if got is None:
            pytest.skip("no oneDNN convolution in this torch")
        want = plain + (0 if bias is None else b.view(1, -1, 1, 1)) + (0 if add is None else z)
        want = want if clip is None else want.clamp(*clip)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    assert B.fused_conv(x, w, b, z, relu6, (2, 1), pads, (1, 2), groups) is None  # oneDNN: ReLU alone after a sum


def test_torch_convolutions_run_channels_last():
    """A 2-D convolution on torch's CPU reads and writes channels-last memory (oneDNN's fastest), the same values
    as NCHW's."""
    torch = pytest.importorskip("torch")
    B = get_backend("torch")
    x = torch.from_numpy(rng.standard_normal((1, 8, 12, 10)).astype(np.float32))
    w = torch.from_numpy(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
    got = B.conv(x, w, (1, 1), [(1, 1), (1, 1)], (1, 1), 1)
    if torch.ops.mkldnn._is_mkldnn_acl_supported() or not torch.backends.mkldnn.is_available():
        pytest.skip("oneDNN's x86 convolutions only")
    assert got.is_contiguous(memory_format=torch.channels_last)
    want = torch.nn.functional.conv2d(x, w, None, 1, 1)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def packed_conv_model(shared_geometry=True):
    """Three 2-D convolutions with weights large enough to be held on the device apart (``share_weights``): a plain
    ``Conv`` of stride 2 (no chain after it: ``B.conv``), one with a frozen batch norm and a ReLU (``FusedConv``), a
    depthwise one; and a weight read by two convolutions, of one geometry or (``shared_geometry=False``) of two."""
    c = 16
    w = {name: (rng.standard_normal(shape) * 0.2).astype(np.float32) for name, shape in
         (("w_plain", (32, c, 3, 3)), ("w_fused", (32, 32, 3, 3)), ("w_dw", (32, 1, 3, 3)), ("w_shared", (32, 32, 1, 1)))}
    w["w_dw"] = np.repeat(w["w_dw"], 40, axis=0)[:32]  # 288 values: below share_weights' size, stays plain
    scale, shift = (rng.random((1, 32, 1, 1)) + 0.5).astype(np.float32), rng.standard_normal((1, 32, 1, 1)).astype(np.float32)
    nodes = [
        oh.make_node("Conv", ["x", "w_plain"], ["a"], name="plain", pads=[1, 1, 1, 1], strides=[2, 2]),
        oh.make_node("Conv", ["a", "w_fused"], ["b0"], name="fused", pads=[1, 1, 1, 1]),
        oh.make_node("Mul", ["b0", "scale"], ["b1"], name="bn_mul"), oh.make_node("Add", ["b1", "shift"], ["b2"], name="bn_add"),
        oh.make_node("Relu", ["b2"], ["b"], name="relu"),
        oh.make_node("Conv", ["b", "w_dw"], ["d"], name="depthwise", pads=[1, 1, 1, 1], group=32),
        oh.make_node("Conv", ["d", "w_shared"], ["e"], name="shared_1"),
        oh.make_node("Conv", ["e", "w_shared"], ["y"], name="shared_2", strides=[1, 1] if shared_geometry else [2, 2]),
    ]
    feeds = {"x": rng.standard_normal((2, c, 17, 15)).astype(np.float32)}
    proto = model(nodes, feeds, ["y"])
    for dim, name in zip(proto.graph.input[0].type.tensor_type.shape.dim, ("n", "c", "h", "w")):
        if name != "c":
            dim.dim_param = name  # any batch and size
    proto.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in
                                   {**w, "scale": scale, "shift": shift}.items())
    return proto, feeds


@pytest.mark.parametrize("shared_geometry", [True, False])
def test_torch_holds_convolution_weights_in_onednns_layout(shared_geometry):
    """On torch's x86 CPU a 2-D convolution's float32 weight is held once, in oneDNN's layout (``B.conv_weight``),
    behind a zero-strided stand-in: plain and fused convolutions read it there, within 1e-5 of onnxruntime, and its
    values come back through ``to_numpy``, also after calls of another input size (the plain weight again).
    A weight read by convolutions of two geometries stays plain."""
    torch = pytest.importorskip("torch")
    if torch.ops.mkldnn._is_mkldnn_acl_supported() or not torch.backends.mkldnn.is_available():
        pytest.skip("oneDNN's x86 convolutions only")
    proto, feeds = packed_conv_model(shared_geometry)
    check(proto, feeds, ["FusedConv"])
    m = tm.load(proto, backend="torch")
    ort_session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    other = {"x": rng.standard_normal((1, 16, 23, 20)).astype(np.float32)}
    for f in (feeds, other, feeds):  # laid out for the first size, plain again after the second
        np.testing.assert_allclose(m.backend.to_numpy(m(f)["y"]), ort_session.run(None, f)[0], rtol=1e-5, atol=1e-5)
    program = m.program
    held = {"w_plain", "b/folded_weight", "w_shared"} if shared_geometry else {"w_plain", "b/folded_weight"}
    assert program.device_only == held  # the depthwise weight is too small to be held apart
    for name in held - {"b/folded_weight"}:
        device = program.device_constants[(name, "torch")]
        assert not any(device.stride())
        want = numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == name))
        np.testing.assert_array_equal(m.backend.to_numpy(device), want)
    if not shared_geometry:
        assert "w_shared" not in program.device_only


# -- rotary embedding, rotate-half form -----------------------------------------------------------


def rotate_half_model(bounds="shape", first=(0, None), extra_reader=False):
    """optimum's Llama rotary embedding of (b, heads, s, d) ``x``: ``x * cos + Concat(-x[.., d/2:], x[.., :d/2]) *
    sin``, the half computed from the shape (``bounds="shape"``, as exported) or constants; ``first`` overrides the
    first Slice's (start, end) to take something other than the first half."""
    feeds = {"x": rng.standard_normal((2, 3, 5, 8)).astype(np.float32),
             "cos": rng.standard_normal((2, 1, 5, 8)).astype(np.float32),
             "sin": rng.standard_normal((2, 1, 5, 8)).astype(np.float32)}
    big = np.iinfo(np.int64).max
    nodes = [const("zero", [0], np.int64), const("axis", [-1], np.int64), const("step", [1], np.int64),
             const("big", [big], np.int64)]
    if bounds == "shape":
        nodes += [oh.make_node("Shape", ["x"], ["shape"]), const("three", 3, np.int64), const("two", 2, np.int64),
                  oh.make_node("Gather", ["shape", "three"], ["d"], axis=0), oh.make_node("Div", ["d", "two"], ["h0"]),
                  const("unsq", [0], np.int64), oh.make_node("Unsqueeze", ["h0", "unsq"], ["half"])]
    else:
        nodes.append(const("half", [4], np.int64))
    start, end = first
    if start is not None:
        nodes.append(const("start1", [start], np.int64))
    if end is not None:
        nodes.append(const("end1", [end], np.int64))
    nodes += [oh.make_node("Slice", ["x", "start1" if start is not None else "zero", "end1" if end is not None else "half",
                                     "axis", "step"], ["x1"]),
              oh.make_node("Slice", ["x", "half", "big", "axis", "step"], ["x2"]),
              oh.make_node("Neg", ["x2"], ["n"]), oh.make_node("Concat", ["n", "x1"], ["r"], axis=-1),
              oh.make_node("Mul", ["x", "cos"], ["a"]), oh.make_node("Mul", ["r", "sin"], ["b"]),
              oh.make_node("Add", ["a", "b"], ["y"])]
    return model(nodes, feeds, ["y"] + (["r"] if extra_reader else [])), feeds


@pytest.mark.parametrize("bounds", ["shape", "constants"])
def test_rotate_half_fused(bounds):
    proto, feeds = rotate_half_model(bounds)
    check(proto, feeds, ["RotateHalfEmbedding"])


def test_rotate_half_other_slices_run_the_chain():
    """A first Slice of [1:5) is fused at load (its bounds are host values) and computed as the chain at run time."""
    proto, feeds = rotate_half_model("constants", first=(1, 5))
    check(proto, feeds, ["RotateHalfEmbedding"])


def test_rotate_half_not_fused_with_an_extra_reader():
    proto, feeds = rotate_half_model(extra_reader=True)
    check(proto, feeds, [])


@pytest.mark.parametrize("backend", ["mlx", "torch", "numpy"])
def test_rotate_half_backend_op(backend):
    """``B.rotate_half_embedding`` against transformers' ``apply_rotary_pos_emb`` (its ``rotate_half``)."""
    torch = pytest.importorskip("torch")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    q, k = rng.standard_normal((2, 2, 3, 5, 8)).astype(np.float32)
    cos, sin = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    want_q, want_k = apply_rotary_pos_emb(*(torch.from_numpy(a) for a in (q, k, cos, sin)))
    B = get_backend(backend)
    for x, want in ((q, want_q), (k, want_k)):
        got = B.rotate_half_embedding(B.asarray(x), B.asarray(cos[:, None]), B.asarray(sin[:, None]))
        np.testing.assert_allclose(np.asarray(B.to_numpy(got)), want.numpy(), rtol=1e-6, atol=1e-6)


# -- the MiniLM-shaped BERT fixture ---------------------------------------------------------------


def test_minilm_fixture_fused():
    from tests.fixtures import MINILM_BERT, build

    path = build(MINILM_BERT) / "onnx/model.onnx"
    ids = rng.integers(5, 500, size=(2, 24)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 15:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    for backend in BACKENDS:
        m = tm.load(path, backend=backend)
        ops = fused_ops(m)
        assert ops.count("ScaledDotProductAttention") == 6 and "Gelu" not in ops, (backend, ops)
        assert ops.count("MatMulAdd") == 36, (backend, ops)  # six linear layers a block, biases via Identity
        assert sum(s.attrs.get("gelu") == "none" for s in m.program.steps) == 6  # the up-projections' GELU
        assert not any(s.spec.op_type in ("Erf", "Softmax") for s in m.program.steps)
        got = [np.asarray(m.backend.to_numpy(v)) for v in m(feeds).values()]
        for r, g in zip(ref, got):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4, err_msg=backend)


def test_in_place_fusion_rewrites_the_nodes_as_the_copy_does():
    """A proto read for the model is fused in place (no copy of its weights); the nodes are the copy's."""
    from tests.fixtures import MINILM_BERT, build
    from transmuter_mlx.converters.fusion import fuse

    path = build(MINILM_BERT) / "onnx/model.onnx"
    original = onnx.load(str(path))
    opsets = {o.domain: o.version for o in original.opset_import}
    copied, copied_opsets = fuse(original, opsets)
    assert copied is not original and len(copied.graph.node) < len(original.graph.node)
    edited, edited_opsets = fuse(original, opsets, in_place=True)
    assert edited is original and edited_opsets == copied_opsets
    assert [n.SerializeToString() for n in edited.graph.node] == [n.SerializeToString() for n in copied.graph.node]
    assert [o.SerializeToString() for o in edited.opset_import] == [o.SerializeToString() for o in copied.opset_import]


def repeated_heads_model(target="grouped", shape_reader=True, mask_shape=None):
    """transformers' repeat_kv before the attention: K and V of 2 heads, Unsqueeze(2) -> Expand -> Reshape
    to the query's 6 heads (``target="grouped"``), or to a longer key sequence (``"sequence"``: no grouping).
    ``mask_shape``: a random mask of that shape (each row sees a key) instead of the per-row padding one."""
    feeds = attention_feeds()
    if mask_shape is not None:
        allowed = rng.random(mask_shape) < 0.6
        allowed[..., 0] = True
        feeds["mask"] = np.where(allowed, 0, np.finfo(np.float32).min).astype(np.float32)
    hk, n = 2, H_GQA // 2
    feeds["q"] = rng.standard_normal((B_, H_GQA, S, D)).astype(np.float32)
    feeds["k"], feeds["v"] = (rng.standard_normal((B_, hk, S, D)).astype(np.float32) for _ in range(2))
    grouped = [B_, hk * n, S, D] if target == "grouped" else [B_, hk, n * S, D]
    if target == "sequence":
        feeds["q"] = feeds["q"][:, :hk]
        feeds["mask"] = np.zeros((B_, 1, 1, n * S), np.float32)
    nodes = [const("axes", [2], np.int64), const("expand", [B_, hk, n, S, D], np.int64),
             const("grouped", grouped, np.int64)]
    for x in ("k", "v"):
        nodes += [oh.make_node("Unsqueeze", [x, "axes"], [f"{x}5"], name=f"unsqueeze_{x}"),
                  oh.make_node("Expand", [f"{x}5", "expand"], [f"{x}n"], name=f"expand_{x}"),
                  oh.make_node("Reshape", [f"{x}n", "grouped"], [f"{x}r"], name=f"reshape_{x}")]
    attention = attention_nodes()
    attention[0].input[0] = "kr"
    attention[-1].input[1] = "vr"
    nodes += attention
    outputs = ["y"]
    if shape_reader:  # optimum's export reads the repeated key's shape (for the mask's length)
        nodes += [oh.make_node("Shape", ["kr"], ["kshape"], name="kshape"),
                  oh.make_node("Cast", ["kshape"], ["kshape_f"], name="kshape_f", to=TensorProto.FLOAT)]
        outputs.append("kshape_f")
    return model(nodes, feeds, outputs, opset=18), feeds


@pytest.mark.parametrize("shape_reader", [False, True])
def test_attention_reads_grouped_heads_through_repeat_kv(shape_reader):
    proto, feeds = repeated_heads_model(shape_reader=shape_reader)
    check(proto, feeds, ["ScaledDotProductAttention"])
    m = tm.load(proto, backend="torch")
    m(feeds), m(feeds)
    (exe,) = m._executables.values()
    replayed = [s.spec.op_type for s, _ in exe.steps]
    assert replayed == ["ScaledDotProductAttention"]  # the copies per head are never made, even when kept for a Shape


@pytest.mark.parametrize("mask_shape", [(B_, H_GQA, S, S), (B_, 1, S, S), (S, S), (1, S)])
def test_grouped_heads_read_masks_of_every_shape(mask_shape):
    """mlx's float32 CPU path multiplies the query heads of a group with their one kv head (no repeated cache): a
    mask per head is split as the query is, one for all heads reaches each."""
    proto, feeds = repeated_heads_model(shape_reader=False, mask_shape=mask_shape)
    check(proto, feeds, ["ScaledDotProductAttention"])


def test_grouped_heads_refuse_a_mask_per_kv_head():
    """A mask with one slice per kv head broadcasts to no (b, heads, rows, keys): an error, as with the heads repeated
    (mlx's grouped product would otherwise apply it to each head of a group)."""
    B = get_backend("mlx")
    q, kv = B.asarray(np.zeros((1, 6, 2, 4), np.float32)), B.asarray(np.zeros((1, 2, 3, 4), np.float32))
    with pytest.raises(ValueError, match="broadcast"):
        B.sdpa(q, kv, kv, 0.5, B.asarray(np.zeros((1, 2, 2, 3), np.float32)))


def test_attention_repeat_that_is_not_grouping_runs_the_chain():
    proto, feeds = repeated_heads_model(target="sequence")
    check(proto, feeds, ["ScaledDotProductAttention"])


def test_replay_skips_a_device_node_read_only_through_its_shape():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    nodes = [oh.make_node("Exp", ["x"], ["e"], name="exp"), oh.make_node("Shape", ["e"], ["s"], name="shape"),
             oh.make_node("Cast", ["s"], ["sf"], name="cast", to=TensorProto.FLOAT),
             oh.make_node("Neg", ["x"], ["y"], name="neg")]
    proto = model(nodes, {"x": x}, ["y", "sf"])
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for backend in BACKENDS:
        m = tm.load(proto, backend=backend)
        for _ in range(2):
            got = m({"x": x})
            for r, g in zip(ref, got.values()):
                np.testing.assert_array_equal(np.asarray(m.backend.to_numpy(g)), r)
        (exe,) = m._executables.values()
        assert [s.spec.op_type for s, _ in exe.steps] == ["Neg"], backend


@pytest.mark.parametrize("nan_guard", [False, True])
def test_attention_leaves_out_keys_no_query_sees(nan_guard):
    """A decoder's fixed KV buffer: its free rows come first, masked with float32's lowest value in every row. torch's
    sdpa leaves them out (their weights are exactly 0); the results stay onnxruntime's."""
    feeds = attention_feeds()
    feeds["mask"][:] = 0
    feeds["mask"][..., :2] = np.finfo(np.float32).min  # free rows 0 and 1 of every batch row
    feeds["mask"][1, ..., 2] = np.finfo(np.float32).min  # row 1 also skips key 2: the first seen key is 2
    nodes = attention_nodes("div")
    if nan_guard:
        nodes[-1].input[0] = "p0"
        nodes[-1:-1] = [const("zero", 0.0), oh.make_node("IsNaN", ["p"], ["nan"], name="isnan"),
                        oh.make_node("Where", ["nan", "zero", "p"], ["p0"], name="where")]
    check(model(nodes, feeds, ["y"]), feeds, ["ScaledDotProductAttention"], tol=1e-6)
    m = tm.load(model(nodes, feeds, ["y"]), backend="torch")
    m(feeds), m(feeds)
    assert m.backend._mask_facts[1] == (False, 2, S, True, False)  # (all zero, first and end keys seen, finite, causal)


def test_attention_leaves_out_the_keys_after_the_last_one_seen():
    """Free rows after the valid ones (as a GQA buffer's): keys past the last one any query sees are left out of
    torch's sdpa; onnxruntime's results (a boolean mask: test_contrib_ops' GQA layers)."""
    feeds = attention_feeds()
    mask = np.zeros(feeds["mask"].shape, np.float32)
    mask[..., S - 2:] = np.finfo(np.float32).min  # the last two keys: free in every row
    mask[0, ..., S - 3] = np.finfo(np.float32).min  # and one more in batch row 0 only
    feeds["mask"] = mask
    check(model(attention_nodes("div"), feeds, ["y"]), feeds, ["ScaledDotProductAttention"], tol=1e-6)
    m = tm.load(model(attention_nodes("div"), feeds, ["y"]), backend="torch")
    m(feeds), m(feeds)
    assert m.backend._mask_facts[1] == (False, 0, S - 2, True, False)  # (zero, first and end keys, no NaN, causal)


@pytest.mark.parametrize("low", [np.finfo(np.float32).min, -np.inf])
def test_attention_over_a_causal_prompt_runs_torchs_causal_kernel(low):
    """A prompt after a fixed buffer's free rows: from the first key seen, as many keys as queries, masked above the
    diagonal (with the lowest float32 or -inf, as optimum writes it). torch runs its causal kernel; a mask with one
    more masked key is not causal. Both equal onnxruntime's."""
    feeds = attention_feeds()
    L = S - 2
    feeds["q"] = feeds["q"][:, :, :L]
    causal = np.full((B_, 1, L, S), low, np.float32)
    causal[..., 2:] = np.where(np.tril(np.ones((L, L), bool)), 0, low)
    for mask, is_causal in ((causal, True), (np.where(np.arange(S) == 3, low, causal).astype(np.float32), False)):
        feeds["mask"] = mask
        check(model(attention_nodes("div"), feeds, ["y"]), feeds, ["ScaledDotProductAttention"], tol=1e-6)
        m = tm.load(model(attention_nodes("div"), feeds, ["y"]), backend="torch")
        m(feeds), m(feeds)
        assert m.backend._mask_facts[1] == (False, 2, S, True, is_causal)  # (zero, first and end keys, no NaN, causal)


@pytest.mark.parametrize("low", [np.finfo(np.float32).min, -np.inf])
def test_attention_of_a_decode_step_after_the_free_rows_reads_no_mask(low):
    """A decode step of unpadded rows: zero from the first key seen on (no mask read). A row that sees no key keeps
    every key (under the lowest float32 its weights spread over all of them; under -inf they are NaN, which
    optimum's guard zeroes: the NaN pass runs). All equal onnxruntime's."""
    feeds = attention_feeds()
    feeds["q"] = feeds["q"][:, :, :1]
    feeds["mask"] = np.zeros((B_, 1, 1, S), np.float32)
    feeds["mask"][..., :2] = low
    nodes = attention_nodes("div")
    nodes[-1].input[0] = "p0"
    nodes[-1:-1] = [const("zero", 0.0), oh.make_node("IsNaN", ["p"], ["nan"], name="isnan"),
                    oh.make_node("Where", ["nan", "zero", "p"], ["p0"], name="where")]
    for blind_row, facts in ((False, (True, 2, S, True, False)), (True, (False, 0, S, low != -np.inf, False))):
        if blind_row:
            feeds["mask"][1] = low
        check(model(nodes, feeds, ["y"]), feeds, ["ScaledDotProductAttention"], tol=1e-6)
        m = tm.load(model(nodes, feeds, ["y"]), backend="torch")
        m(feeds), m(feeds)
        assert m.backend._mask_facts[1] == facts


# -- SiLU ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("swap", [False, True])
def test_silu_fused(swap):
    feeds = {"x": rng.standard_normal((2, 5, 16)).astype(np.float32) * 4}
    nodes = [oh.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
             oh.make_node("Mul", ["s", "x"] if swap else ["x", "s"], ["y"], name="mul")]
    check(model(nodes, feeds, ["y"]), feeds, ["Silu"])


def test_silu_not_fused_with_another_operand_or_reader():
    feeds = {"x": rng.standard_normal((2, 16)).astype(np.float32), "z": rng.standard_normal((2, 16)).astype(np.float32)}
    other = [oh.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"), oh.make_node("Mul", ["z", "s"], ["y"], name="mul")]
    check(model(other, feeds, ["y"]), feeds, [])
    read = [oh.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"), oh.make_node("Mul", ["x", "s"], ["y"], name="mul")]
    check(model(read, feeds, ["y", "s"]), feeds, [])
