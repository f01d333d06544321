"""Whisper speech recognition (``SpeechToText`` with ``WhisperRecognizer``) against transformers 4.57.6's
``pipeline("automatic-speech-recognition")`` running the fixture's PyTorch weights with the same options.

The tiny random fixtures (tests/fixtures/audio_models.py: "whisper", English-only, and "whisper-multilingual")
have timestamp tokens, alignment heads and cross-attention outputs, so every path runs: one window, chunked
windows with strides, the sequential long-form seek loop, segment and word timestamps, language detection.
Results must be equal: texts, chunk texts, timestamps (segment times are token times, multiples of 0.02 s,
compared exactly; word times come from DTW over the attentions, compared exactly too). The real
whisper-tiny.en (tests/fixtures/whisper_real.py) runs on beckett.wav (10 s); the ~57 s clip is slow.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import transmuter_mlx as tm
from tests.fixtures.audio_models import build
from tests.fixtures.speech import speech
from transmuter_mlx.generation.whisper_languages import LANGUAGES
from transmuter_mlx.pipelines.audio_speech import SpeechToText


@functools.lru_cache(maxsize=4)
def reference(folder: str):
    """transformers' pipeline on the fixture's PyTorch model (model.safetensors beside the ONNX files)."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers.pipeline("automatic-speech-recognition", model=folder)


