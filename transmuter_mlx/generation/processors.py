"""Logits processors and sampling warpers, each the rule of its transformers 4.57 class.

>>> import numpy as np
>>> from transmuter_mlx.converters.backends import get_backend
>>> from transmuter_mlx.generation.processors import Rows, RepetitionPenalty, TopK
>>> B = get_backend("numpy")
>>> scores = np.array([[1.0, -2.0, 3.0, 0.5]], np.float32)
>>> rows = Rows(tokens=[[0, 1]], prompt_lengths=[2], max_lengths=[10], min_lengths=[0])
>>> RepetitionPenalty(2.0)(B, scores, rows).tolist()
[[0.5, -4.0, 3.0, 0.5]]
>>> TopK(2)(B, scores, rows).tolist()
[[1.0, -inf, 3.0, -inf]]

A processor is called as ``processor(B, scores, rows)``: ``scores`` is a (rows, vocab) float32 array
of the backend ``B``, ``rows`` tells what each row has seen. Each row counts its own tokens, without
the padding of a batch: the result of a row is the result transformers gives for that row alone.
Masks that depend on the tokens are built on the host and applied with backend ops.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = [
    "ForcedBOS", "ForcedEOS", "LogitNormalization", "MinLength", "MinNewTokens", "MinP", "NoBadWords",
    "NoRepeatNGram", "Processor",
    "RepetitionPenalty", "Rows", "Temperature", "TopK", "TopP", "apply", "build_processors",
]  # fmt: skip

NEG_INF = float("-inf")


@dataclass
class Rows:
    """What the rows have seen: ``tokens[r]`` is row r's prompt (decoder input) and new tokens, without
    padding; ``prompt_lengths[r]`` its prompt length; ``max_lengths``/``min_lengths`` its length bounds
    (``GenerationConfig.lengths``)."""

    tokens: Sequence[Sequence[int]]
    prompt_lengths: Sequence[int]
    max_lengths: Sequence[int]
    min_lengths: Sequence[int]


class Processor(Protocol):
    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any: ...


def _fill(B: Any, scores: Any, mask: np.ndarray, value: float = NEG_INF) -> Any:
    """``scores`` with ``value`` where the host bool ``mask`` (rows, vocab) is set."""
    if not mask.any():
        return scores
    return B.where(B.asarray(mask), B.full((), value, np.float32), scores)


def _fill_rows(B: Any, scores: Any, rows: Sequence[int], columns: Sequence[int], value: float = NEG_INF) -> Any:
    """``scores`` with ``value`` at ``columns`` of ``rows``; the device mask is made once per rows and
    columns (a processor such as min_new_tokens masks the same cells at every step)."""
    if not len(rows) or not len(columns):
        return scores
    mask = _device_mask(B, tuple(B.shape(scores)), tuple(rows), tuple(columns))
    return B.where(mask, B.full((), value, np.float32), scores)


@functools.lru_cache(maxsize=32)
def _device_mask(B: Any, shape: tuple[int, ...], rows: tuple[int, ...], columns: tuple[int, ...]) -> Any:
    return B.asarray(_row_mask(shape, rows, columns))


def _row_mask(shape: tuple[int, ...], rows: Sequence[int], columns: Sequence[int]) -> np.ndarray:
    mask = np.zeros(shape, bool)
    if len(rows) and len(columns):
        mask[np.ix_(np.asarray(rows), np.asarray(columns))] = True
    return mask


@dataclass(frozen=True)
class RepetitionPenalty:
    """``RepetitionPenaltyLogitsProcessor``: the score of a token the row has seen (prompt included) is
    multiplied by ``penalty`` when negative, divided by it otherwise."""

    penalty: float

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        mask = np.zeros(B.shape(scores), bool)
        for r, tokens in enumerate(rows.tokens):
            mask[r, np.asarray(tokens, np.int64)] = True
        negative = B.less(scores, B.zeros((), np.float32))
        penalised = B.where(negative, B.multiply(scores, self.penalty), B.divide(scores, self.penalty))
        return B.where(B.asarray(mask), penalised, scores)


@dataclass(frozen=True)
class NoRepeatNGram:
    """``NoRepeatNGramLogitsProcessor``: a token that would repeat an n-gram of the row (prompt
    included) gets -inf."""

    ngram_size: int

    def banned(self, tokens: Sequence[int]) -> list[int]:
        """The tokens banned after ``tokens`` (fairseq's rule, as ``_calc_banned_ngram_tokens``)."""
        n, tokens = self.ngram_size, list(tokens)
        if len(tokens) + 1 < n:
            return []
        prefix = tuple(tokens[len(tokens) + 1 - n:])
        return [ngram[-1] for ngram in zip(*[tokens[i:] for i in range(n)]) if tuple(ngram[:-1]) == prefix]

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        mask = np.zeros(B.shape(scores), bool)
        for r, tokens in enumerate(rows.tokens):
            mask[r, self.banned(tokens)] = True
        return _fill(B, scores, mask)


@dataclass(frozen=True)
class NoBadWords:
    """``NoBadWordsLogitsProcessor``: the last token of a bad sequence gets -inf when the row ends with
    the rest of it (a one-token sequence always); sequences that are a single eos token are kept out."""

    bad_words_ids: tuple[tuple[int, ...], ...]

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        mask = np.zeros(B.shape(scores), bool)
        for r, tokens in enumerate(rows.tokens):
            for word in self.bad_words_ids:
                head = list(word[:-1])
                if not head or (len(tokens) >= len(head) and list(tokens[len(tokens) - len(head):]) == head):
                    mask[r, word[-1]] = True
        return _fill(B, scores, mask)


@dataclass(frozen=True)
class LogitNormalization:
    """``LogitNormalization`` (``renormalize_logits``): a log-softmax after all other processors."""

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        shifted = B.subtract(scores, B.max(scores, -1, True))
        return B.subtract(shifted, B.log(B.sum(B.exp(shifted), -1, True)))


@dataclass(frozen=True)
class MinLength:
    """``MinLengthLogitsProcessor``: eos gets -inf while the row (prompt included) is shorter than its
    ``rows.min_lengths``."""

    eos_token_id: Sequence[int]

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        short = [r for r, t in enumerate(rows.tokens) if len(t) < rows.min_lengths[r]]
        return _fill_rows(B, scores, short, self.eos_token_id)


@dataclass(frozen=True)
class MinNewTokens:
    """``MinNewTokensLengthLogitsProcessor``: eos gets -inf while the row has fewer than
    ``min_new_tokens`` new tokens."""

    min_new_tokens: int
    eos_token_id: Sequence[int]

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        short = [r for r, t in enumerate(rows.tokens) if len(t) - rows.prompt_lengths[r] < self.min_new_tokens]
        return _fill_rows(B, scores, short, self.eos_token_id)


def _force(B: Any, scores: Any, rows: Sequence[int], token_ids: Sequence[int]) -> Any:
    """Rows ``rows`` become -inf except ``token_ids``, which become 0."""
    if not len(rows):
        return scores
    scores = _fill_rows(B, scores, rows, range(B.shape(scores)[-1]))
    return _fill_rows(B, scores, rows, token_ids, 0.0)


@dataclass(frozen=True)
class ForcedBOS:
    """``ForcedBOSTokenLogitsProcessor``: a row of length 1 (its decoder start) must pick ``bos_token_id``."""

    bos_token_id: int

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        return _force(B, scores, [r for r, t in enumerate(rows.tokens) if len(t) == 1], [self.bos_token_id])


@dataclass(frozen=True)
class ForcedEOS:
    """``ForcedEOSTokenLogitsProcessor``: a row one token short of its max length must pick eos."""

    eos_token_id: Sequence[int]

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        last = [r for r, t in enumerate(rows.tokens) if len(t) == rows.max_lengths[r] - 1]
        return _force(B, scores, last, self.eos_token_id)


@dataclass(frozen=True)
class Temperature:
    """``TemperatureLogitsWarper``: ``scores / temperature``."""

    temperature: float

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        return B.divide(scores, self.temperature)


@dataclass(frozen=True)
class TopK:
    """``TopKLogitsWarper``: scores below the k-th largest of the row get -inf."""

    top_k: int
    min_tokens_to_keep: int = 1

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        vocab = B.shape(scores)[-1]
        k = min(max(self.top_k, self.min_tokens_to_keep), vocab)
        order = B.argsort(scores, -1)
        kth = B.take_along_axis(scores, B.slice(order, [0, vocab - k], [B.shape(scores)[0], vocab - k + 1], [1, 1]), -1)
        return B.where(B.less(scores, kth), B.full(B.shape(scores), NEG_INF, np.float32), scores)


@dataclass(frozen=True)
class TopP:
    """``TopPLogitsWarper``: keep the smallest set of most likely tokens whose probabilities add up to
    more than ``top_p`` (and at least ``min_tokens_to_keep``)."""

    top_p: float
    min_tokens_to_keep: int = 1

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        vocab = B.shape(scores)[-1]
        order = B.argsort(scores, -1)  # ascending, as torch.sort(descending=False)
        cumulative = B.cumsum(B.softmax(B.take_along_axis(scores, order, -1), -1), -1)
        rank = B.argsort(order, -1)  # each token's position in the ascending order
        remove = B.logical_and(
            B.less_equal(B.take_along_axis(cumulative, rank, -1), 1 - self.top_p),
            B.less(rank, vocab - self.min_tokens_to_keep))
        return B.where(remove, B.full(B.shape(scores), NEG_INF, np.float32), scores)


@dataclass(frozen=True)
class MinP:
    """``MinPLogitsWarper``: tokens less likely than ``min_p`` times the top probability get -inf."""

    min_p: float
    min_tokens_to_keep: int = 1

    def __call__(self, B: Any, scores: Any, rows: Rows) -> Any:
        probs = B.softmax(scores, -1)
        remove = B.less(probs, B.multiply(B.max(probs, -1, True), self.min_p))
        rank = B.argsort(B.argsort(B.negative(scores), -1), -1)  # position in the descending order
        remove = B.logical_and(remove, B.greater_equal(rank, self.min_tokens_to_keep))
        return B.where(remove, B.full(B.shape(scores), NEG_INF, np.float32), scores)


def build_processors(config: Any) -> list[Processor]:
    """The processors of ``config`` (a ``GenerationConfig``) in the order of transformers'
    ``_get_logits_processor``; with ``do_sample``, the warpers follow (temperature, top-k, top-p, min-p).

    >>> from transmuter_mlx.generation.config import GenerationConfig
    >>> build_processors(GenerationConfig(do_sample=True, top_k=5, temperature=0.7))
    [Temperature(temperature=0.7), TopK(top_k=5, min_tokens_to_keep=1)]
    """
    eos = config.eos_ids
    out: list[Processor] = []
    if config.repetition_penalty is not None and config.repetition_penalty != 1.0:
        out.append(RepetitionPenalty(float(config.repetition_penalty)))
    if config.no_repeat_ngram_size:
        out.append(NoRepeatNGram(int(config.no_repeat_ngram_size)))
    bad = tuple(tuple(int(t) for t in w) for w in getattr(config, "bad_words_ids", None) or () if list(w) not in
                [[e] for e in eos])
    if bad:
        out.append(NoBadWords(bad))
    if eos and (config.min_length > 0 or (config.min_new_tokens or 0) > 0):
        out.append(MinLength(eos))  # min_new_tokens also sets min_length (``_prepare_generated_length``)
    if eos and (config.min_new_tokens or 0) > 0:
        out.append(MinNewTokens(int(config.min_new_tokens), eos))
    if config.forced_bos_token_id is not None:
        out.append(ForcedBOS(int(config.forced_bos_token_id)))
    if config.forced_eos_ids:
        out.append(ForcedEOS(config.forced_eos_ids))
    if config.do_sample:
        keep = len(eos) + 1 if config.num_beams > 1 else 1
        if config.temperature is not None and config.temperature != 1.0:
            out.append(Temperature(float(config.temperature)))
        if config.top_k is not None and config.top_k != 0:
            out.append(TopK(int(config.top_k), keep))
        if config.top_p is not None and config.top_p < 1.0:
            out.append(TopP(float(config.top_p), keep))
        if config.min_p is not None:
            out.append(MinP(float(config.min_p), keep))
    if getattr(config, "renormalize_logits", False):
        out.append(LogitNormalization())
    return out


def apply(processors: Sequence[Processor], B: Any, scores: Any, rows: Rows) -> Any:
    """``scores`` through each processor in turn."""
    for processor in processors:
        scores = processor(B, scores, rows)
    return scores
