"""onnxruntime contrib ops (com.microsoft) on mlx and torch, against onnxruntime's CPU kernels.

Each case is a one-node graph (opset 17 + com.microsoft 1) on seeded random inputs. Tolerance:
1e-4 absolute and relative for float32 everywhere, unless a test says otherwise.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

import transmuter_mlx as tm

ort = pytest.importorskip("onnxruntime")

BACKENDS = ("mlx", "torch")
TOL = 1e-4


def make_model(op, inputs, outputs, attrs=None, feeds=None, consts=None, domain="com.microsoft"):
    """One-node model; ``outputs`` are names or (name, TensorProto type); ``consts`` become initializers."""
    consts = consts or {}
    vis = [
        oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()
    ]
    outs = [o if isinstance(o, tuple) else (o, TensorProto.FLOAT) for o in outputs]
    node = oh.make_node(op, inputs, [n for n, _ in outs], domain=domain, **(attrs or {}))
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in consts.items()]
    graph_outs = [oh.make_tensor_value_info(n, t, None) for n, t in outs if n]
    graph = oh.make_graph([node], "g", vis, graph_outs, inits)
    opsets = [oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)]
    return oh.make_model(graph, opset_imports=opsets)


def run_ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_backend(model, feeds, backend, calls=1):
    """The outputs of ``calls`` calls (the second one on torch: the replay, with the ops' specialised kernels)."""
    m = tm.load(model, backend=backend)
    runs = [m(feeds) for _ in range(calls)]
    return [[None if v is None else np.asarray(m.backend.to_numpy(v)) for v in out.values()] for out in runs]


def check(op, inputs, outputs, attrs, feeds, consts=None, expected=None, rows=None, tol=TOL):
    """Compare every output on both backends with onnxruntime (or ``expected``), at the first call and the second.

    ``rows(i, ref, got)`` may select the part of output ``i`` that onnxruntime defines.
    """
    model = make_model(op, inputs, outputs, attrs, feeds, consts)
    ref = expected if expected is not None else run_ort(model, feeds)
    for backend in BACKENDS:
        for call, got in enumerate(run_backend(model, feeds, backend, calls=2)):
            for i, (r, g) in enumerate(zip(ref, got)):
                assert g is not None and g.shape == r.shape, (backend, i, None if g is None else g.shape, r.shape)
                if rows is not None:
                    r, g = rows(i, r, g)
                np.testing.assert_allclose(g, r, atol=tol, rtol=tol, err_msg=f"{op} output {i} on {backend}, call {call}")


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# -- norms, GELUs, bias ops, FusedMatMul ---------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1, 8), (2, 5, 16)])
@pytest.mark.parametrize("with_beta,with_bias", [(0, 0), (1, 0), (1, 1), (0, 1)])
def test_skip_layer_normalization(shape, with_beta, with_bias):
    rng = np.random.default_rng(0)
    h = shape[-1]
    feeds = {"x": rand(rng, *shape), "skip": rand(rng, *shape), "gamma": rand(rng, h)}
    inputs = ["x", "skip", "gamma", "", ""]
    if with_beta:
        feeds["beta"], inputs[3] = rand(rng, h), "beta"
    if with_bias:
        feeds["bias"], inputs[4] = rand(rng, h), "bias"
    check("SkipLayerNormalization", inputs, ["y", "mean", "inv_std", "sum"], {"epsilon": 1e-5}, feeds)


@pytest.mark.parametrize("with_bias", [0, 1])
def test_skip_simplified_layer_normalization(with_bias):
    rng = np.random.default_rng(1)
    feeds = {"x": rand(rng, 2, 3, 16), "skip": rand(rng, 1, 3, 16), "gamma": rand(rng, 16)}
    inputs = ["x", "skip", "gamma"]
    if with_bias:
        feeds["bias"] = rand(rng, 16)
        inputs.append("bias")
    check(
        "SkipSimplifiedLayerNormalization", inputs, ["y", "mean", "inv_std", "sum"], {"epsilon": 1e-6}, feeds
    )


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_skip_norms_without_stats(op):
    """Without mean/inv_std outputs the norm is the backend's fused kernel."""
    rng = np.random.default_rng(2)
    feeds = {
        "x": rand(rng, 2, 3, 16),
        "skip": rand(rng, 2, 3, 16),
        "gamma": rand(rng, 16),
        "bias": rand(rng, 16),
    }
    inputs = (
        ["x", "skip", "gamma", "", "bias"]
        if op == "SkipLayerNormalization"
        else ["x", "skip", "gamma", "bias"]
    )
    check(op, inputs, ["y", "", "", "sum"], {"epsilon": 1e-5}, feeds)


def test_skip_layer_normalization_2d_skip():
    rng = np.random.default_rng(2)
    feeds = {"x": rand(rng, 2, 3, 8), "skip": rand(rng, 3, 8), "gamma": rand(rng, 8), "beta": rand(rng, 8)}
    check("SkipLayerNormalization", ["x", "skip", "gamma", "beta"], ["y"], {}, feeds)


@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_normalization(axis):
    rng = np.random.default_rng(3)
    x = rand(rng, 2, 3, 8)
    feeds = {"x": x, "scale": rand(rng, *x.shape[axis:])}
    model_attrs = {"axis": axis, "epsilon": 1e-6}
    model = make_model(
        "SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv"], model_attrs, feeds, domain=""
    )
    ref = run_ort(model, feeds)
    for backend in BACKENDS:
        for r, g in zip(ref, run_backend(model, feeds, backend)[0]):
            np.testing.assert_allclose(g, r, atol=TOL, rtol=TOL)


