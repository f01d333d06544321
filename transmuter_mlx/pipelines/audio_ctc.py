"""Speech recognition with a CTC head (wav2vec2, HuBERT, WavLM, ...): greedy CTC, as transformers' pipeline.

>>> import transmuter_mlx as tm
>>> from tests.fixtures.audio_models import build
>>> from tests.fixtures.speech import speech
>>> from transmuter_mlx.pipelines.audio_speech import SpeechToText
>>> asr = SpeechToText(build("wav2vec2-ctc"))
>>> wave, rate = speech("beckett")
>>> result = asr(wave[:rate], return_timestamps="word")
>>> sorted(result), isinstance(result["text"], str)
(['chunks', 'text'], True)

:class:`CTCRecognizer` runs the family's ``model.onnx`` on one waveform (or one window of it) per call:
wav2vec2's normalisation and group norms see the whole input, so padding would change the logits. The
tokens are the argmax of each frame; :class:`CTCVocabulary` turns them into text as
``Wav2Vec2CTCTokenizer.decode`` does (repeats grouped, the pad (blank) token dropped, the word delimiter
made a space, special tokens kept) and gives the character and word offsets, in frames, that
``return_timestamps="char"``/``"word"`` turn into seconds (a frame is ``inputs_to_logits_ratio`` samples).
``chunk_length_s`` cuts long audio into overlapping windows as the pipeline does, and keeps of each
window's tokens those outside its strides; ``stream=True`` gives the text in pieces as windows finish
(from a waveform or a stream of sample blocks), ending each piece before a space.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..generation.config import GenerationConfig
from ..processors.audio import AudioProcessor
from ..tokenizer import _clean_up_tokenization

__all__ = ["CTCRecognizer", "CTCVocabulary", "Window", "check_wave", "stream_windows", "windows"]

TIMESTAMPS = ("char", "word")


@dataclass
class Window:
    """A piece of a waveform and the samples of its left and right strides (the overlap with its
    neighbours that the pipeline drops after the model has seen it)."""

    samples: np.ndarray
    left: int = 0
    right: int = 0


def window_sizes(chunk_length_s: float, stride_length_s: Any, sampling_rate: int, align_to: int,
                 task: str) -> tuple[int, int, int]:
    """Samples of a window and of its left and right strides, rounded to multiples of ``align_to`` as the
    pipeline rounds them (``stride_length_s`` defaults to ``chunk_length_s / 6``; a number or (left, right))."""
    if isinstance(chunk_length_s, bool) or not isinstance(chunk_length_s, int | float) or chunk_length_s <= 0:
        raise ValueError(f"{task}: chunk_length_s must be a positive number of seconds, got {chunk_length_s!r}")
    if stride_length_s is None:
        stride_length_s = chunk_length_s / 6
    if isinstance(stride_length_s, int | float) and not isinstance(stride_length_s, bool):
        stride_length_s = [stride_length_s, stride_length_s]
    if (not isinstance(stride_length_s, Sequence) or len(stride_length_s) != 2
            or not all(isinstance(s, int | float) and not isinstance(s, bool) and s >= 0 for s in stride_length_s)):
        raise ValueError(f"{task}: stride_length_s must be a number of seconds >= 0 or a (left, right) pair of "
                         f"them, got {stride_length_s!r}")
    chunk = int(round(chunk_length_s * sampling_rate / align_to) * align_to)
    left = int(round(stride_length_s[0] * sampling_rate / align_to) * align_to)
    right = int(round(stride_length_s[1] * sampling_rate / align_to) * align_to)
    if chunk <= left + right:  # the pipeline checks <; equal would make its windows never advance
        raise ValueError(f"{task}: chunk_length_s ({chunk} samples) must be longer than the strides together "
                         f"({left} + {right} samples)")
    return chunk, left, right


def windows(wave: np.ndarray, chunk: int, left: int, right: int) -> Iterator[Window]:
    """The windows of transformers' ``chunk_iter``: ``chunk`` samples every ``chunk - left - right``, the
    first without a left stride, the last without a right one; a window no longer than its left stride
    is skipped."""
    n, step = wave.shape[0], chunk - left - right
    for start in range(0, n, step):
        piece = wave[start:start + chunk]
        last = start + chunk >= n
        stride_left = 0 if start == 0 else left
        if piece.shape[0] > stride_left:
            yield Window(piece, stride_left, 0 if last else right)
        if last:
            break


def stream_windows(audio: np.ndarray | Iterable[np.ndarray], sizes: tuple[int, int, int] | None, task: str,
                   sampling_rate: int, least: int) -> Iterator[Window]:
    """The windows of :func:`windows` (``sizes``: window, left and right strides) cut from a waveform or
    from a stream's blocks as they arrive: a window goes out once more audio follows it (so it is not the
    last one), the rest when the stream ends. Without ``sizes``, the whole audio once it has ended (at
    least ``least`` samples). Input 0 is named in errors."""
    held, offset, start = np.zeros(0, np.float32), 0, 0  # the samples kept, from sample `offset` on
    for block in [audio] if isinstance(audio, np.ndarray) else audio:
        held = np.concatenate([held, check_wave(block, 0, task, 0, sampling_rate)])
        if sizes is None:
            continue
        chunk, left, right = sizes
        while offset + held.shape[0] > start + chunk:
            yield Window(held[start - offset:start - offset + chunk], left if start else 0, right)
            start += chunk - left - right
            held, offset = held[start - offset:], start
    if offset + held.shape[0] == 0:
        raise ValueError(f"{task}: input 0: the stream gave no audio")
    if sizes is None:
        yield Window(check_wave(held, 0, task, least, sampling_rate))
        return
    chunk, left, right = sizes
    n = offset + held.shape[0]
    for begin in range(start, n, chunk - left - right):  # the windows left, as chunk_iter cuts them
        piece = held[begin - offset:begin - offset + chunk]
        last = begin + chunk >= n
        stride_left = left if begin else 0
        if piece.shape[0] > stride_left:
            yield Window(piece, stride_left, 0 if last else right)
        if last:
            break


def frame_stride(window: Window, ratio: int) -> tuple[int, int]:
    """The frames of a window to keep, ``[start, stop)``: the pipeline's ``rescale_stride`` of the window's
    (samples, left, right) to frames, rounded as it rounds them (``stop`` may pass the last frame)."""
    samples = window.samples.shape[0]
    frames = int(round(samples * (1 / ratio)))
    left = int(round(window.left / samples * frames))
    right = int(round(window.right / samples * frames))
    return left, frames - right


def check_wave(wave: Any, index: int, task: str, least: int, sampling_rate: int) -> np.ndarray:
    """A float32 1-D waveform of at least ``least`` samples with finite values, else a ValueError naming
    input ``index``."""
    wave = np.asarray(wave)
    where = f"{task}: input {index}"
    if wave.ndim != 1:
        raise ValueError(f"{where}: a waveform must be 1-D (mono samples), got shape {wave.shape}")
    if wave.dtype.kind != "f":
        raise ValueError(f"{where}: a waveform must hold floats, got {wave.dtype}")
    if wave.shape[0] < least:
        count = f"{wave.shape[0]} sample" + ("" if wave.shape[0] == 1 else "s")
        raise ValueError(f"{where}: {count} is too short: the model needs at least {least} "
                         f"samples ({least / sampling_rate:.4g} s at {sampling_rate} Hz)")
    if not np.isfinite(wave).all():
        raise ValueError(f"{where}: the waveform holds NaN or infinite samples")
    return wave.astype(np.float32, copy=False)


def _token(value: Any, default: str | None) -> str | None:
    """A special token of tokenizer_config.json: a string, or an AddedToken dict's content."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return default if value is None else str(value)