def expected(folder, audio, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return reference(str(folder))(audio.copy() if isinstance(audio, np.ndarray) else audio, **options)


@functools.lru_cache(maxsize=8)
def ours(name: str, backend: str = "mlx", batch_size: int = 1) -> SpeechToText:
    return SpeechToText(build(name), backend=backend, compile={"batch_size": batch_size})


def clip(name: str = "beckett", seconds: float | None = None) -> np.ndarray:
    wave, rate = speech(name)
    assert rate == 16000
    return wave if seconds is None else wave[: int(seconds * rate)]


def same(a: dict, b: dict) -> None:
    """Equal texts and chunks; timestamps within float rounding (both are sums of 0.02 s steps)."""
    assert a["text"] == b["text"]
    assert ("chunks" in a) == ("chunks" in b)
    for x, y in zip(a.get("chunks", []), b.get("chunks", []), strict=True):
        assert x["text"] == y["text"]
        for s, t in zip(x["timestamp"], y["timestamp"], strict=True):
            assert (s is None and t is None) or abs(s - t) < 1e-6, (x, y)


# ---------------------------------------------------------------- one window
@pytest.mark.parametrize(("backend", "options"), [
    ("mlx", {}),  # the pipeline's default: 5 beams
    ("mlx", {"return_timestamps": True, "num_beams": 1}),
    ("mlx", {"return_timestamps": "word", "num_beams": 1}),
    ("torch", {"return_timestamps": True, "num_beams": 1}),
])
def test_short_clip_matches_transformers(backend, options):
    wave = clip()
    result = ours("whisper", backend)(wave, **options)
    same(result, expected(build("whisper"), wave, **options))
    assert ("chunks" in result) == bool(options.get("return_timestamps"))
    assert len(result["text"]) > 20  # the fixture says something: equal texts are not two empty ones


def test_generation_options():
    wave = clip()
    for options in ({"num_beams": 1, "max_new_tokens": 5}, {"generate_kwargs": {"num_beams": 2}}):
        same(ours("whisper")(wave, **options), expected(build("whisper"), wave, **options))


# ---------------------------------------------------------------- long audio
def test_chunked_with_strides_matches_transformers():
    wave = clip("long", 16.0)
    for options in ({"chunk_length_s": 6, "stride_length_s": (1, 2), "return_timestamps": True, "num_beams": 1},):
        same(ours("whisper")(wave, **options), expected(build("whisper"), wave, **options))


def test_long_form_sequential_matches_transformers():
    wave = clip("long", 45.0)  # > 30 s without chunk_length_s: the seek loop over the whole recording
    for options in ({"return_timestamps": True, "num_beams": 1}, {"return_timestamps": "word", "num_beams": 1}):
        same(ours("whisper")(wave, **options), expected(build("whisper"), wave, **options))


def test_batched_windows_equal_one_at_a_time():
    wave = clip("long", 16.0)
    options = {"chunk_length_s": 6, "return_timestamps": True, "num_beams": 1}
    alone = ours("whisper")(wave, **options)
    assert ours("whisper", batch_size=4)(wave, **options) == alone
    # a list in, a list out; the windows of both inputs share batches
    short = clip()
    both = ours("whisper", batch_size=4)([wave, short], **options)
    assert both == [alone, ours("whisper")(short, **options)]


# ---------------------------------------------------------------- languages
def test_language_detection_and_forcing():
    wave = clip()
    folder = build("whisper-multilingual")
    for options in ({}, {"language": "german", "task": "translate"}, {"task": "transcribe", "return_timestamps": True}):
        same(ours("whisper-multilingual")(wave, num_beams=1, **options),
             expected(folder, wave, num_beams=1, **options))


def test_return_language_names_each_chunks_language():
    """transformers' chunks say ``"language": None`` (the prompt, where the language token is, is stripped
    before ``_decode_asr``); ours name it. Everything else equals transformers' result."""
    wave = clip(seconds=9.0)
    folder = build("whisper-multilingual")
    model = reference(str(folder)).model
    features = reference(str(folder)).feature_extractor(wave, sampling_rate=16000, return_tensors="pt")
    detected_id = int(model.detect_language(features.input_features).reshape(-1)[0])
    names = {v: k for k, v in model.generation_config.lang_to_id.items()}
    detected = LANGUAGES[names[detected_id][2:-2]]
    for options, language in (({}, detected), ({"return_timestamps": True}, detected),
                              ({"return_timestamps": "word"}, detected), ({"language": "de"}, "german")):
        got = ours("whisper-multilingual")(wave, return_language=True, num_beams=1, max_new_tokens=10, **options)
        want = expected(folder, wave, return_language=True, num_beams=1, max_new_tokens=10, **options)
        assert {c.pop("language") for c in got["chunks"]} == {language}
        assert {c.pop("language") for c in want["chunks"]} == {None}
        assert got == want
    with pytest.raises(ValueError, match="no 'return_language' option"):
        tm.audio.speech_to_text(build("wav2vec2-ctc"))(wave, return_language=True)


def test_language_errors():
    wave = clip(seconds=1.0)
    with pytest.raises(ValueError, match="English-only"):
        ours("whisper")(wave, language="fr")
    with pytest.raises(ValueError, match="unsupported language 'klingon'"):
        ours("whisper-multilingual")(wave, language="klingon")
    with pytest.raises(ValueError, match="task must be one of"):
        ours("whisper-multilingual")(wave, task="summarize")
    with pytest.raises(ValueError, match="return_timestamps='char'"):
        ours("whisper")(wave, return_timestamps="char")


# ---------------------------------------------------------------- streaming
def test_stream_pieces_join_to_the_text():
    wave = clip("long", 16.0)
    options = {"chunk_length_s": 6, "num_beams": 1}
    text = ours("whisper")(wave, **options)["text"]
    pieces = list(ours("whisper")(wave, stream=True, **options))
    assert "".join(pieces) == text
    # a stream of sample blocks: windows are cut as the blocks arrive, with the same result
    blocks = (wave[i:i + 7000] for i in range(0, len(wave), 7000))
    assert "".join(ours("whisper")(blocks, stream=True, **options)) == text
    blocks = (wave[i:i + 7000] for i in range(0, len(wave), 7000))
    assert ours("whisper")(blocks, **options)["text"] == text


# ---------------------------------------------------------------- bad input
def test_bad_inputs_name_the_input():
    asr = ours("whisper")
    with pytest.raises(ValueError, match="input 1"):
        asr([clip(seconds=1.0), np.zeros(0, np.float32)])
    with pytest.raises(ValueError, match="input 0: the audio has NaN"):
        asr(np.array([0.0, np.nan, 0.1], np.float32))
    with pytest.raises(ValueError, match="chunk_length_s"):
        asr(clip(seconds=1.0), chunk_length_s=2, stride_length_s=1)
    with pytest.raises(TypeError, match="unknown call option"):
        asr(clip(seconds=1.0), chunk_seconds=2)