@pytest.mark.parametrize("op", ["Gelu", "FastGelu", "QuickGelu"])
@pytest.mark.parametrize("shape", [(7,), (2, 3, 16)])
def test_gelus(op, shape):
    rng = np.random.default_rng(4)
    feeds = {"x": rand(rng, *shape) * 3}
    attrs = {"alpha": 1.5} if op == "QuickGelu" else {}
    check(op, ["x"], ["y"], attrs, feeds)


def test_fast_gelu_bias_and_bias_gelu():
    rng = np.random.default_rng(5)
    feeds = {"x": rand(rng, 2, 3, 16), "bias": rand(rng, 16)}
    check("FastGelu", ["x", "bias"], ["y"], {}, feeds)
    check("BiasGelu", ["x", "bias"], ["y"], {}, feeds)


def test_bias_add():
    """onnxruntime has BiasAdd on CUDA only: the reference is x + bias + skip."""
    rng = np.random.default_rng(6)
    feeds = {"x": rand(rng, 2, 3, 8), "bias": rand(rng, 8), "skip": rand(rng, 2, 3, 8)}
    expected = [feeds["x"] + feeds["bias"] + feeds["skip"]]
    check("BiasAdd", ["x", "bias", "skip"], ["y"], {}, feeds, expected=expected)


@pytest.mark.parametrize(
    "a_shape,b_shape,attrs",
    [
        ((3, 4), (4, 5), {}),
        ((4, 3), (5, 4), {"transA": 1, "transB": 1, "alpha": 0.5}),
        ((2, 3, 4), (2, 5, 4), {"transB": 1}),
        ((2, 3, 4), (3, 4, 5), {"transBatchA": 1}),
        ((2, 4, 3), (4, 2, 5), {"transBatchA": 1, "transA": 1}),
        ((2, 3, 4), (4, 2, 5), {"transBatchB": 1}),
        ((2, 3, 4), (5, 2, 4), {"transBatchB": 1, "transB": 1, "alpha": 2.0}),
        ((2, 3, 4, 5), (2, 3, 5, 6), {"alpha": 0.25}),
    ],
)
def test_fused_matmul(a_shape, b_shape, attrs):
    rng = np.random.default_rng(7)
    check("FusedMatMul", ["A", "B"], ["Y"], attrs, {"A": rand(rng, *a_shape), "B": rand(rng, *b_shape)})


