"""text-to-speech: text in, a waveform out, by the synthesizer of the model's family.

>>> from tests.fixtures.tts_models import build
>>> from transmuter_mlx.pipelines.audio_tts import TextToSpeech
>>> speak = TextToSpeech(build("vits"))
>>> out = speak({"text": "Hello, my dog is cute.", "seed": 42})
>>> out["audio"].dtype, out["audio"].ndim, out["sampling_rate"]
(dtype('float32'), 1, 16000)

:class:`TextToSpeech` is the front of the task: it checks a call's options and each input (a text, or
``{"text": str, "seed": int, "speaker_embedding": array}``) and hands them to the family's synthesizer
(the family module's ``SPEECH_SYNTHESIZER`` names it in :data:`SYNTHESIZERS`): VITS / MMS-TTS makes the
audio in one pass (:class:`VitsSynthesizer`), SpeechT5 step by step with a vocoder
(:class:`~transmuter_mlx.pipelines.audio_tts_speecht5.SpeechT5Synthesizer`). Each text runs alone: the
length of its audio depends on it.

Both models are random (VITS's noise, SpeechT5's dropout): the seed of an input decides its audio (the
same seed, the same audio, on every backend), and an input without one gets a random seed. With
``noise=False`` the random operators give fixed values (see ``Model.__call__``): VITS gives the audio of
transformers with ``noise_scale = noise_scale_duration = 0``, SpeechT5's dropout keeps every value.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from .base import Pipeline

__all__ = ["SYNTHESIZERS", "SpeechInput", "Synthesizer", "TextToSpeech", "VitsSynthesizer"]

#: family ``SPEECH_SYNTHESIZER`` -> "module:Class" of its synthesizer (imported when a pipeline is built)
SYNTHESIZERS: dict[str, str] = {
    "vits": "transmuter_mlx.pipelines.audio_tts:VitsSynthesizer",
    "speecht5": "transmuter_mlx.pipelines.audio_tts_speecht5:SpeechT5Synthesizer",
}
INPUT_KEYS = ("text", "seed", "speaker_embedding")


@dataclass
class SpeechInput:
    """One input, checked: its index, token ids, seed (None with ``noise=False``) and speaker embedding."""

    index: int
    ids: np.ndarray
    seed: int | None
    speaker_embedding: np.ndarray | None


class Synthesizer(Protocol):
    """The speech synthesizer of a family, built once per pipeline: ``Synthesizer(pipe)``.

    ``sampling_rate``: the rate of its audio. ``ids(index, text)``: the text's token ids (a ValueError naming
    the input when there are none). ``speaker_embedding(value, where)``: a speaker embedding checked (float32
    1-D), or a ValueError (``where`` names it) for a model that takes none or a wrong size.
    ``synthesize(item, noise)``: the float32 1-D audio of one input.
    """

    sampling_rate: int

    def ids(self, index: int, text: str) -> np.ndarray: ...

    def speaker_embedding(self, value: Any, where: str) -> np.ndarray | None: ...

    def synthesize(self, item: SpeechInput, noise: bool) -> np.ndarray: ...


class TextToSpeech(Pipeline):
    """Audio of a text: ``{"audio": float32 1-D array, "sampling_rate": int}``.

    Options: ``noise`` (default True; False: the random operators give fixed values, the seed is not used),
    ``speaker_embedding`` (SpeechT5: the speaker's x-vector, ``speaker_embedding_dim`` values (512); an
    input's own ``speaker_embedding`` wins). An input is a text or ``{"text", "seed", "speaker_embedding"}``.
    When building: ``vocoder`` (SpeechT5: the repository, folder or Model of the postnet and vocoder graph,
    ``spectrogram`` -> ``waveform``, for a repository without ``decoder_postnet_and_vocoder.onnx``; default
    Xenova/speecht5_hifigan, as transformers' pipeline defaults to microsoft/speecht5_hifigan).
    """

    task = "text-to-speech"
    defaults = MappingProxyType({"noise": True, "speaker_embedding": None})
    single_types = (str, Mapping)

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        # a build option of SpeechT5 repositories without the vocoder file (a repository, folder or Model)
        self.vocoder_source = options.pop("vocoder", None)
        super().__init__(source, **options)
        key = getattr(self.family, "SPEECH_SYNTHESIZER", None)
        if key not in SYNTHESIZERS:
            raise ValueError(f"{self.task}: the {self.family.__name__.rsplit('.', 1)[-1]} family names no speech "
                             f"synthesizer (SPEECH_SYNTHESIZER {key!r}; known: {sorted(SYNTHESIZERS)})")
        module, _, name = SYNTHESIZERS[key].partition(":")
        self.synthesizer: Synthesizer = getattr(importlib.import_module(module), name)(self)
        self.sampling_rate = int(self.synthesizer.sampling_rate)
        self.prepare_options(dict(self.options.extra))  # bad options fail when the pipeline is built

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(options["noise"], bool | np.bool_):
            raise TypeError(f"{self.task}: noise must be True or False, got {options['noise']!r}")
        speaker = options["speaker_embedding"]
        if speaker is not None:
            speaker = self.synthesizer.speaker_embedding(speaker, "the speaker_embedding option")
        return {**options, "noise": bool(options["noise"]), "speaker_embedding": speaker}

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> SpeechInput:
        fields = {"text": item} if isinstance(item, str) else item
        if not isinstance(fields, Mapping):
            raise TypeError(f"{self.task}: input {index} is a {type(item).__name__}; expected a text or a dict "
                            f"with {list(INPUT_KEYS)}")
        unknown = [k for k in fields if k not in INPUT_KEYS]
        if unknown:
            raise ValueError(f"{self.task}: input {index} has unknown key(s) {unknown}; the keys are {list(INPUT_KEYS)}")
        text = fields.get("text")
        if not isinstance(text, str):
            raise TypeError(f"{self.task}: input {index}: the text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError(f"{self.task}: input {index}: the text is empty")
        ids = self.synthesizer.ids(index, text)
        seed = fields.get("seed")
        if seed is not None and (isinstance(seed, bool | np.bool_) or not isinstance(seed, int | np.integer)
                                 or seed < 0):
            raise ValueError(f"{self.task}: input {index}: seed must be a non-negative int, got {seed!r}")
        if seed is None and options["noise"]:
            seed = int(np.random.default_rng().integers(0, 2**63))  # an input without a seed gets a random one
        speaker = fields.get("speaker_embedding")
        if speaker is not None:
            speaker = self.synthesizer.speaker_embedding(speaker, f"input {index}: its speaker_embedding")
        else:
            speaker = options["speaker_embedding"]
        return SpeechInput(index, ids, None if seed is None else int(seed), speaker)

    def forward(self, prepared: list[SpeechInput], options: Mapping[str, Any]) -> list[np.ndarray]:
        return [self.synthesizer.synthesize(item, options["noise"]) for item in prepared]

    def postprocess(self, prepared: SpeechInput, outputs: np.ndarray, options: Mapping[str, Any]) -> dict[str, Any]:
        return {"audio": np.asarray(outputs, np.float32).reshape(-1), "sampling_rate": self.sampling_rate}


def to_numpy(model: Any, value: Any) -> np.ndarray:
    """An output of ``model`` as numpy."""
    B = model.backend
    return np.asarray(B.to_numpy(value) if B.is_array(value) else value)


def declared(model: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` that the graph takes, each cast to the dtype it declares."""
    dtypes = {i.name: i.dtype for i in model.inputs}
    return {n: (v.astype(dtypes[n], copy=False) if isinstance(v, np.ndarray) and dtypes[n] is not None else v)
            for n, v in feeds.items() if n in dtypes}


class VitsSynthesizer:
    """VITS / MMS-TTS: the token ids through ``model.onnx`` once; its ``waveform`` is the audio."""

    def __init__(self, pipe: Any) -> None:
        from ..zoo.vits import VitsText

        self.task = pipe.task
        o = pipe.options
        self.model = o.model if o.model is not None else pipe.load_file("model")
        if pipe.vocoder_source is not None:
            raise ValueError(f"{self.task}: a VITS model makes its waveform itself: it takes no vocoder")
        self.text = o.tokenizer if isinstance(o.tokenizer, VitsText) else VitsText.from_repo(pipe.repo)
        self.sampling_rate = int(pipe.args.sampling_rate)

    def ids(self, index: int, text: str) -> np.ndarray:
        try:
            ids = self.text.ids(text)
        except ValueError as e:
            raise ValueError(f"{self.task}: input {index}: {e}") from None
        if not ids:
            raise ValueError(f"{self.task}: input {index}: the text has no character of the model's vocabulary "
                             f"({self.text.source}), so there is nothing to say")
        return np.asarray(ids, np.int64)

    def speaker_embedding(self, value: Any, where: str) -> np.ndarray | None:
        raise ValueError(f"{self.task}: {where}: a VITS model takes no speaker embedding")

    def synthesize(self, item: SpeechInput, noise: bool) -> np.ndarray:
        ids = item.ids[None]
        feeds = declared(self.model, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        out = self.model(feeds, seed=item.seed, noise=noise)
        if "waveform" not in out:
            raise ValueError(f"{self.task}: the VITS graph has no output 'waveform' (its outputs: {list(out)})")
        return to_numpy(self.model, out["waveform"]).reshape(-1).astype(np.float32)
