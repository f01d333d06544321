"""The audio fixtures are sound: each export matched PyTorch when it was built, every file loads in
onnxruntime, the vocabularies are laid out as the real ones, and the random models say something.

The export check itself runs in the build (``tests/fixtures/audio_models.py``: onnxruntime against
PyTorch, a flat reference refused; the transformers pipeline's output on the check clips recorded,
degenerate output refused); these tests read what it recorded, so they are cheap once cached.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fixtures import audio_models
from tests.fixtures.audio_models import SPECS, TOLERANCE
from tests.fixtures.speech import repeated

pytest.importorskip("optimum.exporters.onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

WHISPERS = [n for n in SPECS if SPECS[n].family.startswith("whisper")]


@pytest.fixture(scope="module")
def folders():
    return audio_models.build_all()


def _meta(folder) -> dict:
    return json.loads((folder / "fixture.json").read_text())


@pytest.mark.parametrize("name", SPECS)
def test_export_check_passed(folders, name):
    meta = _meta(folders[name])
    checks = {k: v for k, v in meta["check"].items() if k != "quantized"}
    assert checks, "no export was checked"
    for stem, outputs in checks.items():
        assert f"{stem}.onnx" in meta["onnx"]
        for output, report in outputs.items():
            assert report["max_abs_diff"] <= TOLERANCE * max(1.0, report["max_abs_ref"]), (stem, output)
            assert report["std_ref"] > 1e-6, f"{stem}:{output} is flat: the comparison proves nothing"
    quantized = sorted(f for f in meta["onnx"] if f.endswith("_quantized.onnx"))
    if SPECS[name].quantize:
        assert quantized == sorted(
            f.replace(".onnx", "_quantized.onnx") for f in meta["onnx"] if f not in quantized
        )
        for stem, outputs in meta["check"]["quantized"].items():
            assert meta["onnx"][f"{stem}_quantized.onnx"] == meta["onnx"][f"{stem}.onnx"]
            assert 0 < max(outputs.values()) < np.inf, f"{stem}_quantized.onnx is not quantized"
    else:
        assert not quantized


@pytest.mark.parametrize("name", SPECS)
def test_files_load_in_onnxruntime(folders, name):
    """Each ONNX file loads and declares the inputs and outputs fixture.json records."""
    for file, io in _meta(folders[name])["onnx"].items():
        session = ort.InferenceSession(str(folders[name] / "onnx" / file), providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == io["inputs"], file
        assert [o.name for o in session.get_outputs()] == io["outputs"], file


@pytest.mark.parametrize("name", WHISPERS)
def test_whisper_vocabulary(folders, name):
    """Real Whisper's layout: text ids below <|endoftext|>, the special tokens in order, 1501 timestamps
    from no_timestamps_token_id + 1 (what WhisperTokenizer and the timestamp logits processor assume)."""
    folder = folders[name]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    generation = json.loads((folder / "generation_config.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    facts = _meta(folder)["vocab"]
    ids = tok.convert_tokens_to_ids
    eot, sot, nots = ids("<|endoftext|>"), ids("<|startoftranscript|>"), ids("<|notimestamps|>")
    assert len(tok) == config["vocab_size"] == nots + 1 + 1501 == facts["vocab_size"]
    assert (eot, sot, nots + 1) == (
        facts["eos_token_id"],
        facts["decoder_start_token_id"],
        facts["timestamp_begin"],
    )
    assert tok.all_special_ids[-1] == nots and sot == eot + 1 and ids("<|en|>") == sot + 1
    assert [
        ids(t)
        for t in ("<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>")
    ] == list(range(sot + 100, nots))  # 99 languages between
    assert ids("<|0.00|>") == nots + 1 and ids("<|30.00|>") == len(tok) - 1
    assert tok.decode([nots + 1, 10, nots + 51], decode_with_timestamps=True) == "<|0.00|>+<|1.00|>"
    assert max(i for t, i in tok.get_vocab().items() if not t.startswith("<|")) < eot
    assert generation["no_timestamps_token_id"] == nots and generation["decoder_start_token_id"] == sot
    assert generation["eos_token_id"] == eot and generation["alignment_heads"]
    assert generation["is_multilingual"] == (name == "whisper-multilingual")
    assert all(i < len(tok) for i in generation["suppress_tokens"] + generation["begin_suppress_tokens"])
    if generation["is_multilingual"]:
        assert generation["lang_to_id"]["<|fr|>"] == ids("<|fr|>") and len(generation["lang_to_id"]) == 99
        assert generation["task_to_id"] == {
            "translate": ids("<|translate|>"),
            "transcribe": ids("<|transcribe|>"),
        }
    else:
        assert "lang_to_id" not in generation


@pytest.mark.parametrize("name", WHISPERS)
def test_whisper_says_something(folders, name):
    """The recorded pipeline output has words and timestamped chunks, and a fresh run reproduces it."""
    folder = folders[name]
    recorded = _meta(folder)["pipeline"]
    assert len(recorded["short"]["text"].split()) >= 3
    for key in ("short_timestamps", "long_timestamps", "short_words"):
        assert recorded[key]["text"].strip() and len(recorded[key]["chunks"]) >= 2, key
    words = recorded["short_words"]["chunks"]
    assert len({t for c in words for t in c["timestamp"]}) >= 3 and words[-1]["timestamp"][1] > 0
    pipe = transformers.pipeline("automatic-speech-recognition", model=str(folder))
    assert pipe(repeated("beckett", 3.0)) == recorded["short"]


@pytest.mark.parametrize("name", [n for n in SPECS if SPECS[n].family.endswith("-ctc")])
def test_ctc_says_something(folders, name):
    text = _meta(folders[name])["pipeline"]["short"]["text"]
    assert len(text.split()) >= 5 and len(set(text.replace(" ", ""))) >= 5, text


def test_moonshine_says_something(folders):
    recorded = _meta(folders["moonshine"])["pipeline"]
    assert recorded["short"] != recorded["synthetic"]
    for result in recorded.values():
        assert len(result["text"].split()) >= 2, result
    generation = json.loads((folders["moonshine"] / "generation_config.json").read_text())
    tok = transformers.AutoTokenizer.from_pretrained(folders["moonshine"])
    assert (generation["decoder_start_token_id"], generation["eos_token_id"]) == (
        tok.bos_token_id,
        tok.eos_token_id,
    )


def test_clap_zero_shot_scores_spread(folders):
    recorded = _meta(folders["clap"])["pipeline"]
    assert recorded["clips"][0] != recorded["clips"][1]
    for result in recorded["clips"]:
        assert sorted(r["label"] for r in result) == sorted(recorded["labels"])
        assert max(r["score"] for r in result) - min(r["score"] for r in result) > 0.05


@pytest.mark.parametrize("name", [n for n in SPECS if SPECS[n].labels])
def test_classifier_scores_spread(folders, name):
    clips = _meta(folders[name])["pipeline"]["clips"]
    config = json.loads((folders[name] / "config.json").read_text())
    assert sorted(config["id2label"].values()) == sorted(SPECS[name].labels)
    for result in clips:
        scores = [r["score"] for r in result]
        assert scores == sorted(scores, reverse=True) and max(scores) - min(scores) > 0.05
