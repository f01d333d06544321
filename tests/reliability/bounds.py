"""Reliability rows: index bounds. An index outside the axis it indexes is an ``IndexOutOfRangeError``
naming the node, the input and the value (onnxruntime rejects the same feeds), never a read past a table
or a crash; in-range values give onnxruntime's numbers."""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import transmuter_mlx as tm
from tests.reliability import Exits, Raises, Returns, case

VOCAB = 30522  # the real all-MiniLM-L6-v2's


@functools.cache
def _minilm_path() -> str:
    from tests.fixtures.text_models import build

    return str(build("minilm") / "onnx" / "model.onnx")


@functools.cache
def _minilm(backend: str) -> tm.Model:
    return tm.load(_minilm_path(), backend=backend)


def _bert_feeds(**given: list) -> dict[str, np.ndarray]:
    ids = np.array([[101, 7592, 2088, 102]], np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    return {**feeds, **{k: np.array(v, np.int64) for k, v in given.items()}}


def _ort(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    source = model if isinstance(model, str) else model.SerializeToString()
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _rejected_by_ort(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> bool:
    try:
        _ort(model, feeds)
    except Exception:  # onnxruntime's own error type
        return True
    return False


def _index_graph(op: str, data_shape: list[int], index_shape: list[int], attrs: dict | None = None,
                 updates_shape: list[int] | None = None) -> onnx.ModelProto:
    """``op(data, indices[, updates])`` with data a fixed initializer and indices (and updates) fed."""
    data = numpy_helper.from_array(np.arange(np.prod(data_shape), dtype=np.float32).reshape(data_shape), "data")
    inputs = [helper.make_tensor_value_info("indices", TensorProto.INT64, index_shape)]
    names = ["data", "indices"]
    if updates_shape is not None:
        inputs.append(helper.make_tensor_value_info("updates", TensorProto.FLOAT, updates_shape))
        names.append("updates")
    node = helper.make_node(op, names, ["y"], name=f"the_{op.lower()}", **(attrs or {}))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", inputs, [out], [data])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _check_index_op(op: str, data_shape, index_shape, bad, good, attrs=None, updates_shape=None):
    """The bad indices raise (as onnxruntime rejects them); the good ones give onnxruntime's output."""

    def run(backend: str) -> None:
        proto = _index_graph(op, data_shape, index_shape, attrs, updates_shape)
        model = tm.load(proto, backend=backend)
        extra = {} if updates_shape is None else {"updates": np.ones(updates_shape, np.float32)}
        good_feeds = {"indices": np.array(good, np.int64), **extra}
        ours = np.asarray(model.backend.to_numpy(model(good_feeds)["y"]))
        np.testing.assert_allclose(ours, _ort(proto, good_feeds)[0], rtol=0, atol=0)
        bad_feeds = {"indices": np.array(bad, np.int64), **extra}
        assert _rejected_by_ort(proto, bad_feeds), "onnxruntime accepts these indices: not a bad feed"
        model(bad_feeds)

    return run


def _first_call(model: tm.Model, feeds: dict) -> np.ndarray:
    return np.asarray(model.backend.to_numpy(model(feeds)["last_hidden_state"]))


@case("bounds", "token id = vocabulary size (MiniLM)",
      Raises(tm.IndexOutOfRangeError, r"word_embeddings/Gather.*'input_ids' holds index 30522 .*\[-30522, 30522\)"))
def _(backend):
    _minilm(backend)(_bert_feeds(input_ids=[[101, VOCAB, 2088, 102]]))


@case("bounds", "token id below -vocabulary size", Raises(tm.IndexOutOfRangeError, r"'input_ids' holds index -30523"))
def _(backend):
    _minilm(backend)(_bert_feeds(input_ids=[[101, -VOCAB - 1, 2088, 102]]))


@case("bounds", "token type 5 of 2 (a small overrun)",
      Raises(tm.IndexOutOfRangeError, r"token_type_embeddings/Gather.*'token_type_ids' holds index 5 at position \[0, 2\]"))
def _(backend):
    _minilm(backend)(_bert_feeds(token_type_ids=[[0, 0, 5, 0]]))


@case("bounds", "token ids as the backend's own array are checked too", Raises(tm.IndexOutOfRangeError, r"index 30522"))
def _(backend):
    model = _minilm(backend)
    feeds = _bert_feeds(input_ids=[[101, VOCAB, 2088, 102]])
    feeds["input_ids"] = model.backend.asarray(feeds["input_ids"])
    model(feeds)


@case("bounds", "a bad call leaves the signature good",
      Returns(lambda pair, backend: np.testing.assert_array_equal(pair[0], pair[1])))
def _(backend):
    model = _minilm(backend)
    before = _first_call(model, _bert_feeds())
    try:
        model(_bert_feeds(input_ids=[[101, VOCAB + 5, 2088, 102]]))
    except tm.IndexOutOfRangeError:
        pass
    return before, _first_call(model, _bert_feeds())


@case("bounds", "unchecked device ids are clamped, never read past the table",
      Returns(lambda pair, backend: np.testing.assert_allclose(pair[0], pair[1], atol=1e-5)))
def _(backend):
    model = _minilm(backend)
    feeds = _bert_feeds(input_ids=[[101, VOCAB + 1000, 2088, 102]])
    feeds["input_ids"] = model.backend.asarray(feeds["input_ids"])
    clamped = _ort(_minilm_path(), _bert_feeds(input_ids=[[101, VOCAB - 1, 2088, 102]]))[0]
    return _first_call_unchecked(model, feeds), clamped


def _first_call_unchecked(model: tm.Model, feeds: dict) -> np.ndarray:
    return np.asarray(model.backend.to_numpy(model(feeds, unchecked=("input_ids",))["last_hidden_state"]))


@case("bounds", "Gather", Raises(tm.IndexOutOfRangeError, r"'the_gather'.*holds index 7 .*\[-4, 4\)"))
def _(backend):
    _check_index_op("Gather", [4, 3], [2], bad=[1, 7], good=[3, -4])(backend)


@case("bounds", "GatherElements", Raises(tm.IndexOutOfRangeError, r"'the_gatherelements'.*index 3 .*\[-3, 3\)"))
def _(backend):
    _check_index_op("GatherElements", [4, 3], [4, 2], bad=[[0, 1]] * 3 + [[3, 0]], good=[[0, -1]] * 4,
                    attrs={"axis": 1})(backend)


@case("bounds", "GatherND", Raises(tm.IndexOutOfRangeError, r"'the_gathernd'.*index \[1, 9\]"))
def _(backend):
    _check_index_op("GatherND", [4, 3], [2, 2], bad=[[0, 0], [1, 9]], good=[[3, 2], [-1, -3]])(backend)


@case("bounds", "ScatterND", Raises(tm.IndexOutOfRangeError, r"'the_scatternd'.*index \[4\]"))
def _(backend):
    _check_index_op("ScatterND", [4, 3], [2, 1], bad=[[0], [4]], good=[[1], [-1]], updates_shape=[2, 3])(backend)


@case("bounds", "ScatterElements", Raises(tm.IndexOutOfRangeError, r"'the_scatterelements'.*index -5"))
def _(backend):
    _check_index_op("ScatterElements", [4, 3], [1, 3], bad=[[0, -5, 1]], good=[[0, -4, 3]],
                    updates_shape=[1, 3])(backend)


def _computed_index_model() -> onnx.ModelProto:
    """Gather(table, Cast(Floor(MatMul(x, w)))): an index the device computes, checked on the device."""
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")
    w = numpy_helper.from_array(np.ones((2, 1), np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Floor", ["m"], ["f"]),
        helper.make_node("Cast", ["f"], ["i"], to=TensorProto.INT64),
        helper.make_node("Gather", ["table", "i"], ["y"], name="computed_gather"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [x], [y], [table, w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@case("bounds", "an index computed on the device (MatMul -> Cast -> Gather)",
      Raises(tm.IndexOutOfRangeError, r"'computed_gather'.*holds index 5"))
def _(backend):
    proto = _computed_index_model()
    model = tm.load(proto, backend=backend)
    good = {"x": np.array([[1, 1], [0, 1], [-2, -1]], np.float32)}  # rows 2, 1, -3
    ours = np.asarray(model.backend.to_numpy(model(good)["y"]))
    np.testing.assert_array_equal(ours, _ort(proto, good)[0])
    bad = {"x": np.array([[1, 1], [2, 3], [0, 0]], np.float32)}  # row 5 of 4
    assert _rejected_by_ort(proto, bad)
    model(bad)


@case("bounds", "GPT-2 position_ids past its 256 learned positions",
      Raises(tm.IndexOutOfRangeError, r"'position_ids' holds index 256 .*\[-256, 256\)"))
def _(backend):
    from tests.fixtures.generation_models import build

    path = str(build("gpt2") / "onnx" / "model.onnx")
    model = tm.load(path, backend=backend)
    layers = {i.name: i for i in model.inputs}
    feeds = {"input_ids": np.array([[5]]), "attention_mask": np.ones((1, 3), np.int64),
             "position_ids": np.array([[256]])}
    for name, info in layers.items():
        if name.startswith("past_key_values"):
            feeds[name] = np.zeros((1, info.shape[1], 2, info.shape[3]), np.float32)
    assert _rejected_by_ort(path, feeds)
    model(feeds)


case("bounds", "out-of-range ids end in an error, not a crash of the process (SIGSEGV before)", Exits(r"""
    import numpy as np, transmuter_mlx as tm
    from tests.reliability.bounds import _bert_feeds, _minilm_path
    model = tm.load(_minilm_path(), backend=BACKEND)
    for bad in ([[101, 30522, 2088, 102]], [[101, 10**9, 2088, 102]]):
        try:
            model(_bert_feeds(input_ids=bad))
        except tm.IndexOutOfRangeError as e:
            print("raised:", e)
    """, 0, r"raised:.*index 30522(.|\n)*raised:.*index 1000000000"))(None)