@dataclass
class CTCVocabulary:
    """The tokens of a CTC head and the decoding of ``Wav2Vec2CTCTokenizer`` (skip_special_tokens=False).

    >>> vocab = CTCVocabulary({0: "<pad>", 1: "|", 2: "A", 3: "B"})
    >>> text, offsets = vocab.decode([2, 2, 0, 2, 1, 3, 3, 0], "word")
    >>> text, offsets
    ('AA B', [{'word': 'AA', 'start_offset': 0, 'end_offset': 4}, {'word': 'B', 'start_offset': 5, 'end_offset': 7}])
    """

    tokens: dict[int, str]  # id -> token, added tokens included
    pad_token: str = "<pad>"  # the CTC blank
    unk_token: str = "<unk>"
    word_delimiter_token: str | None = "|"
    replace_word_delimiter_char: str = " "
    do_lower_case: bool = False
    clean_up_tokenization_spaces: bool = False
    name: str = field(default="", compare=False)

    @classmethod
    def from_repo(cls, repo: Any) -> CTCVocabulary:
        """A repository's ``vocab.json`` (the language ``target_lang`` names, for a nested one), its
        added tokens and the settings of ``tokenizer_config.json`` (else ``special_tokens_map.json``);
        a repository with only ``tokenizer.json`` gives its vocabulary and its CTC decoder's settings."""
        config = repo.read_json("tokenizer_config.json") or {}
        special = repo.read_json("special_tokens_map.json") or {}
        settings = {**{k: v for k, v in special.items() if v is not None},
                    **{k: v for k, v in config.items() if v is not None}}
        vocab = repo.read_json("vocab.json")
        tokens: dict[int, str] = {}
        if vocab is not None:
            target = config.get("target_lang")
            if target is not None:
                if target not in vocab:
                    raise ValueError(f"{repo.name}: target_lang {target!r} is not a language of vocab.json")
                vocab = vocab[target]
            tokens = {int(i): str(t) for t, i in vocab.items()}
            for t, i in (repo.read_json("added_tokens.json") or {}).items():
                tokens[int(i)] = str(t)
        else:
            whole = repo.read_json("tokenizer.json")
            if whole is None:
                raise ValueError(f"{repo.name} has neither vocab.json nor tokenizer.json: a CTC head needs "
                                 "its vocabulary")
            tokens = {int(i): str(t) for t, i in (whole.get("model") or {}).get("vocab", {}).items()}
            decoder = whole.get("decoder") or {}
            if decoder.get("type") == "CTC":
                settings.setdefault("pad_token", decoder.get("pad_token"))
                settings.setdefault("word_delimiter_token", decoder.get("word_delimiter_token"))
                settings.setdefault("clean_up_tokenization_spaces", decoder.get("cleanup", False))
            added = {int(t["id"]): str(t["content"]) for t in whole.get("added_tokens", [])}
            tokens.update(added)
        for i, token in (config.get("added_tokens_decoder") or {}).items():
            tokens[int(i)] = str(token["content"] if isinstance(token, Mapping) else token)
        return cls(
            tokens,
            pad_token=_token(settings.get("pad_token"), "<pad>") or "<pad>",
            unk_token=_token(settings.get("unk_token"), "<unk>") or "<unk>",
            word_delimiter_token=_token(settings.get("word_delimiter_token"), "|"),
            replace_word_delimiter_char=str(settings.get("replace_word_delimiter_char", " ")),
            do_lower_case=bool(settings.get("do_lower_case", False)),
            clean_up_tokenization_spaces=bool(settings.get("clean_up_tokenization_spaces", False)),
            name=repo.name,
        )

    def token(self, token_id: int) -> str:
        """The token of an id; an id outside the vocabulary is the unknown token, as transformers maps it."""
        return self.tokens.get(int(token_id), self.unk_token)

    def decode(self, ids: Sequence[int] | np.ndarray, offsets: str | None = None
               ) -> tuple[str, list[dict[str, Any]]]:
        """``(text, offsets)`` of frame tokens: ``Wav2Vec2CTCTokenizer.decode(ids)``, and with ``offsets``
        ``"char"`` its ``char_offsets`` (``[{"char", "start_offset", "end_offset"}]``, frames) or ``"word"``
        the words made of them (``_get_word_offsets``)."""
        tokens = [self.token(i) for i in np.asarray(ids, np.int64).reshape(-1).tolist()]
        if not tokens:
            return "", []
        groups = [(token, len(list(run))) for token, run in itertools.groupby(tokens)]
        chars = [self.replace_word_delimiter_char if t == self.word_delimiter_token else t
                 for t, _ in groups if t != self.pad_token]
        text = "".join(chars).strip()
        if self.do_lower_case:
            text = text.lower()
        if self.clean_up_tokenization_spaces:
            text = _clean_up_tokenization(text)
        if offsets is None:
            return text, []
        ends = np.cumsum([n for _, n in groups]).tolist()
        starts = [0, *ends[:-1]]
        kept = [(s, e) for (t, _), s, e in zip(groups, starts, ends) if t != self.pad_token]
        found = [{"char": c, "start_offset": s, "end_offset": e} for c, (s, e) in zip(chars, kept)]
        return text, found if offsets == "char" else word_offsets(found, self.replace_word_delimiter_char)


