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

import importlib
import itertools
import os
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..audio_input import AUDIO_TYPES, iter_audio_blocks, load_audio
from ..generation.config import GenerationConfig
from .base import Pipeline
from .iterables import is_iterable_input

__all__ = ["RECOGNIZERS", "SPEECH_OPTIONS", "Recognizer", "SpeechToText"]

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
    "return_language": None,  # Whisper: each chunk names its language (the language token of its prompt)
    "stream": False,  # pipe(x, stream=True): an iterator of text pieces as windows finish
    "generate_kwargs": None,  # transformers' spelling: a dict of generation options (and language, task)
}


@runtime_checkable
class Recognizer(Protocol):
    """The speech recognizer of a family (see the module docstring).

    ``sampling_rate``: the rate the model takes its waveforms at (the feature extractor's).
    ``recognize(waves, options)``: one result dict per waveform (``{"text"}`` and, with timestamps,
    ``{"chunks"}``); bad options or input raise ``ValueError`` naming the input index and the problem.
    Optional: ``stream(audio, options) -> Iterator[str]``, the text of one input in pieces that join to its
    ``recognize`` text (``audio``: a waveform, or an iterator of checked float32 blocks of a stream); without
    it, ``stream=True`` is a ValueError.
    """

    sampling_rate: int

    def __init__(self, pipe: Any) -> None: ...

    def recognize(self, waves: list[np.ndarray], options: Mapping[str, Any]) -> list[dict[str, Any]]: ...


class SpeechToText(Pipeline):
    """``automatic-speech-recognition``: audio in, ``{"text"}`` out (``{"text", "chunks"}`` with timestamps).

    >>> import numpy as np
    >>> from tests.fixtures.audio_models import build
    >>> asr = SpeechToText(build("whisper"))
    >>> type(asr.recognizer).__name__, asr.recognizer.sampling_rate
    ('WhisperRecognizer', 16000)
    >>> sorted(asr(np.zeros(8000, np.float32)))
    ['text']

    An input is anything :func:`~transmuter_mlx.audio_input.load_audio` takes (an array at the model's
    rate, a ``{"raw"/"array", "sampling_rate"}`` dict, a path, URL or bytes); a list is a batch and gives a
    list. The options are transformers' (``return_timestamps``, ``chunk_length_s``, ``stride_length_s``,
    ``language``, ``task``, and the generation options such as ``max_new_tokens`` and ``num_beams``), given
    when the pipeline is built or at each call.
    """

    task = "automatic-speech-recognition"
    defaults = MappingProxyType({**SPEECH_OPTIONS, **{n: None for n in GenerationConfig.fields()}})
    single_types = AUDIO_TYPES

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        name = getattr(self.family, "SPEECH_RECOGNIZER", None)
        if name not in RECOGNIZERS:
            raise ValueError(f"{self.task}: the {self.family.__name__.rsplit('.', 1)[-1]} family names no speech "
                             f"recognizer (SPEECH_RECOGNIZER {name!r}; known: {sorted(RECOGNIZERS)})")
        module, cls = RECOGNIZERS[name].split(":")
        self.recognizer: Recognizer = getattr(importlib.import_module(module), cls)(self)

    def call_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The options of a call; ``generate_kwargs`` (a dict) is spread into them, as transformers does."""
        opts = super().call_options(given)
        extra = opts.pop("generate_kwargs", None)
        if extra is None:
            return opts
        if not isinstance(extra, Mapping):
            raise TypeError(f"{self.task}: generate_kwargs must be a dict, not {type(extra).__name__}")
        unknown = [k for k in extra if k not in self.defaults or k in ("generate_kwargs", "stream")]
        if unknown:
            raise TypeError(f"{self.task}: unknown generate_kwargs {unknown}; they are generation options "
                            f"(max_new_tokens, num_beams, ...), language and task")
        return {**opts, **extra}

    def __call__(self, inputs: Any, **options: Any) -> Any:
        opts = self.call_options(options)
        if opts.get("stream"):
            if isinstance(inputs, list | tuple):
                raise ValueError(f"{self.task}: stream=True takes one input, not a list")
            return self.stream(inputs, opts)
        return super().__call__(inputs, **options)

    def iterable_inputs(self, inputs: Any) -> tuple[Iterable[Any] | None, Any]:
        """An iterable of clips (paths, bytes, ``{"raw", "sampling_rate"}`` dicts) is inputs, run lazily; an
        iterable of sample blocks (arrays, lists of numbers) is one input, a stream (as before)."""
        if not is_iterable_input(inputs):
            return None, inputs
        items = iter(inputs)
        first = next(items, None)
        if first is None:
            return iter(()), inputs
        items = itertools.chain([first], items)
        is_clip = isinstance(first, str | bytes | bytearray | os.PathLike | Mapping)
        return (items if is_clip else None), items

    def load(self, index: int, item: Any) -> np.ndarray | Iterator[np.ndarray]:
        """Input ``index`` as a float32 mono waveform at the recognizer's rate, or, for a stream (an iterator of
        sample blocks), its checked blocks; bad input raises naming it."""
        rate = self.recognizer.sampling_rate
        if not isinstance(item, AUDIO_TYPES) and isinstance(item, Iterable):
            return iter_audio_blocks(item, rate, self.task, index)
        return load_audio(item, rate, self.task, index)

    def whole(self, index: int, item: Any) -> np.ndarray:
        """Input ``index`` as one waveform (a stream's blocks joined)."""
        audio = self.load(index, item)
        if isinstance(audio, np.ndarray):
            return audio
        blocks = list(audio)
        if not blocks:
            raise ValueError(f"{self.task}: input {index}: the stream gave no audio")
        return np.concatenate(blocks).astype(np.float32, copy=False)

    def run(self, items: list[Any], options: dict[str, Any]) -> list[dict[str, Any]]:
        waves = [self.whole(i, x) for i, x in enumerate(items)]
        return self.recognizer.recognize(waves, options)

    def stream(self, item: Any, options: Mapping[str, Any]) -> Iterator[str]:
        """The text of one input in pieces as its windows are transcribed (the recognizer's ``stream``); a stream
        input (an iterator of sample blocks) is transcribed window by window as its blocks arrive."""
        streaming = getattr(self.recognizer, "stream", None)
        if streaming is None:
            raise ValueError(f"{self.task}: the recognizer of {self.repo.name} does not stream; drop stream=True")
        return streaming(self.load(0, item), options)