@pytest.mark.parametrize("batch,seq", [(1, 1), (2, 5)])
@pytest.mark.parametrize("variant", ["full", "no_segment", "position_ids", "no_mask"])
def test_embed_layer_normalization(batch, seq, variant):
    rng = np.random.default_rng(8)
    h = 16
    feeds = {
        "ids": rng.integers(0, 20, (batch, seq)).astype(np.int32),
        "seg": rng.integers(0, 2, (batch, seq)).astype(np.int32),
        "mask": (rng.random((batch, seq)) > 0.3).astype(np.int32),
    }
    consts = {
        "word": rand(rng, 20, h), "pos": rand(rng, 8, h), "segemb": rand(rng, 2, h),
        "gamma": rand(rng, h), "beta": rand(rng, h),
    }  # fmt: skip
    inputs = ["ids", "seg", "word", "pos", "segemb", "gamma", "beta", "mask"]
    if variant == "no_segment":
        inputs[1] = inputs[4] = ""
        del feeds["seg"]
    if variant == "position_ids":
        feeds["pid"] = rng.integers(0, 8, (1, seq)).astype(np.int32)
        inputs.append("pid")
    if variant == "no_mask":
        inputs[7] = ""
        del feeds["mask"]
    outputs = ["y", ("mask_index", TensorProto.INT32), "emb_sum"]
    check("EmbedLayerNormalization", inputs, outputs, {"epsilon": 1e-5}, feeds, consts)


# -- RotaryEmbedding, MultiHeadAttention, Attention -----------------------------------------


