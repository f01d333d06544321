"""automatic-speech-recognition: speech in, text out, by the recognizer of the model's family.

:class:`SpeechToText` is the front of the task: it checks a call's options, loads each input with
:func:`transmuter_mlx.audio_input.load_audio` at the recognizer's sampling rate and hands the waveforms
to the family's :class:`Recognizer` (the family module's ``SPEECH_RECOGNIZER`` names it in
:data:`RECOGNIZERS`): Whisper's encoder-decoder, a CTC head (wav2vec2, HuBERT), Moonshine.

A recognizer is built once per pipeline, ``Recognizer(pipe)``, and reads what it needs from the pipe
(``pipe.repo``, ``pipe.config``, ``pipe.args``, ``pipe.family``, ``pipe.options`` (backend, dtype,
compile.batch_size, featurizer, tokenizer, model), ``pipe.load_file(role)``, ``pipe.task``). Its
``recognize(waves, options)`` takes float32 mono waveforms at its ``sampling_rate`` and a call's
checked options (:data:`SPEECH_OPTIONS` plus the family's own, all keys present, None when not given)
and returns one result per waveform, as transformers' pipeline:
``{"text": str}``, plus ``"chunks": [{"text": str, "timestamp": (start_s, end_s)}, ...]`` when
``return_timestamps`` asks for them. An option it does not serve (a value other than None/its
default) is a ``ValueError`` naming the option and the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["RECOGNIZERS", "SPEECH_OPTIONS", "Recognizer"]

#: family ``SPEECH_RECOGNIZER`` -> "module:Class" of its recognizer (imported when a pipeline is built)
RECOGNIZERS: dict[str, str] = {
    "whisper": "transmuter_mlx.generation.whisper_asr:WhisperRecognizer",
    "ctc": "transmuter_mlx.pipelines.audio_ctc:CTCRecognizer",
    "moonshine": "transmuter_mlx.pipelines.audio_moonshine:MoonshineRecognizer",
}

#: the options of the task, as transformers' pipeline names them (generation options come on top:
#: ``GenerationConfig.fields()``, e.g. ``max_new_tokens``, ``num_beams``)
SPEECH_OPTIONS: dict[str, Any] = {
    "return_timestamps": None,  # False/None, True (segments: Whisper; CTC: not allowed), "word", "char" (CTC)
    "chunk_length_s": None,  # seconds per window; None: the whole input (Whisper: sequential long-form > 30 s)
    "stride_length_s": None,  # seconds of overlap each side (number or (left, right)); default chunk_length_s / 6
    "language": None,  # Whisper: a language ("en", "english", "<|en|>"); None: detected when multilingual
    "task": None,  # Whisper: "transcribe" or "translate"
    "stream": False,  # pipe(x, stream=True): an iterator of text pieces as windows finish
    "stream_done": False,
}


@runtime_checkable
class Recognizer(Protocol):
    """The speech recognizer of a family (see the module docstring).

    ``sampling_rate``: the rate the model takes its waveforms at (the feature extractor's).
    ``recognize(waves, options)``: one result dict per waveform (``{"text"}`` and, with timestamps,
    ``{"chunks"}``); bad options or input raise ``ValueError`` naming the input index and the problem.
    """

    sampling_rate: int

    def __init__(self, pipe: Any) -> None: ...

    def recognize(self, waves: list[np.ndarray], options: Mapping[str, Any]) -> list[dict[str, Any]]: ...
