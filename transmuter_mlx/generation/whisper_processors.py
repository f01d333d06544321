"""Whisper's logits processors, each the rule of its transformers 4.57 class.

>>> import numpy as np
>>> from transmuter_mlx.converters.backends import get_backend
>>> from transmuter_mlx.generation.processors import Rows
>>> B = get_backend("numpy")
>>> rows = Rows(tokens=[[5, 6]], prompt_lengths=[2], max_lengths=[10], min_lengths=[0])
>>> SuppressTokens((1,))(B, np.zeros((1, 4), np.float32), rows).tolist()
[[0.0, -inf, 0.0, 0.0]]
>>> SuppressTokensAtBegin((0,))(B, np.zeros((1, 4), np.float32), rows).tolist()
[[-inf, 0.0, 0.0, 0.0]]

A row's ``begin index`` is its prompt length (``rows.prompt_lengths``): the index of its first new token,
as transformers' ``set_begin_index(decoder_input_ids.shape[-1])``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .processors import NEG_INF, Processor, Rows, _fill, _fill_rows

__all__ = ["SuppressTokens", "SuppressTokensAtBegin", "WhisperTimestamps", "whisper_processors"]


@dataclass(frozen=True)
class SuppressTokens:
    """``SuppressTokensLogitsProcessor``: ``suppress_tokens`` get -inf at every step."""

    suppress_tokens: tuple[int, ...]

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        vocab = B.shape(scores)[-1]
        return _fill_rows(B, scores, range(B.shape(scores)[0]), [t for t in self.suppress_tokens if 0 <= t < vocab])


@dataclass(frozen=True)
class SuppressTokensAtBegin:
    """``SuppressTokensAtBeginLogitsProcessor``: ``begin_suppress_tokens`` get -inf at a row's first new token."""

    begin_suppress_tokens: tuple[int, ...]

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        first = [r for r, t in enumerate(rows.tokens) if len(t) == rows.prompt_lengths[r]]
        vocab = B.shape(scores)[-1]
        return _fill_rows(B, scores, first, [t for t in self.begin_suppress_tokens if 0 <= t < vocab])


@dataclass(frozen=True)
class WhisperTimestamps:
    """``WhisperTimeStampLogitsProcessor``: timestamps come in pairs (a text token after a pair, a timestamp
    or eos after a single one), never go back, the first new token is a timestamp no later than
    ``max_initial_timestamp_index``, and text is banned where the timestamps together are likelier than
    the likeliest text token."""

    no_timestamps_token_id: int
    eos_token_id: int
    max_initial_timestamp_index: int | None = None
    detect_timestamp_from_logprob: bool = True

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps_token_id + 1

    def mask(self, shape: tuple[int, ...], rows: Rows) -> np.ndarray:
        """The cells the token rules ban (host side, from each row's tokens)."""
        begin, mask = self.timestamp_begin, np.zeros(shape, bool)
        mask[:, self.no_timestamps_token_id] = True
        for k, tokens in enumerate(rows.tokens):
            seq = list(tokens[rows.prompt_lengths[k]:])
            last = len(seq) >= 1 and seq[-1] >= begin
            penultimate = len(seq) < 2 or seq[-2] >= begin
            if last:
                if penultimate:  # a pair just closed: text (or eos) next
                    mask[k, begin:] = True
                else:  # a single timestamp: another timestamp or eos next
                    mask[k, :self.eos_token_id] = True
            stamps = [t for t in seq if t >= begin]
            if stamps:
                # timestamps never decrease; after a pair they must increase
                last_allowed = stamps[-1] if last and not penultimate else stamps[-1] + 1
                mask[k, begin:last_allowed] = True
            if not seq:  # the first new token is a timestamp, within max_initial_timestamp_index
                mask[k, :begin] = True
                if self.max_initial_timestamp_index is not None:
                    mask[k, begin + self.max_initial_timestamp_index + 1:] = True
        return mask

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        shape = tuple(B.shape(scores))
        scores = _fill(B, scores, self.mask(shape, rows))
        if not self.detect_timestamp_from_logprob:
            return scores
        begin, n = self.timestamp_begin, shape[0]
        shifted = B.subtract(scores, B.max(scores, -1, True))
        logprobs = B.subtract(shifted, B.log(B.sum(B.exp(shifted), -1, True)))
        stamps = B.slice(logprobs, [0, begin], [n, shape[1]], [1, 1])
        text = B.slice(logprobs, [0, 0], [n, begin], [1, 1])
        stamp_mass = B.logsumexp(stamps, -1, True)
        prefer = B.greater(stamp_mass, B.max(text, -1, True))  # (rows, 1)
        is_text = B.asarray(np.arange(shape[1])[None, :] < begin)
        return B.where(B.logical_and(prefer, is_text), B.full((), NEG_INF, np.float32), scores)


def whisper_processors(settings: Any, return_timestamps: bool) -> list[Processor]:
    """The processors ``WhisperGenerationMixin.generate`` puts before those of the GenerationConfig, in its
    order: begin-suppress, suppress, timestamps (``_retrieve_logit_processors``). ``settings`` is a
    :class:`~transmuter_mlx.generation.whisper_prompt.WhisperSettings`."""
    out: list[Processor] = []
    if settings.begin_suppress_tokens:
        out.append(SuppressTokensAtBegin(tuple(settings.begin_suppress_tokens)))
    if settings.suppress_tokens:
        out.append(SuppressTokens(tuple(settings.suppress_tokens)))
    if return_timestamps:
        out.append(WhisperTimestamps(settings.no_timestamps_token_id, settings.eos_token_id,
                                     settings.max_initial_timestamp_index))
    return out

