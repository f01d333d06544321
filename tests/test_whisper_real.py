"""The real whisper-tiny.en (tests/fixtures/whisper_real.py) through ``SpeechToText``, against transformers 4.57.6's
automatic-speech-recognition pipeline on the same weights.

The fast test reads the transcripts the fixture recorded with transformers' pipeline when it was built (its
default 5 beams, and greedy); the others run transformers here, on the ~57 s clip: slow.
"""

from __future__ import annotations

import functools
import json
import warnings

import numpy as np
import pytest

from tests.fixtures.speech import speech
from tests.fixtures.whisper_real import build
from transmuter_mlx.pipelines.audio_speech import SpeechToText


@functools.lru_cache(maxsize=1)
def ours() -> SpeechToText:
    return SpeechToText(build("whisper-tiny.en"))


@functools.lru_cache(maxsize=1)
def reference():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return transformers.pipeline("automatic-speech-recognition", model=str(build("whisper-tiny.en")))


def expected(audio: np.ndarray, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return reference()(audio.copy(), **options)


def test_beckett_transcripts_equal_transformers():
    facts = json.loads((build("whisper-tiny.en") / "fixture.json").read_text())
    wave, _ = speech("beckett")
    assert ours()(wave)["text"] == facts["transcript"]  # the pipeline's default: 5 beams
    assert ours()(wave, num_beams=1)["text"] == facts["greedy_transcript"]


def max_time_difference(a: dict, b: dict) -> float:
    assert [c["text"] for c in a["chunks"]] == [c["text"] for c in b["chunks"]]
    return max(abs(s - t) for x, y in zip(a["chunks"], b["chunks"]) for s, t in zip(x["timestamp"], y["timestamp"])
               if s is not None and t is not None)


@pytest.mark.slow
@pytest.mark.parametrize("stamps", [True, "word"])
def test_beckett_timestamps_equal_transformers(stamps):
    wave, _ = speech("beckett")
    a, b = ours()(wave, return_timestamps=stamps), expected(wave, return_timestamps=stamps)
    assert a["text"] == b["text"]
    assert max_time_difference(a, b) <= (0.02 if stamps is True else 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("options", [{"return_timestamps": True}, {"chunk_length_s": 30, "return_timestamps": True},
                                     {"chunk_length_s": 20, "return_timestamps": "word"}])
def test_long_clip_equal_transformers(options):
    wave, _ = speech("long")
    a, b = ours()(wave, **options), expected(wave, **options)
    assert a["text"] == b["text"]
    assert max_time_difference(a, b) <= (0.02 if options["return_timestamps"] is True else 0.0)
