"""Whisper's decoding of log-mel windows: ``WhisperGenerationMixin.generate`` of transformers 4.57 (its
default path: greedy or beam search, no temperature fallback, no conditioning on previous segments).

Every input is a run of log-mel frames (``Clip``: at most 3000 frames for a 30 s window, or a whole long
recording) and goes through the same seek loop as transformers': the 3000 frames from ``seek`` (zero
padded) are encoded, the decoder runs from the prompt (``WhisperSettings.init_tokens``) with Whisper's
logits processors, and the generated tokens are cut into segments at their timestamp pairs
(``_retrieve_segment``); ``seek`` moves to the last complete segment's end, or past the window. A window of
30 s or less usually takes one pass; a longer recording is transcribed segment after segment (transformers'
"sequential long-form"). The language is detected once per input, from the first step's logits over the
language tokens on its first window (``detect_language``).

Rows of different inputs run together (``batch_size`` rows per decoding loop, a partial batch filled with
copies of its first row so that the loops keep the compiled shapes); each row's tokens are those it gets alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import GenerationConfig
from .loop import generate
from .whisper_processors import whisper_processors
from .whisper_prompt import WhisperSettings

__all__ = ["Clip", "Decoded", "decode_clips"]

INPUT_STRIDE = 2  # the encoder's two convolutions: log-mel frames per encoder position
TIME_PRECISION = 0.02  # seconds per timestamp token


@dataclass
class Clip:
    """One input's frames: ``frames(start, count)`` gives (bins, count) log-mel frames from ``start`` (a
    whole recording's features, or a window featurized on demand); ``total`` frames in all; ``num_frames``
    (the frames of real audio, for word timestamps; None: not known, as transformers without a mask)."""

    frames: Callable[[int, int], np.ndarray]
    total: int
    num_frames: int | None = None


@dataclass
class Decoded:
    """An input's generated tokens (every segment's, in order, timestamps included, prompt and eos left
    out, as transformers' ``generate`` returns them to the pipeline), their start times in seconds (word
    timestamps: one per token) and the language token the prompt used (None: none)."""

    tokens: list[int] = field(default_factory=list)
    token_timestamps: list[float] | None = None
    language_id: int | None = None


@dataclass
class _Row:
    clip: Clip
    seek: int = 0
    prompt: list[int] = field(default_factory=list)
    out: Decoded = field(default_factory=Decoded)


def decode_clips(
    session: Any,
    clips: Sequence[Clip],
    settings: WhisperSettings,
    config: GenerationConfig,
    *,
    language: str | None,
    task: str | None,
    return_timestamps: bool,
    word_timestamps: Any = None,
    batch_size: int = 1,
    max_target_positions: int,
    segment_frames: int = 3000,
    on_pass: Callable[[list[Decoded]], None] | None = None,
) -> list[Decoded]:
    """Decode ``clips`` (see the module docstring). ``session`` is a :class:`WhisperSession`;
    ``word_timestamps(attentions, num_frames, num_input_ids) -> list[float]`` (set for word timestamps)
    turns one row's collected cross attentions into a start time per token (prompt included);
    ``on_pass(decoded)`` is called with every input's tokens so far after each pass (streaming)."""
    long_form = any(c.total > segment_frames for c in clips)
    timestamps = bool(return_timestamps) or long_form  # long-form generation always predicts timestamps
    processors = whisper_processors(settings, timestamps)
    rows = [_Row(c) for c in clips]
    if word_timestamps is not None and not settings.alignment_heads:
        raise ValueError("word timestamps need alignment_heads in generation_config.json")
    for r in rows:
        r.out.token_timestamps = [] if word_timestamps is not None else None
    first = True
    while True:
        active = [r for r in rows if r.seek < r.clip.total]
        if not active:
            break
        for start in range(0, len(active), batch_size):
            group = active[start:start + batch_size]
            _pass(session, group, settings, config, processors, language, task, timestamps, word_timestamps,
                  batch_size, max_target_positions, segment_frames, detect=first)
            if on_pass is not None:
                on_pass([r.out for r in rows])
        first = False
    return [r.out for r in rows]