def word_offsets(chars: list[dict[str, Any]], delimiter: str = " ") -> list[dict[str, Any]]:
    """Words of character offsets, split at ``delimiter`` (``Wav2Vec2CTCTokenizer._get_word_offsets``)."""
    words: list[dict[str, Any]] = []
    last, word, start, end = "SPACE", "", 0, 0
    for offset in chars:
        char = offset["char"]
        state = "SPACE" if char == delimiter else "WORD"
        if state == last:
            end = offset["end_offset"]
            word += char
        elif state == "SPACE":
            words.append({"word": word, "start_offset": start, "end_offset": end})
        else:
            start, end, word = offset["start_offset"], offset["end_offset"], char
        last = state
    if last == "WORD":
        words.append({"word": word, "start_offset": start, "end_offset": end})
    return words


class CTCRecognizer:
    """The ``automatic-speech-recognition`` recognizer of CTC families (``SPEECH_RECOGNIZER = "ctc"``).

    Built from a ``SpeechToText`` pipe: its ``model.onnx`` (or the ``model=`` option), the feature
    extractor of ``preprocessor_config.json`` (or ``featurizer=``) and the CTC vocabulary (or a
    :class:`CTCVocabulary` given as ``tokenizer=``). ``recognize(waves, options)`` gives
    ``{"text"}`` per waveform, and ``{"chunks": [{"text", "timestamp": (start_s, end_s)}]}`` with
    ``return_timestamps="char"`` or ``"word"``; ``chunk_length_s``/``stride_length_s`` window long audio;
    ``stream(audio, options)`` gives the text in pieces.
    """

    def __init__(self, pipe: Any) -> None:
        o = pipe.options
        self.task: str = pipe.task
        self.name: str = pipe.repo.name
        self.model = o.model if o.model is not None else pipe.load_file("model")
        self.processor = o.featurizer if o.featurizer is not None else AudioProcessor.from_repo(pipe.repo, self.task)
        self.vocabulary = o.tokenizer if isinstance(o.tokenizer, CTCVocabulary) else CTCVocabulary.from_repo(pipe.repo)
        self.sampling_rate: int = int(self.processor.sampling_rate)
        self.ratio: int = int(pipe.args.inputs_to_logits_ratio)
        self.min_samples: int = int(pipe.args.min_samples)

    def check_options(self, options: Mapping[str, Any]) -> str | None:
        """The call's timestamp kind ("char", "word" or None); options CTC does not serve are errors."""
        stamps = options.get("return_timestamps")
        if stamps is not None and stamps is not False and stamps not in TIMESTAMPS:
            raise ValueError(f"{self.task}: CTC models give character or word timestamps: return_timestamps must "
                             f"be 'char' or 'word' (or None), got {stamps!r}")
        for name in ("language", "task", "return_language", *GenerationConfig.fields()):
            if options.get(name) is not None and options.get(name) is not False:
                raise ValueError(f"{self.task}: {self.name} is a CTC model, which has no {name!r} option "
                                 "(it picks the best token of each frame, without a decoder)")
        return stamps or None

    def recognize(self, waves: list[np.ndarray], options: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One result per waveform (float32 mono at ``sampling_rate``); see the class docstring."""
        stamps = self.check_options(options)
        sizes = None
        if options.get("chunk_length_s"):
            sizes = window_sizes(options["chunk_length_s"], options.get("stride_length_s"), self.sampling_rate,
                                 self.ratio, self.task)
        waves = [check_wave(w, i, self.task, self.min_samples, self.sampling_rate) for i, w in enumerate(waves)]
        return [self.transcribe(w, i, stamps, sizes) for i, w in enumerate(waves)]

    def transcribe(self, wave: np.ndarray, index: int, stamps: str | None,
                   sizes: tuple[int, int, int] | None) -> dict[str, Any]:
        """One waveform: its windows' kept tokens joined, decoded."""
        pieces = [Window(wave)] if sizes is None else list(windows(wave, *sizes))
        tokens = [self.window_tokens(piece, index, sizes is not None) for piece in pieces]
        text, offsets = self.vocabulary.decode(np.concatenate(tokens), stamps)
        if stamps is None:
            return {"text": text}
        # frames to seconds as the pipeline computes them: frame * ratio, then / sampling rate
        chunks = [{"text": o[stamps], "timestamp": (o["start_offset"] * self.ratio / self.sampling_rate,
                                                    o["end_offset"] * self.ratio / self.sampling_rate)}
                  for o in offsets]
        return {"text": text, "chunks": chunks}

    def window_tokens(self, piece: Window, index: int, strided: bool) -> np.ndarray:
        """The tokens of one window's frames, those of its strides dropped (``strided``: a window of
        ``chunk_length_s``)."""
        if piece.samples.shape[0] < self.min_samples:
            raise ValueError(f"{self.task}: input {index}: a window of {piece.samples.shape[0]} samples is "
                             f"shorter than the model's {self.min_samples}: choose a longer chunk_length_s "
                             "or stride_length_s")
        frames = self.frame_tokens(piece.samples)
        start, stop = frame_stride(piece, self.ratio) if strided else (0, None)
        return frames[start:stop]

    def stream(self, audio: np.ndarray | Iterable[np.ndarray], options: Mapping[str, Any]) -> Iterator[str]:
        """The text of one input in pieces as its ``chunk_length_s`` windows are transcribed (without
        windows: the whole text once the audio has ended); the pieces join to the text of a plain call.
        ``audio`` is a waveform or a stream's checked blocks (windows are cut as the blocks arrive). A piece
        ends before a space (the next window may still extend the last word); with
        ``clean_up_tokenization_spaces`` (which may join a word to the next one) the text comes at the end."""
        if self.check_options(options):
            raise ValueError(f"{self.task}: stream=True gives text pieces only: drop return_timestamps, or drop "
                             "stream=True for the chunks with their timestamps")
        sizes = None
        if options.get("chunk_length_s"):
            sizes = window_sizes(options["chunk_length_s"], options.get("stride_length_s"), self.sampling_rate,
                                 self.ratio, self.task)
        return self._stream(audio, sizes)

    def _stream(self, audio: np.ndarray | Iterable[np.ndarray], sizes: tuple[int, int, int] | None) -> Iterator[str]:
        tokens: list[np.ndarray] = []
        emitted = ""
        for piece in stream_windows(audio, sizes, self.task, self.sampling_rate, self.min_samples):
            tokens.append(self.window_tokens(piece, 0, sizes is not None))
            stable = self._stable_text(tokens) if sizes is not None else ""
            if len(stable) > len(emitted) and stable.startswith(emitted):
                yield stable[len(emitted):]
                emitted = stable
        text = self.vocabulary.decode(np.concatenate(tokens))[0]
        if not text.startswith(emitted):  # the pieces are prefixes of the final text by construction
            raise RuntimeError(f"{self.task}: streamed text {emitted!r} is not the start of the text {text!r}")
        if len(text) > len(emitted):
            yield text[len(emitted):]

    def _stable_text(self, tokens: list[np.ndarray]) -> str:
        """The text of the tokens so far that later windows cannot change: without the last run of one
        token (the next window may continue it), up to the last space."""
        ids = np.concatenate(tokens)
        if self.vocabulary.clean_up_tokenization_spaces or not ids.size:
            return ""
        changes = np.flatnonzero(ids != ids[-1])
        text = self.vocabulary.decode(ids[:changes[-1] + 1] if changes.size else ids[:0])[0]
        spaces = [i for i, c in enumerate(text) if c.isspace()]
        return text[:spaces[-1]] if spaces else ""

    def frame_tokens(self, samples: np.ndarray) -> np.ndarray:
        """The argmax token of each frame of one window (the model on that window alone)."""
        feeds = {k: v[None] for k, v in self.processor.features(samples).items()}
        declared = {i.name: i.dtype for i in self.model.inputs}
        if "attention_mask" in declared and "attention_mask" not in feeds:  # the pipeline always asks for one
            feeds["attention_mask"] = np.ones(feeds["input_values"].shape, np.int64)
        missing = [n for n in declared if n not in feeds]
        if missing:
            raise ValueError(f"{self.task}: the ONNX graph of {self.name} takes {missing}, which the feature "
                             f"extractor does not give (it gives {sorted(feeds)})")
        feeds = {n: v.astype(declared[n], copy=False) if declared[n] is not None else v
                 for n, v in feeds.items() if n in declared}
        out = self.model(feeds)
        if "logits" not in out:
            raise ValueError(f"{self.task}: the ONNX graph of {self.name} has no 'logits' output (its outputs: "
                             f"{list(out)}); is it exported with a CTC head?")
        B = self.model.backend
        logits = B.to_numpy(out["logits"]) if B.is_array(out["logits"]) else np.asarray(out["logits"])
        if logits.ndim != 3:  # a sequence classifier's (batch, labels) logits, not per-frame ones
            raise ValueError(f"{self.task}: the ONNX graph of {self.name} gives logits of shape {logits.shape}, not "
                             "(batch, frames, vocabulary): it is not a CTC head (an audio classifier?)")
        return np.argmax(logits[0].astype(np.float32), axis=-1)
