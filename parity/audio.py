"""Parity of the audio pipelines with transformers, on the audio fixtures and the real Whisper tiny.en.

>>> from parity.audio import CASES, run_case                   # doctest: +SKIP
>>> run_case(CASES[0], "mlx", "fp32").passed                  # doctest: +SKIP
True

``python -m parity audio`` runs every case on both backends and writes parity/reports/audio.md and
audio.json. The clips are real speech (tests/fixtures/speech.py: beckett.wav, 10 s; "long", ~57 s of
synthesized speech; their 48 kHz copies for CLAP), read from the same WAV files on both sides; how each
task is compared is its row of parity/tasks.py, run by parity/runner.py. The default test suite asserts
the same comparisons task by task (tests/test_whisper_pipeline.py, test_whisper_real.py,
test_audio_ctc.py, test_moonshine.py, test_audio_classification.py, test_audio_zero_shot.py,
test_text_to_speech.py); tests/test_audio_parity.py (slow) runs these cases.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import runner
from .runner import Case, Outcome

__all__ = ["CASES", "VARIANTS", "main", "run_case"]

TITLE = "Audio pipelines: parity"
INTRO = (
    "fp32 is compared with transformers 4.57.6 pipelines on the fixture's PyTorch weights, with the same "
    "options, on the same samples (both sides read the clip's WAV file; transformers' pipeline gets "
    "``{\"raw\", \"sampling_rate\"}``). Speech recognition: the text and every chunk's text must be identical, "
    "segment timestamps within one time step (0.02 s), word timestamps equal (within 1e-6 s: both are sums of "
    "0.02 s steps). Classification and zero-shot classification: labels identical, scores within 1e-4. Text "
    "to speech, at ``noise=False`` (the PyTorch model with VITS's noise scales at 0; SpeechT5's dropout keeping "
    "every value): the length identical, every sample within 1e-4. The max abs diff is the largest compared "
    "value of a case in its own units (seconds, scores or samples). Fixtures: tiny random models "
    "(tests/fixtures/audio_models.py, tts_models.py) and the real Whisper tiny.en (whisper_real.py)."
)
VARIANTS = ("fp32",)
LABELS = ["a man speaking", "music", "a dog barking", "rain"]
TEXTS = ("Hello, my dog is cute.", "The quick brown fox jumps over the lazy dog.")
SPEAKER = [round(float(x), 6) for x in np.random.default_rng(0).standard_normal(8)]  # the fixture's 8 values

CASES: list[Case] = [
    # Whisper: one window, segments and words; long audio in strided windows and by the sequential loop
    *(Case("automatic-speech-recognition", f, ("beckett",), o, n) for f in ("whisper", "whisper-tiny.en")
      for o, n in (({}, ""), ({"return_timestamps": True}, "segments"), ({"return_timestamps": "word"}, "words"))),
    *(Case("automatic-speech-recognition", f, ("long",), {"chunk_length_s": 30}, "chunked")
      for f in ("whisper", "whisper-tiny.en")),
    *(Case("automatic-speech-recognition", f, ("long",), {"return_timestamps": True}, "long-form")
      for f in ("whisper", "whisper-tiny.en")),
    Case("automatic-speech-recognition", "whisper-multilingual", ("beckett",), {}, "detected language"),
    Case("automatic-speech-recognition", "whisper-multilingual", ("beckett",),
         {"language": "fr", "task": "translate"}, "fr translate"),
    # CTC: text, character and word offsets, strided windows; Moonshine
    *(Case("automatic-speech-recognition", f, ("beckett",), o, n) for f in ("wav2vec2-ctc", "hubert-ctc")
      for o, n in (({}, ""), ({"return_timestamps": "char"}, "chars"), ({"return_timestamps": "word"}, "words"))),
    Case("automatic-speech-recognition", "wav2vec2-ctc", ("long",), {"chunk_length_s": 10}, "chunked"),
    Case("automatic-speech-recognition", "moonshine", ("beckett",)),
    *(Case("audio-classification", f, ("beckett", "long"), {"top_k": None}) for f in ("ast", "wav2vec2-cls")),
    Case("zero-shot-audio-classification", "clap", ("beckett_48k_1s",), {"labels": LABELS}),
    Case("zero-shot-audio-classification", "clap", ("beckett_48k_1s",),
         {"labels": LABELS[:2], "hypothesis_template": "The sound of {}."}, "template"),
    Case("text-to-speech", "vits", TEXTS, {"noise": False}),
    Case("text-to-speech", "speecht5", TEXTS, {"noise": False, "speaker_embedding": SPEAKER}),
]


def fixture(name: str) -> Path:
    """The folder of a fixture, built offline when not cached."""
    if name == "whisper-tiny.en":
        from tests.fixtures.whisper_real import build

        return build(name)
    if name in ("vits", "speecht5"):
        from tests.fixtures.tts_models import STOP_BIAS, build, speecht5_variant

        return speecht5_variant(STOP_BIAS) if name == "speecht5" else build(name)  # speecht5: stops at step 5
    from tests.fixtures.audio_models import build

    return build(name)


def run_case(case: Case, backend: str, variant: str) -> Outcome:
    """One case on one backend and variant; audio inputs are clip names, resolved to their WAV files."""
    from tests.fixtures.speech import speech_path

    inputs = case.inputs if case.task == "text-to-speech" else tuple(str(speech_path(c)) for c in case.inputs)
    resolved = Case(case.task, case.fixture, inputs, case.options, case.name)
    return runner.check(resolved, fixture(case.fixture), backend, variant)


def main(argv: list[str] | None = None) -> int:
    """``python -m parity audio [--backend mlx] [--task automatic-speech-recognition]``"""
    return runner.main(argv, "audio", CASES, run_case, TITLE, INTRO, VARIANTS)