def _pass(session: Any, group: list[_Row], settings: WhisperSettings, config: GenerationConfig,
          processors: list[Any], language: str | None, task: str | None, timestamps: bool,
          word_timestamps: Any, batch_size: int, max_target: int, segment_frames: int, detect: bool) -> None:
    """One window of every row of ``group``: encode, (detect the language,) generate, cut into segments."""
    counts = [min(r.clip.total - r.seek, segment_frames) for r in group]
    segments = []
    for r, n in zip(group, counts):
        window = np.asarray(r.clip.frames(r.seek, n), np.float32)
        if window.shape[-1] < segment_frames:  # transformers pads the window's frames with zeros
            window = np.pad(window, ((0, 0), (0, segment_frames - window.shape[-1])))
        segments.append(window)
    filled = segments + [segments[0]] * (batch_size - len(segments))  # copies keep the compiled batch shape
    session.encode({"input_features": np.stack(filled)})
    if detect and not group[0].prompt:
        detected: list[int | None] = [None] * len(group)
        if settings.needs_detection(language, task):
            logits = session.prefill([[settings.decoder_start_token_id]] * len(filled))
            scores = np.asarray(session.B.to_numpy(logits), np.float32)[:len(group)]
            ids = np.array(sorted(settings.lang_to_id.values()))
            detected = [int(ids[np.argmax(s[ids])]) for s in scores]  # argmax over the language tokens only
        for r, d in zip(group, detected):
            r.prompt = settings.init_tokens(language, task, timestamps, d)
            r.out.language_id = r.prompt[1] if len(r.prompt) > 1 and r.prompt[1] in settings.lang_to_id.values() \
                else None
    prompts = [r.prompt for r in group]
    prompts += [prompts[0]] * (len(filled) - len(group))
    n = len(prompts[0])
    if config.max_new_tokens is not None and config.max_new_tokens + n > max_target:
        raise ValueError(
            f"max_new_tokens={config.max_new_tokens} after the {n} prompt tokens is more than the "
            f"max_target_positions ({max_target}) of the model: pass max_new_tokens={max_target - n} or less")
    out = generate(session, prompts, config, processors=processors, max_length_cap=max_target)
    eos = settings.eos_token_id
    begin = (settings.no_timestamps_token_id + 1) if settings.no_timestamps_token_id is not None else None
    for i, (r, frames) in enumerate(zip(group, counts)):
        new = list(out.sequences[i])
        times = None
        if word_timestamps is not None:
            num_frames = None if r.clip.num_frames is None else r.clip.num_frames - r.seek
            times = list(word_timestamps(_attentions(session, i, r.prompt + new[:-1], settings), num_frames, n))
        if new and new[-1] == eos:
            new = new[:-1]
        kept, kept_times, offset = _segments(new, times, n, begin, frames, r.seek)
        r.out.tokens += kept
        if r.out.token_timestamps is not None and kept_times is not None:
            r.out.token_timestamps += kept_times
        r.seek += offset


def _attentions(session: Any, row: int, tokens: list[int], settings: WhisperSettings) -> np.ndarray:
    """The alignment heads' cross attentions (heads, positions, encoder positions) of one row's decoder
    inputs (its prompt and new tokens but the last: the positions whose outputs picked a token), from one
    teacher-forced pass over them on the row's encoder output (still the session's: the pass's batch);
    transformers keeps them step by step from the search, for the beams the result came from, which gives
    the same weights."""
    hidden, mask, padding = session.hidden, session.mask, session.input_padding
    B = session.B
    session.hidden = B.take(hidden, B.asarray(np.array([row], np.int64)), 0)
    session.mask, session.input_padding = mask[row:row + 1], padding[row:row + 1]
    session.collect(settings.alignment_heads)
    try:
        session.prefill([tokens])
        return session.attentions()[0]
    finally:
        session.collect(())
        session.hidden, session.mask, session.input_padding = hidden, mask, padding


def _segments(tokens: list[int], times: list[float] | None, prompt_length: int, begin: int | None,
              frames: int, seek: int) -> tuple[list[int], list[float] | None, int]:
    """``_retrieve_segment``: the tokens kept from one pass (its complete segments), their times (shifted by
    the window's start) and how many frames the seek moves on."""
    offset_s = seek * TIME_PRECISION / INPUT_STRIDE
    stamp = [begin is not None and t >= begin for t in tokens]
    pairs = [i + 1 for i in range(len(tokens) - 1) if stamp[i] and stamp[i + 1]]
    single_ending = stamp[-2:] == [False, True]
    if pairs:
        slices = list(pairs)
        if single_ending:
            slices.append(len(tokens))
        else:
            slices[-1] += 1
        end = slices[-1]
        if single_ending:
            moved = frames
        else:
            moved = (tokens[end - 2] - begin) * INPUT_STRIDE
    else:
        end, moved = len(tokens), frames
    kept_times = None
    if times is not None:
        # float32 as transformers (its float64 offset meets a float32 tensor: the tensor's dtype wins)
        shifted = np.asarray(times[prompt_length:prompt_length + end], np.float32) + np.float32(offset_s)
        kept_times = [float(t) for t in shifted]
    return tokens[:end], kept_times, moved