@pytest.mark.parametrize(
    "shape,pos,half,attrs",
    [
        ((2, 3, 32), "offset", 8, {}),
        ((1, 1, 32), "offset", 8, {"interleaved": 1}),
        ((2, 3, 64), "ids", 8, {"num_heads": 4, "rotary_embedding_dim": 16}),
        ((2, 4, 3, 16), "ids", 8, {}),
        ((2, 4, 3, 16), "ids", 4, {"num_heads": 4, "rotary_embedding_dim": 8, "interleaved": 1}),
    ],
)
def test_rotary_embedding(shape, pos, half, attrs):
    rng = np.random.default_rng(9)
    b, s = shape[0], shape[-2] if len(shape) == 4 else shape[1]
    ids = np.array([3], np.int64) if pos == "offset" else rng.integers(0, 16, (b, s)).astype(np.int64)
    feeds = {"x": rand(rng, *shape), "pos": ids}
    consts = {
        "cos": rng.random((20, half)).astype(np.float32),
        "sin": rng.random((20, half)).astype(np.float32),
    }
    check("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], attrs, feeds, consts)


N, H = 2, 4  # heads and head size of the MultiHeadAttention/Attention cases
D = N * H


@pytest.mark.parametrize("batch,seq,kv_seq", [(1, 1, 1), (2, 3, 5)])
@pytest.mark.parametrize("mask", [None, "lengths", "2d", "3d"])
def test_multi_head_attention_masks(batch, seq, kv_seq, mask):
    rng = np.random.default_rng(10)
    feeds = {
        "q": rand(rng, batch, seq, D),
        "k": rand(rng, batch, kv_seq, D),
        "v": rand(rng, batch, kv_seq, D),
    }
    inputs = ["q", "k", "v", "bias"]
    consts = {"bias": rand(rng, 3 * D)}
    if mask == "lengths":
        feeds["m"] = rng.integers(1, kv_seq + 1, (batch,)).astype(np.int32)
    elif mask == "2d":
        feeds["m"] = (rng.random((batch, kv_seq)) > 0.3).astype(np.int32)
    elif mask == "3d":
        feeds["m"] = (rng.random((batch, seq, kv_seq)) > 0.3).astype(np.int32)
    if mask:
        inputs.append("m")
    check("MultiHeadAttention", inputs, ["o"], {"num_heads": N}, feeds, consts)


@pytest.mark.parametrize("seq,past", [(1, 4), (3, 4), (3, 0)])
def test_multi_head_attention_past_causal_bias(seq, past):
    rng = np.random.default_rng(11)
    b = 2
    feeds = {
        "q": rand(rng, b, seq, D), "k": rand(rng, b, seq, D), "v": rand(rng, b, seq, D),
        "ab": rand(rng, 1, N, seq, past + seq), "pk": rand(rng, b, N, past, H), "pv": rand(rng, b, N, past, H),
    }  # fmt: skip
    inputs = ["q", "k", "v", "", "", "ab", "pk", "pv"]
    attrs = {"num_heads": N, "unidirectional": 1, "scale": 0.3}
    check("MultiHeadAttention", inputs, ["o", "present_key", "present_value"], attrs, feeds)


def test_multi_head_attention_kv_in_bnsh():
    rng = np.random.default_rng(12)
    feeds = {
        "q": rand(rng, 2, 3, D),
        "k": rand(rng, 2, N, 5, H),
        "v": rand(rng, 2, N, 5, H),
        "bias": rand(rng, 3 * D),
    }
    check("MultiHeadAttention", ["q", "k", "v", "bias"], ["o"], {"num_heads": N}, feeds)


@pytest.mark.parametrize("layout", ["qkv", "kv"])
def test_multi_head_attention_packed(layout):
    """onnxruntime's CPU kernel has no packed layouts: the reference is the unpacked graph."""
    rng = np.random.default_rng(13)
    q, k, v, bias = rand(rng, 2, 3, D), rand(rng, 2, 3, D), rand(rng, 2, 3, D), rand(rng, 3 * D)
    separate = {"q": q, "k": k, "v": v, "bias": bias}
    ref = run_ort(
        make_model("MultiHeadAttention", list(separate), ["o"], {"num_heads": N}, separate), separate
    )
    heads = [t.reshape(2, 3, N, 1, H) for t in (q, k, v)]
    if layout == "qkv":
        feeds, inputs = {"qkv": np.concatenate(heads, 3), "bias": bias}, ["qkv", "", "", "bias"]
    else:
        feeds, inputs = {"q": q, "kv": np.concatenate(heads[1:], 3), "bias": bias}, ["q", "kv", "", "bias"]
    check("MultiHeadAttention", inputs, ["o"], {"num_heads": N}, feeds, expected=ref)


@pytest.mark.parametrize("batch,seq", [(1, 1), (2, 3)])
@pytest.mark.parametrize("mask", [None, "lengths", "ends_starts", "2d", "3d"])
def test_attention_masks(batch, seq, mask):
    rng = np.random.default_rng(14)
    din = 6
    feeds = {"x": rand(rng, batch, seq, din)}
    consts = {"w": rand(rng, din, 3 * D), "b": rand(rng, 3 * D)}
    inputs = ["x", "w", "b"]
    if mask == "lengths":
        feeds["m"] = rng.integers(1, seq + 1, (batch,)).astype(np.int32)
    elif mask == "ends_starts":
        ends = rng.integers(1, seq + 1, (batch,))
        feeds["m"] = np.concatenate([ends, rng.integers(0, ends)]).astype(np.int32)
    elif mask == "2d":
        feeds["m"] = (rng.random((batch, seq)) > 0.3).astype(np.int32)
    elif mask == "3d":
        feeds["m"] = (rng.random((batch, seq, seq)) > 0.3).astype(np.int32)
    if mask:
        inputs.append("m")
    check("Attention", inputs, ["o"], {"num_heads": N}, feeds, consts)


@pytest.mark.parametrize("seq,past", [(1, 4), (3, 2)])
def test_attention_past_unidirectional(seq, past):
    rng = np.random.default_rng(15)
    b, din = 2, 6
    feeds = {
        "x": rand(rng, b, seq, din),
        "m": np.ones((b, past + seq), np.int32),
        "past": rand(rng, 2, b, N, past, H),
    }
    feeds["m"][0, 0] = 0
    consts = {"w": rand(rng, din, 3 * D), "b": rand(rng, 3 * D)}
    attrs = {"num_heads": N, "unidirectional": 1}
    check("Attention", ["x", "w", "b", "m", "past"], ["o", "present"], attrs, feeds, consts)


def test_attention_qkv_hidden_sizes_and_bias():
    rng = np.random.default_rng(16)
    din, dv = 6, 12
    feeds = {"x": rand(rng, 2, 3, din), "ab": rand(rng, 2, 1, 3, 3)}
    consts = {"w": rand(rng, din, 2 * D + dv), "b": rand(rng, 2 * D + dv)}
    attrs = {"num_heads": N, "qkv_hidden_sizes": [D, D, dv], "scale": 0.3}
    check("Attention", ["x", "w", "b", "", "", "ab"], ["o"], attrs, feeds, consts)


# -- GroupQueryAttention --------------------------------------------------------------------

GQA_HEADS, GQA_KV_HEADS, GQA_SIZE = 4, 2, 16  # onnxruntime's rotary needs head_size % 16 == 0


def gqa_check(
    seq, seqlens, cache_len, *, rotary=0, packed=0, attrs=None, extra=None, const_total=True, seed=0
):
    """One GQA step: ``seqlens`` is seqlens_k (valid rows - 1), ``cache_len`` the past buffer length.

    Output rows that onnxruntime leaves unspecified (padding of a first prompt) are not compared,
    nor cache rows at or beyond each entry's valid length.
    """
    rng = np.random.default_rng(seed)
    b, nh, nkv, h = len(seqlens), GQA_HEADS, GQA_KV_HEADS, GQA_SIZE
    total = max(seqlens) + 1
    feeds = {}
    if packed:
        feeds["query"] = rand(rng, b, seq, (nh + 2 * nkv) * h)
    else:
        feeds.update(
            query=rand(rng, b, seq, nh * h), key=rand(rng, b, seq, nkv * h), value=rand(rng, b, seq, nkv * h)
        )
    feeds.update(past_key=rand(rng, b, nkv, cache_len, h), past_value=rand(rng, b, nkv, cache_len, h))
    feeds["seqlens_k"] = np.array(seqlens, np.int32)
    consts = {}
    (consts if const_total else feeds)["total_sequence_length"] = np.array(total, np.int32)
    inputs = ["query", "" if packed else "key", "" if packed else "value", "past_key", "past_value"]
    inputs += ["seqlens_k", "total_sequence_length"]
    if rotary:
        consts["cos"], consts["sin"] = (
            rng.random((32, h // 2)).astype(np.float32),
            rng.random((32, h // 2)).astype(np.float32),
        )
        inputs += ["cos", "sin"]
    for index, (name, value) in sorted((extra or {}).items()):
        inputs += [""] * (index - len(inputs)) + [name]
        feeds[name] = value
    attrs = {"num_heads": nh, "kv_num_heads": nkv, "do_rotary": rotary, **(attrs or {})}
    first_prompt = seq > 1 and seq == total
    valid = np.array(seqlens) + 1

    def rows(i, ref, got):
        if i == 0:
            keep = [ref[j, : valid[j] if first_prompt else seq] for j in range(b)]
            return np.concatenate(keep), np.concatenate([got[j, : len(keep[j])] for j in range(b)])
        return (np.concatenate([x[j, :, : valid[j]].ravel() for j in range(b)]) for x in (ref, got))

    check(
        "GroupQueryAttention",
        inputs,
        ["output", "present_key", "present_value"],
        attrs,
        feeds,
        consts,
        rows=rows,
    )


@pytest.mark.parametrize("rotary", [0, 1])
@pytest.mark.parametrize("cache_len", [0, 8])
def test_gqa_prompt(rotary, cache_len):
    gqa_check(4, [3, 1], cache_len, rotary=rotary)  # batch 2, the second entry right-padded


@pytest.mark.parametrize("rotary", [0, 1])
@pytest.mark.parametrize("cache_len", [5, 8])
def test_gqa_decode(rotary, cache_len):
    gqa_check(1, [5, 3], cache_len, rotary=rotary)  # past length 5 and 3: a buffer, or a shared-size buffer


def test_gqa_batch1_prompt_and_decode():
    gqa_check(1, [0], 0, rotary=1)
    gqa_check(5, [4], 0, rotary=1)
    gqa_check(1, [5], 5, rotary=1)


def test_gqa_subsequent_prompt():
    gqa_check(3, [6], 4, rotary=1)  # 3 new tokens after 4 cached ones


@pytest.mark.parametrize("seq,seqlens,cache_len", [(3, [2, 1], 0), (1, [5, 3], 8)])
def test_gqa_packed_qkv_interleaved(seq, seqlens, cache_len):
    gqa_check(seq, seqlens, cache_len, rotary=1, packed=1, attrs={"rotary_interleaved": 1})


@pytest.mark.parametrize(
    "attrs",
    [{"local_window_size": 2}, {"softcap": 1.5}, {"smooth_softmax": 1}, {"scale": 0.3}, {"causal": 0}],
)
def test_gqa_attributes(attrs):
    if attrs.get("causal", 1):
        gqa_check(5, [4, 4], 0, attrs=attrs)  # prompt
        gqa_check(1, [6, 4], 8, attrs=attrs)  # decode
    else:
        gqa_check(3, [2, 2], 0, attrs=attrs)


def test_gqa_optional_inputs():
    rng = np.random.default_rng(17)
    pos = {9: ("position_ids", np.array([[7], [2]], np.int64))}
    gqa_check(1, [5, 3], 8, rotary=1, extra=pos)
    gqa_check(1, [5, 3], 8, extra={10: ("attention_bias", rand(rng, 2, 1, 1, 6))})
    gqa_check(3, [2, 2], 0, extra={10: ("attention_bias", rand(rng, 1, GQA_HEADS, 3, 3))})
    gqa_check(1, [5, 3], 8, extra={11: ("head_sink", rand(rng, GQA_HEADS))})


def test_gqa_total_sequence_length_as_input():
    gqa_check(1, [5, 3], 8, rotary=1, const_total=False)


@pytest.mark.parametrize("seq,seqlens,packed", [(1, [5, 3], 0), (1, [6, 2], 1), (3, [6], 0), (4, [3, 1], 1)])
def test_gqa_replay_runs_the_model_builders_case_as_one_kernel(seq, seqlens, packed):
    """A shared past buffer, rotate-half rotary over the whole head, causal: the torch replay calls the kernel that
    ``specialise`` made (a decode step, a later prompt, a first prompt); ``gqa_check`` compares both calls with
    onnxruntime."""
    gqa_check(seq, seqlens, 8, rotary=1, packed=packed)
    rng = np.random.default_rng(0)
    b, nh, nkv, h = len(seqlens), GQA_HEADS, GQA_KV_HEADS, GQA_SIZE
    feeds = {"query": rand(rng, b, seq, (nh + 2 * nkv) * h), "past_key": rand(rng, b, nkv, 8, h),
             "past_value": rand(rng, b, nkv, 8, h), "seqlens_k": np.array(seqlens, np.int32)}
    consts = {"total_sequence_length": np.array(max(seqlens) + 1, np.int32),
              "cos": rng.random((32, h // 2)).astype(np.float32), "sin": rng.random((32, h // 2)).astype(np.float32)}
    inputs = ["query", "", "", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos", "sin"]
    model = make_model("GroupQueryAttention", inputs, ["output", "present_key", "present_value"],
                       {"num_heads": nh, "kv_num_heads": nkv, "do_rotary": 1}, feeds, consts)
    m = tm.load(model, backend="torch")
    m(feeds), m(feeds)
    (exe,) = m._executables.values()
    (form,) = [exe.shortcuts.get(i, ("op",))[0] for i, (step, _) in enumerate(exe.steps)
               if step.spec.op_type == "GroupQueryAttention"]
    assert form == "kernel"


def test_gqa_layers_share_a_steps_positions_within_one_call_only():
    """Two GQA layers reading one seqlens_k and one cos/sin cache: the torch replay's kernel makes the positions,
    angles and mask in the first layer and reuses them in the second (``call_scope.keep``), and sdpa leaves out
    the buffer's rows after the last valid one; both match onnxruntime, and a seqlens_k tensor changed in place
    between calls gives the new call's values, not the kept ones."""
    import torch

    rng = np.random.default_rng(21)
    b, nh, nkv, h, length = 2, GQA_HEADS, GQA_KV_HEADS, GQA_SIZE, 8
    feeds = {name: rand(rng, *shape) for name, shape in [
        ("q1", (b, 1, (nh + 2 * nkv) * h)), ("q2", (b, 1, (nh + 2 * nkv) * h)), ("k1", (b, nkv, length, h)),
        ("v1", (b, nkv, length, h)), ("k2", (b, nkv, length, h)), ("v2", (b, nkv, length, h))]}
    feeds["seqlens_k"] = np.array([5, 3], np.int32)
    consts = {"total": np.array(length, np.int32), "cos": rng.random((32, h // 2)).astype(np.float32),
              "sin": rng.random((32, h // 2)).astype(np.float32)}
    attrs = {"num_heads": nh, "kv_num_heads": nkv, "do_rotary": 1}
    nodes = [oh.make_node("GroupQueryAttention", [f"q{i}", "", "", f"k{i}", f"v{i}", "seqlens_k", "total", "cos", "sin"],
                          [f"o{i}", f"pk{i}", f"pv{i}"], domain="com.microsoft", **attrs) for i in (1, 2)]
    graph = oh.make_graph(
        nodes, "g", [oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()],
        [oh.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("o1", "o2")],
        [onnx.numpy_helper.from_array(v, n) for n, v in consts.items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)])
    m = tm.load(model, backend="torch")
    seqlens = torch.from_numpy(feeds["seqlens_k"].copy())
    for step, values in enumerate(([5, 3], [5, 3], [6, 2])):  # the replay from the second call
        seqlens.copy_(torch.tensor(values, dtype=torch.int32))  # in place: the same tensor object every call
        want = run_ort(model, {**feeds, "seqlens_k": np.array(values, np.int32)})
        got = [m.backend.to_numpy(v) for v in m({**feeds, "seqlens_k": seqlens}).values()]
        for ref, out in zip(want, got, strict=True):
            np.testing.assert_allclose(out, ref, rtol=TOL, atol=TOL, err_msg=f"call {step}, seqlens_k {values}")
    (exe,) = m._executables.values()
    assert [exe.shortcuts.get(i, ("op",))[0] for i, (step, _) in enumerate(exe.steps)
            if step.spec.op_type == "GroupQueryAttention"] == ["kernel", "kernel"]
    assert m.backend._mask_facts[1][1:3] == (0, 7)  # sdpa read keys 0..6, not the buffer's free row 7
    from transmuter_mlx.converters import call_scope

    assert call_scope._LOCAL.kept is None  # dropped at the call's end: nothing of the model referenced there


def test_gqa_decode_is_compiled_on_mlx():
    """With total_sequence_length folded on the host, a decode step is one traced mx.compile graph."""
    rng = np.random.default_rng(18)
    b, nh, nkv, h = 2, GQA_HEADS, GQA_KV_HEADS, GQA_SIZE
    feeds = {
        "query": rand(rng, b, 1, nh * h), "key": rand(rng, b, 1, nkv * h), "value": rand(rng, b, 1, nkv * h),
        "past_key": rand(rng, b, nkv, 8, h), "past_value": rand(rng, b, nkv, 8, h),
        "seqlens_k": np.array([5, 3], np.int32),
    }  # fmt: skip
    inputs = list(feeds) + ["total_sequence_length"]
    attrs = {"num_heads": nh, "kv_num_heads": nkv}
    model = make_model(
        "GroupQueryAttention",
        inputs,
        ["o", "pk", "pv"],
        attrs,
        feeds,
        {"total_sequence_length": np.array(8, np.int32)},
    )
    m = tm.load(model, backend="mlx")
    m(feeds)
    assert all(m.signatures().values())


@pytest.mark.parametrize("rotary", [0, 1])
def test_gqa_qk_norm_equals_norms_before_the_op(rotary):
    """``q_norm_weight``/``k_norm_weight`` (Qwen3-style per-head RMS norms; onnxruntime runs them on
    CUDA/WebGPU only): the reference is onnxruntime on the same GQA without them, after an explicit
    per-head SimplifiedLayerNormalization of q and k."""
    rng = np.random.default_rng(5)
    b, s, nh, nkv, h, eps = 2, 3, GQA_HEADS, GQA_KV_HEADS, GQA_SIZE, 1e-5
    feeds = dict(query=rand(rng, b, s, nh * h), key=rand(rng, b, s, nkv * h), value=rand(rng, b, s, nkv * h))
    feeds["seqlens_k"] = np.array([2, 1], np.int32)
    consts = {"total_sequence_length": np.array(s, np.int32), "qn": rng.random(h).astype(np.float32) + 0.5,
              "kn": rng.random(h).astype(np.float32) + 0.5}
    attrs = {"num_heads": nh, "kv_num_heads": nkv, "do_rotary": rotary}
    tail = []
    if rotary:
        consts["cos"], consts["sin"] = (rng.random((8, h // 2)).astype(np.float32) for _ in range(2))
        tail = ["cos", "sin"]
    core = ["seqlens_k", "total_sequence_length", *tail]
    fused = make_model("GroupQueryAttention",
                       ["query", "key", "value", "", "", *core] + [""] * (14 - 5 - len(core)) + ["qn", "kn"],
                       ["output", "present_key", "present_value"], {**attrs, "qk_norm_epsilon": eps}, feeds, consts)
    nodes = []
    for name, heads, weight in (("query", nh, "qn"), ("key", nkv, "kn")):
        nodes += [
            oh.make_node("Reshape", [name, f"{name}_heads_shape"], [f"{name}_heads"]),
            oh.make_node("SimplifiedLayerNormalization", [f"{name}_heads", weight], [f"{name}_normed"],
                         axis=-1, epsilon=eps),
            oh.make_node("Reshape", [f"{name}_normed", f"{name}_flat_shape"], [f"{name}_n"]),
        ]
        consts[f"{name}_heads_shape"] = np.array([b, s, heads, h], np.int64)
        consts[f"{name}_flat_shape"] = np.array([b, s, heads * h], np.int64)
    nodes.append(oh.make_node("GroupQueryAttention", ["query_n", "key_n", "value", "", "", *core],
                              ["output", "present_key", "present_value"], domain="com.microsoft", **attrs))
    graph = oh.make_graph(
        nodes, "g", [oh.make_tensor_value_info(n, oh.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()],
        [oh.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("output", "present_key", "present_value")],
        [onnx.numpy_helper.from_array(v, n) for n, v in consts.items()])
    explicit = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)])
    ref = run_ort(explicit, feeds)
    valid = feeds["seqlens_k"] + 1
    for backend in BACKENDS:
        got = run_backend(fused, feeds, backend)[0]
        for j in range(b):  # the rows onnxruntime defines: each entry's valid ones
            np.testing.assert_allclose(got[0][j, :valid[j]], ref[0][j, :valid[j]], rtol=TOL, atol=TOL, err_msg=backend)
            for i in (1, 2):
                np.testing.assert_allclose(got[i][j, :, :valid[j]], ref[i][j, :, :valid[j]], rtol=TOL, atol=TOL,
                                           err_msg=f"{backend} output {i}")
