"""The audio tasks as functions, named as the spec names them; each returns a pipeline.

>>> import numpy as np, transmuter_mlx as tm
>>> from tests.fixtures.audio_models import build
>>> transcribe = tm.audio.speech_to_text(build("whisper"))
>>> sorted(transcribe(np.zeros(16000, np.float32)))
['text']

Each function takes the repository (a Hub repo id or a local folder; the task's default model
when None) and the options of ``tm.pipeline``. Audio is a float32 array of samples at the model's
sampling rate, ``{"raw": samples, "sampling_rate": rate}`` (resampled), a path or the ``bytes`` of
an audio file (soundfile; ffmpeg for other formats), or, for speech recognition, an iterator of
sample blocks; a list of them gives a list of results. See docs/audio.md for each task's options
and results. There is one function per ``audio.*`` row of the task table
(``transmuter_mlx.pipelines.tasks.TASKS``; tests/test_task_table.py checks that they agree).
"""

from __future__ import annotations

from typing import Any

from .pipelines import pipeline
from .pipelines.audio_classification import AudioClassification
from .pipelines.audio_speech import SpeechToText
from .pipelines.audio_tts import TextToSpeech
from .pipelines.audio_zero_shot import ZeroShotAudioClassification

__all__ = ["audio_classification", "speech_to_text", "text_to_speech", "zero_shot_audio_classification"]


def speech_to_text(model: Any = None, /, **options: Any) -> SpeechToText:
    """The text of speech (Whisper, Moonshine, CTC models); ``return_timestamps=True`` or ``"word"`` adds
    ``chunks`` with their times, ``chunk_length_s`` cuts long audio into windows merged at their overlaps.

    >>> import numpy as np
    >>> from tests.fixtures.audio_models import build
    >>> transcribe = speech_to_text(build("wav2vec2-ctc"))
    >>> sorted(transcribe(np.zeros(16000, np.float32), return_timestamps="word"))
    ['chunks', 'text']
    """
    return pipeline("automatic-speech-recognition", model, **options)


def audio_classification(model: Any = None, /, **options: Any) -> AudioClassification:
    """Labels of a sound with their scores, best first (``top_k``, default 5): AST, wav2vec2, HuBERT.

    >>> import numpy as np
    >>> from tests.fixtures.audio_models import build
    >>> classify = audio_classification(build("ast"))
    >>> len(classify(np.zeros(16000, np.float32), top_k=2)["predictions"])
    2
    """
    return pipeline("audio-classification", model, **options)


def zero_shot_audio_classification(
    model: Any = None, labels: Any = None, /, **options: Any
) -> ZeroShotAudioClassification:
    """Scores of the labels you give for a sound, from CLAP (each label in ``"This is a sound of {}."``).

    >>> import numpy as np
    >>> from tests.fixtures.audio_models import build
    >>> classify = zero_shot_audio_classification(build("clap"), ["a dog barking", "rain"])
    >>> sorted(p["label"] for p in classify(np.zeros(48000, np.float32))["predictions"])
    ['a dog barking', 'rain']
    """
    if labels is not None:
        options["labels"] = labels
    return pipeline("zero-shot-audio-classification", model, **options)


def text_to_speech(model: Any = None, /, **options: Any) -> TextToSpeech:
    """Speech of a text: ``{"audio": float32 samples, "sampling_rate": n}`` (VITS/MMS, SpeechT5 with a speaker
    embedding); an input ``{"text": ..., "seed": n}`` fixes its noise, ``noise=False`` removes it.

    >>> from tests.fixtures.tts_models import build
    >>> speak = text_to_speech(build("vits"))
    >>> sorted(speak("Hello there.", noise=False))
    ['audio', 'sampling_rate']
    """
    return pipeline("text-to-speech", model, **options)
