"""``WhisperRecognizer``: speech recognition with Whisper, as transformers' automatic-speech-recognition pipeline.

>>> import numpy as np, transmuter_mlx as tm
>>> from tests.fixtures.audio_models import build
>>> asr = tm.pipelines.audio_speech.SpeechToText(build("whisper"))
>>> sorted(asr(np.zeros(16000, np.float32), return_timestamps=True))
['chunks', 'text']

Three ways through an input, as the pipeline (``AutomaticSpeechRecognitionPipeline`` for Whisper):

- 30 s or less: one window of log-mel frames (padded to 30 s);
- longer, without ``chunk_length_s``: the whole recording's frames, transcribed segment after segment
  (``WhisperGenerationMixin.generate``'s sequential long-form; timestamps are predicted whatever
  ``return_timestamps`` says, and the text is decoded from them);
- ``chunk_length_s``: windows of that many seconds, overlapping by ``stride_length_s`` each side (default
  a sixth of the window), each decoded alone, then merged by their longest common token sequence
  (``_decode_asr`` with the windows' strides).

``return_timestamps=True`` gives segments (``chunks`` with ``(start, end)`` seconds from the timestamp
tokens); ``"word"`` gives words timed by dynamic time warping over the cross attentions of the model's
``alignment_heads`` (the decoder export needs ``cross_attentions.N`` outputs). Windows of all the inputs of a
call are decoded ``compile.batch_size`` at a time.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..processors.audio import AudioProcessor
from ..tokenizer import Tokenizer
from .chunks import ChunkSink, StreamAbandoned, TextChunks, run_streamed
from .config import GenerationConfig
from .whisper_decode import Clip, Decoded, decode_clips
from .whisper_features import LogMelFrames
from .whisper_prompt import WhisperSettings
from .whisper_session import WhisperSession
from .whisper_text import decode_asr
from .whisper_words import token_timestamps_from_weights

__all__ = ["WhisperRecognizer", "pipeline_defaults", "windows_of"]

TASK = "automatic-speech-recognition"


class WhisperRecognizer:
    """The :class:`~transmuter_mlx.pipelines.audio_speech.Recognizer` of the whisper family."""

    def __init__(self, pipe: Any) -> None:
        o, repo = pipe.options, pipe.repo
        self.task, self.name = pipe.task, repo.name
        self.where = f"{self.task}: {repo.name}"
        self.featurizer = o.featurizer if o.featurizer is not None else AudioProcessor.from_repo(repo, self.task)
        self.sampling_rate = int(self.featurizer.sampling_rate)
        self.tokenizer = o.tokenizer or Tokenizer.from_repo(repo)
        self.generation = pipeline_defaults(GenerationConfig.from_repo(repo))
        raw = repo.read_json("generation_config.json") or {}
        self.settings = WhisperSettings.from_dict(raw, pipe.config)
        self.args = pipe.args
        self.max_target = int(self.args.max_target_positions or 448)
        self.segment_frames = 2 * int(self.args.max_source_positions)
        self.time_precision = float(getattr(self.featurizer, "chunk_length", 30)) / int(self.args.max_source_positions)
        self.median_filter_width = int(pipe.config.get("median_filter_width", 7))
        self.batch_size = o.compile.batch_size
        if isinstance(o.model, WhisperSession):
            self.session = o.model
        else:
            self.session = WhisperSession(pipe.load_file("encoder"), pipe.load_file("decoder"),
                                          heads=self.args.num_attention_heads, head_dim=self.args.head_dim)
        decoder = self.session.decoder
        if hasattr(decoder, "max_signatures"):
            # a step's signature is its cache length: keep one per target position, so that the next window
            # replays them (the least-recently-used cache of 64 would drop each before its next use)
            decoder.max_signatures = max(decoder.max_signatures, 2 * self.max_target)

    # ------------------------------------------------------------------ options
    def return_timestamps(self, options: Mapping[str, Any]) -> bool | str:
        """The call's ``return_timestamps`` (None: generation_config.json's), checked."""
        value = options.get("return_timestamps")
        value = value or self.settings.return_timestamps  # the pipeline: ``return_timestamps or config's``
        if value not in (False, True, "word", None):
            raise ValueError(f"{self.where}: Whisper gives segment (return_timestamps=True) or word "
                             f"(return_timestamps='word') timestamps, not return_timestamps={value!r}")
        return value or False

    def config(self, options: Mapping[str, Any]) -> GenerationConfig:
        """generation_config.json with the call's generation options."""
        given = {k: v for k, v in options.items() if k in GenerationConfig.fields() and v is not None}
        try:
            return self.generation.update(**given)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{self.where}: {error}") from error

    # ------------------------------------------------------------------ recognize
    def recognize(self, waves: list[np.ndarray], options: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One ``{"text", "chunks"?}`` per waveform (float32 mono at ``sampling_rate``)."""
        return self.run(waves, options)

    def prepare(self, options: Mapping[str, Any]) -> tuple[bool | str, GenerationConfig]:
        """A call's timestamps and generation settings, every option checked before any decoding."""
        stamps = self.return_timestamps(options)
        config = self.config(options)
        self.settings.check(options.get("language"), options.get("task"), stamps, self.where)
        if stamps == "word" and not self.session.has_cross_attentions:
            raise ValueError(f"{self.where}: return_timestamps='word' needs a decoder exported with its cross "
                             "attentions (cross_attentions.N outputs), which this ONNX export does not have")
        return stamps, config

    def decode(self, clips: list[Clip], options: Mapping[str, Any], stamps: bool | str, config: GenerationConfig,
               on_pass: Callable[[list[Decoded]], None] | None = None) -> list[Decoded]:
        """The tokens of ``clips`` (``compile.batch_size`` rows at a time)."""
        return decode_clips(
            self.session, clips, self.settings, config, language=options.get("language"), task=options.get("task"),
            return_timestamps=bool(stamps), word_timestamps=self.word_timestamps if stamps == "word" else None,
            batch_size=self.batch_size, max_target_positions=self.max_target, segment_frames=self.segment_frames,
            on_pass=on_pass)

    def run(self, waves: list[np.ndarray], options: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``recognize``: the windows of all the inputs decoded together."""
        stamps, config = self.prepare(options)
        clips, owners, strides = [], [], []
        for i, wave in enumerate(waves):
            for clip, stride in self.clips(wave, options, i):
                clips.append(clip)
                owners.append(i)
                strides.append(stride)
        decoded = self.decode(clips, options, stamps, config)
        words, language = stamps == "word", bool(options.get("return_language"))
        results = []
        for i in range(len(waves)):
            windows = [self.window(d, s, words, language) for d, s, o in zip(decoded, strides, owners) if o == i]
            results.append(self.text(windows, stamps, language))
        return results

    # ------------------------------------------------------------------ streaming
    def stream(self, audio: np.ndarray | Iterable[np.ndarray], options: Mapping[str, Any]) -> Iterator[str]:
        """The text of one input in pieces, as its windows (``chunk_length_s``) or its long-form segments are
        transcribed; the pieces join to the text of a plain call. ``audio`` is a waveform or a stream's checked
        blocks (cut into windows as they arrive). A worker thread decodes; leaving the iterator stops it."""
        stamps, config = self.prepare(options)
        return _joined(run_streamed(self.task, lambda sink: self._stream_run(audio, options, stamps, config, sink)))

    def _stream_run(self, audio: Any, options: Mapping[str, Any], stamps: bool | str, config: GenerationConfig,
                    sink: ChunkSink) -> dict[str, Any]:
        words, language = stamps == "word", bool(options.get("return_language"))
        chunked = bool(options.get("chunk_length_s"))
        done: list[dict[str, Any]] = []
        merge = _Merge(self.tokenizer, self.settings) if chunked and not stamps else None
        state = {"emitted": "", "previous": None}

        def say(text: str) -> None:
            text = text.rstrip("\ufffd")  # a character whose bytes are split over tokens may still change
            if len(text) > len(state["emitted"]) and text.startswith(state["emitted"]):
                sink(text[len(state["emitted"]):])
                state["emitted"] = text

        def on_pass(partial: list[Decoded]) -> None:
            if sink.abandoned.is_set():
                raise StreamAbandoned(f"{self.task}: the consumer of this stream left")
            if chunked or len(partial) != 1:
                return  # windows are reported as they end (below)
            # one recording's segments: its tokens only grow, what two successive texts share is final
            text = self.text([self.window(partial[0], None, words)], stamps)["text"]
            previous, state["previous"] = state["previous"], text
            if previous is not None:
                say(os.path.commonprefix([text, previous]))

        pending = iter(self.clips(audio, options, 0))
        while group := list(itertools.islice(pending, self.batch_size)):
            strides = [s for _, s in group]
            decoded = self.decode([c for c, _ in group], options, stamps, config, on_pass=on_pass)
            done.extend(self.window(d, s, words, language) for d, s in zip(decoded, strides))
            if merge is not None:
                for d in decoded:
                    merge.add(d.tokens)
                if merge.exact:
                    say(merge.committed_text())
        result = self.text(done, stamps, language)
        say(result["text"] + "\ufffd")  # the rest (its end kept whole: the marker is stripped)
        return result

    def text(self, windows: list[dict[str, Any]], stamps: bool | str, language: bool = False) -> dict[str, Any]:
        """The pipeline's result from an input's windows (``_decode_asr``); ``language``: chunks name their
        language (``return_language``)."""
        out = decode_asr(self.tokenizer, windows, return_timestamps=stamps, return_language=language,
                         time_precision=self.time_precision)
        result = {"text": out["text"]}
        if "chunks" in out:
            result["chunks"] = [{"text": c["text"], **{k: tuple(v) if k == "timestamp" else v for k, v in c.items()
                                                      if k != "text"}} for c in out["chunks"]]
        return result

    def window(self, decoded: Decoded, stride: tuple[float, float, float] | None, words: bool,
               language: bool = False) -> dict[str, Any]:
        """A window as ``_decode_asr`` reads it. ``language``: its tokens start with the language token of its
        prompt, which transformers strips with the prompt (its chunks then all say ``"language": None``), so
        that each chunk names the language it was transcribed in."""
        tokens, times = list(decoded.tokens), decoded.token_timestamps
        if language and decoded.language_id is not None:
            tokens = [decoded.language_id, *tokens]
            times = None if times is None else [times[0] if times else 0.0, *times]
        window: dict[str, Any] = {"tokens": np.asarray(tokens, np.int64)}
        if stride is not None:
            window["stride"] = stride
        if words:
            window["token_timestamps"] = np.asarray(times, np.float32)
        return window

    # ------------------------------------------------------------------ windows
    def clips(self, audio: np.ndarray | Iterable[np.ndarray], options: Mapping[str, Any], index: int
              ) -> Iterator[tuple[Clip, tuple[float, float, float] | None]]:
        """The clips of one input (a waveform, or the blocks of a stream) and their strides in seconds (chunked
        only), featurized when decoded; a stream is cut into windows as its blocks come (``chunk_length_s``),
        else gathered whole."""
        f = self.featurizer
        chunk_s = options.get("chunk_length_s")
        blocks = [audio] if isinstance(audio, np.ndarray) else audio
        if not chunk_s:
            wave = audio if isinstance(audio, np.ndarray) else _gather(audio, f"{self.where}: input {index}")
        if chunk_s:
            for part, left, right in windows_of(blocks, self.sampling_rate, chunk_s, options.get("stride_length_s"),
                                                self.where):
                n = len(part)
                yield (Clip(_window_frames(f, part), self.segment_frames,
                            int(f.frame_mask(min(n, f.n_samples), f.n_samples).sum())),
                       (n / self.sampling_rate, left / self.sampling_rate, right / self.sampling_rate))
        elif len(wave) > f.n_samples:
            if not options.get("return_timestamps") and self.settings.return_timestamps is False:
                raise ValueError(  # transformers' generate: the file's return_timestamps=false forbids long-form
                    f"{self.where}: input {index} is longer than {f.chunk_length} s, which Whisper transcribes "
                    "segment by segment with timestamp tokens, but the generation_config.json of this model sets "
                    "return_timestamps to false; pass return_timestamps=True, or chunk_length_s=30")
            frames = LogMelFrames(f, wave)  # each 30 s window featurized as it is decoded
            yield Clip(frames, frames.total, frames.total), None
        else:
            # the frames of word timestamps: the pipeline's attention mask (its num_frames is not passed on)
            yield Clip(_window_frames(f, wave), self.segment_frames,
                       int(f.frame_mask(min(len(wave), f.n_samples), f.n_samples).sum())), None

    def word_timestamps(self, attentions: np.ndarray, num_frames: int | None, num_input_ids: int) -> list[float]:
        """One row's token start times from its alignment heads' cross attentions (``whisper_words``)."""
        if num_frames is not None:
            # transformers crops the frames twice (the batch by its one value, then each row): the same unless
            # the pass starts past the audio's end (a negative count), where the second cut takes more
            attentions = attentions[..., : num_frames // 2]
        times = token_timestamps_from_weights(attentions[None], num_input_ids=num_input_ids, num_frames=num_frames,
                                              median_filter_width=self.median_filter_width,
                                              time_precision=self.time_precision)
        return [float(t) for t in times[0]]


def _joined(chunks: TextChunks) -> Iterator[str]:
    """The stream's pieces; once they end (or the consumer leaves), the decoding thread is waited for, so
    that no thread holding MLX state outlives the stream (MLX aborts a process exiting with one)."""
    try:
        yield from chunks
    finally:
        chunks.close()
        chunks.join()


class _Merge:
    """The windows' text tokens merged as they come, as transformers' ``_find_longest_common_sequence`` merges
    them: once window k + 1 is merged, the tokens before its overlap with window k are final (a later window
    only moves the cut in the last window), so a stream can send their text. Exact for windows of plain text
    tokens; a window with a special or timestamp token (a segment or language split) turns it off."""

    def __init__(self, tokenizer: Any, settings: WhisperSettings) -> None:
        self.tokenizer = tokenizer
        self.special = set(tokenizer.all_special_ids) | set(settings.lang_to_id.values()) | set(
            settings.task_to_id.values()) | {settings.decoder_start_token_id, settings.eos_token_id}
        nts = settings.no_timestamps_token_id
        self.begin = nts + 1 if nts is not None else None
        if nts is not None:
            self.special.add(nts)
        self.committed: list[int] = []
        self.left: list[int] | None = None
        self.exact = True

    def add(self, tokens: list[int]) -> None:
        if any(t in self.special or (self.begin is not None and t >= self.begin) for t in tokens):
            self.exact = False
        if not self.exact:
            return
        if self.left is None:
            self.left = list(tokens)
            return
        left_mid, right_mid = _overlap(self.left, list(tokens))
        self.committed += self.left[:left_mid]
        self.left = list(tokens)[right_mid:]

    def committed_text(self) -> str:
        return self.tokenizer.decode(self.committed, skip_special_tokens=False)


def _overlap(left: list[int], right: list[int]) -> tuple[int, int]:
    """Where ``longest_common_sequence`` cuts two windows' tokens: (left kept up to, right kept from)."""
    best, indices = 0.0, (len(left), len(left), 0, 0)
    for i in range(1, len(left) + len(right)):
        left_start, left_stop = max(0, len(left) - i), min(len(left), len(left) + len(right) - i)
        right_start, right_stop = max(0, i - len(left)), min(len(right), i)
        matches = sum(1 for a, b in zip(left[left_start:left_stop], right[right_start:right_stop]) if a == b)
        matching = matches / i + i / 10000.0
        if matches > 1 and matching > best:
            best, indices = matching, (left_start, left_stop, right_start, right_stop)
    return (indices[0] + indices[1]) // 2, (indices[2] + indices[3]) // 2


def _gather(blocks: Iterable[np.ndarray], where: str) -> np.ndarray:
    """A stream's blocks as one waveform (long-form and short inputs need the whole recording)."""
    parts = list(blocks)
    if not parts:
        raise ValueError(f"{where}: the stream gave no audio")
    return np.concatenate(parts).astype(np.float32, copy=False)


def pipeline_defaults(config: GenerationConfig) -> GenerationConfig:
    """The generation settings of transformers' speech recognition pipeline: its defaults (5 beams, as OpenAI's
    Whisper, and 256 new tokens) where generation_config.json keeps the global default; the 256 tokens are
    dropped when the file sets its own ``max_length`` (Whisper's 448)."""
    default = GenerationConfig()
    beams = 5 if config.num_beams == default.num_beams else config.num_beams
    new = 256 if config.max_new_tokens is None else config.max_new_tokens
    if new == 256 and config.max_length is not None and config.max_length != 20:
        new = None
    return config.update(num_beams=beams, max_new_tokens=new)


def _window_frames(featurizer: Any, part: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """The frames of a window of at most 30 s, featurized when asked (so a long input's windows are not all
    held as features at once)."""
    def frames(start: int, count: int) -> np.ndarray:
        return featurizer.features(part)["input_features"][:, start:start + count]
    return frames


def windows_of(blocks: Iterable[np.ndarray], sampling_rate: int, chunk_length_s: float, stride_length_s: Any,
               where: str) -> Iterator[tuple[np.ndarray, int, int]]:
    """``(samples, left stride, right stride)`` of each window of the audio that ``blocks`` give in turn (one
    array, or a stream's blocks: a window is cut once the samples past it arrived, or the stream ended), as
    transformers' ``chunk_iter`` cuts the whole array (``stride_length_s``: seconds each side, a number or
    ``(left, right)``; default a sixth of the window). Only the samples from the current window on are kept."""
    if stride_length_s is None:
        stride_length_s = chunk_length_s / 6
    if isinstance(stride_length_s, int | float):
        stride_length_s = [stride_length_s, stride_length_s]
    chunk = int(round(chunk_length_s * sampling_rate))
    left = int(round(stride_length_s[0] * sampling_rate))
    right = int(round(stride_length_s[1] * sampling_rate))
    if chunk <= left + right:
        raise ValueError(f"{where}: chunk_length_s ({chunk_length_s}) must be more than the two strides "
                         f"(stride_length_s {list(stride_length_s)})")
    step = chunk - left - right
    pending, buffer, offset, ended, start = iter(blocks), np.zeros(0, np.float32), 0, False, 0
    while True:
        while not ended and offset + len(buffer) <= start + chunk:  # one sample past the window: not the last
            block = next(pending, None)
            if block is None:
                ended = True
            else:
                buffer = block if not len(buffer) else np.concatenate([buffer, block])
        total = offset + len(buffer)
        if start >= total:
            return
        stop = start + chunk
        is_last = ended and stop >= total
        part = buffer[start - offset:stop - offset]
        this_left, this_right = (0 if start == 0 else left), (0 if is_last else right)
        if len(part) > this_left:
            yield part, this_left, this_right
        if is_last:
            return
        start += step
        buffer, offset = buffer[start - offset:], start
