"""zero_shot_entity_recognition against the ``gliner`` package's ``predict_entities`` on the same tiny random
GLiNER models (span level and token level, tests/fixtures/gliner_models.py): the same entities (spans and labels,
in the same order) with scores within 1e-4, on mlx and torch. fp32 is compared with the package's PyTorch model;
q8 with the package on onnxruntime over the same file (its int8 weights as uint8 where onnxruntime's int8
kernels saturate, parity/exact_int8.py), run on one thread (onnxruntime's DynamicQuantizeLSTM
quantizes each thread's batch rows with their own range, so its q8 result depends on its thread count)."""

from __future__ import annotations

import numpy as np
import pytest

import transmuter_mlx as tm
from parity.exact_int8 import reference as ort_reference
from parity.exact_int8 import reference_source
from tests.fixtures.gliner_models import CHECK_LABELS, CHECK_TEXT, build, reference

pytest.importorskip("gliner")

SCORE_TOLERANCE = 1e-4
TEXTS = [
    CHECK_TEXT,
    "Alice met Bob in Paris; they work for Google and the United Nations.",
    "Zoë flew from Zürich to São Paulo with Ørsted's CEO.",  # multibyte: offsets are UTF-8 bytes
    "a",
]
MODELS = ["gliner-span", "gliner-token"]


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    folder = build(request.param)
    return folder, reference(folder)


@pytest.fixture(scope="module")
def q8_references(tmp_path_factory):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    from gliner import GLiNER

    return {name: GLiNER.from_pretrained(str(_exact_q8(build(name), tmp_path_factory)), local_files_only=True,
                                         load_onnx_model=True, onnx_model_file="onnx/model_quantized.onnx",
                                         session_options=options)
            for name in MODELS}


def _exact_q8(folder, tmp_path_factory):
    """``folder``, or where onnxruntime's int8 kernels saturate (parity/exact_int8.py) a copy of it whose
    ``onnx/model_quantized.onnx`` holds its int8 weights as uint8: the package then computes the exact products."""
    source = reference_source(folder / "onnx" / "model_quantized.onnx")
    if isinstance(source, str):
        return folder
    mirror = tmp_path_factory.mktemp(folder.name)
    for entry in folder.iterdir():
        if entry.name != "onnx":
            (mirror / entry.name).symlink_to(entry)
    (mirror / "onnx").mkdir()
    (mirror / "onnx" / "model_quantized.onnx").write_bytes(source)
    return mirror


def expected(package, text: str, labels, **options) -> list[dict]:
    """The package's entities, their character offsets as UTF-8 byte offsets (ours)."""
    out = []
    for e in package.predict_entities(text, list(labels), **options):
        start, end = len(text[:e["start"]].encode()), len(text[:e["end"]].encode())
        out.append({"start": start, "end": end, "label": e["label"], "score": e["score"], "phrase": e["text"]})
    return out


def assert_same(got: list[dict], want: list[dict]) -> None:
    assert [(e["start"], e["end"], e["label"], e["phrase"]) for e in got] == \
        [(e["start"], e["end"], e["label"], e["phrase"]) for e in want]
    for g, w in zip(got, want):
        assert abs(g["score"] - w["score"]) <= SCORE_TOLERANCE, (g, w)


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("options", [{}, {"threshold": 0.3}, {"threshold": 0.2, "flat_ner": False},
                                     {"threshold": 0.3, "multi_label": True}], ids=["default", "t0.3", "nested",
                                                                                   "multi-label"])
def test_entities_equal_the_package(model, backend, options):
    folder, package = model
    find = tm.text.zero_shot_entity_recognition(str(folder), list(CHECK_LABELS), backend=backend, **options)
    results = find(TEXTS)
    assert sum(len(r["entities"]) for r in results) > 3  # the fixture's scores pass the thresholds
    for text, result in zip(TEXTS, results):
        assert_same(result["entities"], expected(package, text, CHECK_LABELS, **options))
        data = text.encode()
        assert all(data[e["start"]:e["end"]].decode() == e["phrase"] for e in result["entities"])


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("name", MODELS)
def test_q8_equals_the_package_on_onnxruntime(name, backend, q8_references):
    find = tm.text.zero_shot_entity_recognition(str(build(name)), list(CHECK_LABELS), backend=backend,
                                                variant="q8", threshold=0.3)
    for text in TEXTS[:3]:
        assert_same(find(text)["entities"], expected(q8_references[name], text, CHECK_LABELS, threshold=0.3))


