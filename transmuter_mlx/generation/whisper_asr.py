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

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..processors.audio import AudioProcessor
from ..tokenizer import Tokenizer
from .config import GenerationConfig
from .whisper_decode import Clip, Decoded, decode_clips
from .whisper_prompt import WhisperSettings
from .whisper_session import WhisperSession
from .whisper_text import decode_asr

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

    def run(self, waves: list[np.ndarray], options: Mapping[str, Any],
            on_window: Callable[[int, list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
        """``recognize``; ``on_window(i, windows)`` is called with input i's finished windows after each pass."""
        stamps = self.return_timestamps(options)
        config = self.config(options)
        language, task = options.get("language"), options.get("task")
        self.settings.check(language, task, stamps, self.where)
        words = stamps == "word"
        if words and not self.session.has_cross_attentions:
            raise ValueError(f"{self.where}: return_timestamps='word' needs a decoder exported with its cross "
                             "attentions (cross_attentions.N outputs), which this ONNX export does not have")
        clips, owners, strides = [], [], []
        for i, wave in enumerate(waves):
            for clip, stride in self.clips(wave, options, i):
                clips.append(clip)
                owners.append(i)
                strides.append(stride)
        decoded = decode_clips(
            self.session, clips, self.settings, config, language=language, task=task,
            return_timestamps=bool(stamps), word_timestamps=self.word_timestamps if words else None,
            batch_size=self.batch_size, max_target_positions=self.max_target, segment_frames=self.segment_frames)
        results = []
        for i in range(len(waves)):
            windows = [self.window(d, s, words) for d, s, o in zip(decoded, strides, owners) if o == i]
            results.append(self.text(windows, stamps))
        return results

    def text(self, windows: list[dict[str, Any]], stamps: bool | str) -> dict[str, Any]:
        """The pipeline's result from an input's windows (``_decode_asr``)."""
        out = decode_asr(self.tokenizer, windows, return_timestamps=stamps, time_precision=self.time_precision)
        result = {"text": out["text"]}
        if "chunks" in out:
            result["chunks"] = [{"text": c["text"], "timestamp": tuple(c["timestamp"])} for c in out["chunks"]]
        return result

    def window(self, decoded: Decoded, stride: tuple[float, float, float] | None, words: bool) -> dict[str, Any]:
        window: dict[str, Any] = {"tokens": np.asarray(decoded.tokens, np.int64)}
        if stride is not None:
            window["stride"] = stride
        if words:
            window["token_timestamps"] = np.asarray(decoded.token_timestamps, np.float32)
        return window

    # ------------------------------------------------------------------ windows
    def clips(self, wave: np.ndarray, options: Mapping[str, Any], index: int
              ) -> Iterator[tuple[Clip, tuple[float, float, float] | None]]:
        """The clips of one input and their strides in seconds (chunked only), featurized when decoded."""
        f = self.featurizer
        chunk_s = options.get("chunk_length_s")
        if chunk_s:
            for start, stop, left, right in windows_of(len(wave), self.sampling_rate, chunk_s,
                                                        options.get("stride_length_s"), self.where):
                part = wave[start:stop]
                n = len(part)
                yield (Clip(_window_frames(f, part), self.segment_frames,
                            int(f.frame_mask(min(n, f.n_samples), f.n_samples).sum())),
                       (n / self.sampling_rate, left / self.sampling_rate, right / self.sampling_rate))
        elif len(wave) > f.n_samples:
            long = f.long_features(wave)
            feats = long["input_features"]
            yield Clip(lambda s, n: feats[:, s:s + n], feats.shape[-1], int(long["attention_mask"].sum())), None
        else:
            yield Clip(_window_frames(f, wave), self.segment_frames, f.num_frames(len(wave))), None

    def word_timestamps(self, attentions: np.ndarray, num_frames: int | None, num_input_ids: int) -> list[float]:
        """One row's token start times from its alignment heads' cross attentions (``whisper_words``)."""
        from .whisper_words import token_timestamps

        return token_timestamps(attentions, num_frames=num_frames, num_input_ids=num_input_ids,
                                median_filter_width=self.median_filter_width, time_precision=self.time_precision)


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


def windows_of(samples: int, sampling_rate: int, chunk_length_s: float, stride_length_s: Any, where: str
               ) -> Iterator[tuple[int, int, int, int]]:
    """``(start, stop, left stride, right stride)`` in samples of each window, as transformers' ``chunk_iter``
    (``stride_length_s``: seconds each side, a number or ``(left, right)``; default a sixth of the window)."""
    if stride_length_s is None:
        stride_length_s = chunk_length_s / 6
    if isinstance(stride_length_s, int | float):
        stride_length_s = [stride_length_s, stride_length_s]
    chunk = int(round(chunk_length_s * sampling_rate))
    left = int(round(stride_length_s[0] * sampling_rate))
    right = int(round(stride_length_s[1] * sampling_rate))
    if chunk < left + right:
        raise ValueError(f"{where}: chunk_length_s ({chunk_length_s}) must be more than the two strides "
                         f"(stride_length_s {list(stride_length_s)})")
    step = chunk - left - right
    if step <= 0:
        raise ValueError(f"{where}: chunk_length_s ({chunk_length_s}) must be more than the two strides")
    for start in range(0, samples, step):
        stop = start + chunk
        is_last = stop >= samples
        this_left = 0 if start == 0 else left
        this_right = 0 if is_last else right
        if min(stop, samples) - start > this_left:
            yield start, min(stop, samples), this_left, this_right
        if is_last:
            break
