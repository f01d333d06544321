"""The ``sdpa`` primitive on all backends, and recurrent-layer paths the conformance suite misses."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from transmuter_mlx.converters.backends import get_backend
from transmuter_mlx.converters.model import load

BACKENDS = ["numpy", "mlx", "torch"]


def _reference_sdpa(q, k, v, scale, mask):
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, 1).astype(np.float64), np.repeat(v, rep, 1).astype(np.float64)
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) * scale
    if isinstance(mask, str):
        mask = np.tril(np.ones(s.shape[-2:], bool), s.shape[-1] - s.shape[-2])
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask_kind", [None, "float", "bool", "causal"])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (4, 1)])
def test_sdpa_matches_reference(backend, mask_kind, heads):
    rng = np.random.default_rng(0)
    hq, hkv = heads
    q = rng.standard_normal((2, hq, 3, 8)).astype(np.float32)
    k = rng.standard_normal((2, hkv, 5, 8)).astype(np.float32)
    v = rng.standard_normal((2, hkv, 5, 6)).astype(np.float32)
    mask = {
        None: None,
        "float": rng.standard_normal((2, 1, 3, 5)).astype(np.float32),
        "bool": rng.random((3, 5)) > 0.3,
        "causal": "causal",
    }[mask_kind]
    if mask_kind == "bool":
        mask[:, 0] = True  # no fully masked row: those are undefined
    B = get_backend(backend)
    m = mask if mask is None or isinstance(mask, str) else B.asarray(mask)
    got = B.to_numpy(B.sdpa(B.asarray(q), B.asarray(k), B.asarray(v), 0.3, m))
    np.testing.assert_allclose(got, _reference_sdpa(q, k, v, 0.3, mask), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mask_shape", [None, (2, 1, 7, 5), (2, 1, 1, 5), (7, 5), (2, 4, 7, 5)])
def test_mlx_cpu_attention_in_pieces_matches_reference(monkeypatch, mask_shape):
    """The mlx CPU path split into sequences and blocks of query rows (here 3 rows a piece: 3 + 3 + 1), with
    masks that broadcast over the batch, the rows or the heads, against float64."""
    import mlx.core as mx

    from transmuter_mlx.converters.backends import mlx as mlx_backend

    if mx.default_device() != mx.cpu:
        pytest.skip("the pieces are the CPU path's")
    monkeypatch.setattr(mlx_backend, "SCORES_PER_PIECE", 4 * 4 * 5 * 3)  # 4 heads x 5 keys x 3 rows of float32
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 4, 7, 8)).astype(np.float32)
    k, v = (rng.standard_normal((2, 2, 5, 8)).astype(np.float32) for _ in range(2))
    mask = None if mask_shape is None else rng.standard_normal(mask_shape).astype(np.float32)
    B = get_backend("mlx")
    got = B.to_numpy(B.sdpa(B.asarray(q), B.asarray(k), B.asarray(v), 0.3, None if mask is None else B.asarray(mask)))
    np.testing.assert_allclose(got, _reference_sdpa(q, k, v, 0.3, mask), rtol=1e-5, atol=1e-6)


def _rnn_model(op, direction, layout, gates, extra=None):
    seq, batch, inp, hid = 4, 3, 5, 6
    dirs = 2 if direction == "bidirectional" else 1
    x_shape = [batch, seq, inp] if layout else [seq, batch, inp]
    inputs = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape),
        helper.make_tensor_value_info("W", TensorProto.FLOAT, [dirs, gates * hid, inp]),
        helper.make_tensor_value_info("R", TensorProto.FLOAT, [dirs, gates * hid, hid]),
        helper.make_tensor_value_info("B", TensorProto.FLOAT, [dirs, 2 * gates * hid]),
        helper.make_tensor_value_info("L", TensorProto.INT32, [batch]),
    ]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ["X", "W", "R", "B", "L"], outs, hidden_size=hid, direction=direction,
                            layout=layout, **(extra or {}))  # fmt: skip
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    rng = np.random.default_rng(1)
    feeds = {
        "X": rng.standard_normal(x_shape).astype(np.float32),
        "W": rng.standard_normal([dirs, gates * hid, inp]).astype(np.float32) * 0.5,
        "R": rng.standard_normal([dirs, gates * hid, hid]).astype(np.float32) * 0.5,
        "B": rng.standard_normal([dirs, 2 * gates * hid]).astype(np.float32) * 0.5,
        "L": np.array([4, 2, 3], np.int32),
    }
    return model, feeds


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize(
    "op,gates,extra",
    [("RNN", 1, None), ("GRU", 3, {"linear_before_reset": 1}), ("GRU", 3, None), ("LSTM", 4, {"clip": 2.0})],
)
@pytest.mark.parametrize("direction,layout", [("bidirectional", 0), ("reverse", 0)])  # ort lacks layout=1
def test_recurrent_sequence_lens_match_onnxruntime(backend, op, gates, extra, direction, layout):
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _rnn_model(op, direction, layout, gates, extra)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    m = load(model, backend=backend)
    got = m(feeds)
    for name, w in zip([o.name for o in model.graph.output], want):
        np.testing.assert_allclose(m.backend.to_numpy(got[name]), w, rtol=1e-4, atol=1e-5, err_msg=name)