def test_inputs_with_their_own_labels_in_batches(model):
    """Dict inputs with their own labels, a list run in batches of 3 (rows padded as the package pads them),
    a call option over the build's."""
    folder, package = model
    find = tm.pipeline("gliner", str(folder), labels=["nothing"], compile={"batch_size": 3})
    inputs = [{"text": TEXTS[0], "labels": ["city", "person"]}, {"text": TEXTS[1], "labels": ["organization"]},
              {"text": TEXTS[2], "labels": ["person", "city", "country", "company"]}, TEXTS[3]]
    results = find(inputs, threshold=0.3)
    for item, result in zip(inputs, results):
        text, labels = (item["text"], item["labels"]) if isinstance(item, dict) else (item, ["nothing"])
        assert_same(result["entities"], expected(package, text, labels, threshold=0.3))
    assert find("", labels=["person"]) == {"entities": []}


def test_a_text_longer_than_max_len_is_read_in_windows(model):
    """Up to max_len words the result is the package's; a longer text is read in overlapping windows, so
    entities are found past max_len words (where the package stops), each a phrase of the text."""
    folder, package = model
    find = tm.text.zero_shot_entity_recognition(str(folder), list(CHECK_LABELS), threshold=0.3)
    max_len = find.args.max_len
    words = (CHECK_TEXT + " ") * 12
    fits = " ".join(words.split()[:max_len])  # the whitespace splitter also splits off the periods
    while len(tm.zoo.gliner.split_words(fits)) > max_len:
        fits = fits.rsplit(" ", 1)[0]
    assert_same(find(fits)["entities"], expected(package, fits, CHECK_LABELS, threshold=0.3))
    long = words.strip()
    assert len(tm.zoo.gliner.split_words(long)) > 2 * max_len
    entities = find(long)["entities"]
    cut = tm.zoo.gliner.split_words(long)[max_len - 1][2]
    assert any(e["start"] >= cut for e in entities)
    assert all(long.encode()[e["start"]:e["end"]].decode() == e["phrase"] for e in entities)
    assert [e["start"] for e in entities] == sorted(e["start"] for e in entities)


def test_bad_inputs_name_the_problem():
    find = tm.text.zero_shot_entity_recognition(str(build("gliner-span")))
    with pytest.raises(ValueError, match="input 0: no labels"):
        find("Paris")
    with pytest.raises(TypeError, match="input 1: a dict input has keys 'text' and 'labels'"):
        find([{"text": "a", "labels": ["x"]}, {"txt": "b"}])
    with pytest.raises(ValueError, match=r"threshold must be a number in \[0, 1\]"):
        find("Paris", labels=["city"], threshold=2)
    with pytest.raises(TypeError, match="unknown call option"):
        find("Paris", labels=["city"], top_k=3)


def test_the_q8_lstm_equals_onnxruntime_on_one_thread():
    """com.microsoft DynamicQuantizeLSTM (the q8 export's bidirectional LSTM, its nodes out of order in the file)
    alone, with rows of different lengths: Y, Y_h and Y_c within 1e-6 of onnxruntime on one thread."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from transmuter_mlx.converters.model import load

    source = onnx.load(str(build("gliner-span") / "onnx" / "model_quantized.onnx"))
    node = next(n for n in source.graph.node if n.op_type == "DynamicQuantizeLSTM")
    weights = {t.name: t for t in source.graph.initializer}
    names = ["X", "W", "R", "B", "lens", "", "", "", "Ws", "Wz", "Rs", "Rz"]
    initializers = []
    for name, original in zip(names, node.input):
        if original in weights:
            t = onnx.TensorProto()
            t.CopyFrom(weights[original])
            t.name = name
            initializers.append(t)
    hidden = next(a.i for a in node.attribute if a.name == "hidden_size")
    width = weights[node.input[1]].dims[1]
    lstm = helper.make_node("DynamicQuantizeLSTM", names, ["Y", "Yh", "Yc"], domain="com.microsoft",
                            direction="bidirectional", hidden_size=hidden)
    graph = helper.make_graph([lstm], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [7, 3, width]),
                                               helper.make_tensor_value_info("lens", TensorProto.INT32, [3])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Yh", "Yc")],
                              initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    feeds = {"X": np.random.default_rng(0).standard_normal((7, 3, width)).astype(np.float32),
             "lens": np.array([7, 4, 2], np.int32)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(ort_reference(proto).SerializeToString(), options).run(None, feeds)
    for backend in ("mlx", "torch"):
        model = load(proto, backend=backend)
        got = model(feeds)
        for name, w in zip(("Y", "Yh", "Yc"), want):
            np.testing.assert_allclose(model.backend.to_numpy(got[name]), w, atol=1e-6, err_msg=f"{backend} {name}")


def test_a_folder_as_the_gliner_package_saves_it(tmp_path):
    """Without config.json (the package writes only gliner_config.json) the repository is still a GLiNER."""
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(build("gliner-span"), folder)
    (folder / "config.json").unlink()
    find = tm.pipeline("zero-shot-entity-recognition", str(folder), labels=list(CHECK_LABELS))
    assert find(CHECK_TEXT) == tm.pipeline("gliner", str(build("gliner-span")), labels=list(CHECK_LABELS))(CHECK_TEXT)
