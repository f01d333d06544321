"""GLiNER: an encoder reads a prompt of the labels and then the text's words in one sequence, and scores each
span of up to ``max_width`` words against each label (span models, ``span_mode`` "markerV0") or each word's
start, end and inside of each label (token models, ``span_mode`` "token_level"). Its settings are in
gliner_config.json (config.json says only ``{"model_type": "gliner"}``). The steps follow the ``gliner`` package:
the word splitter, the prompt, the word mask, the spans and the decoding.

>>> args = ModelArgs.from_dict({"span_mode": "token_level", "max_len": 384})
>>> args.token_level, args.max_width
(True, 12)
>>> split_words("Hi, New-York!")
[('Hi', 0, 2), (',', 2, 3), ('New-York', 4, 12), ('!', 12, 13)]
>>> prompt(["person", "city"], "<<ENT>>", "<<SEP>>")
['<<ENT>>', 'person', '<<ENT>>', 'city', '<<SEP>>']
>>> span_index(2, 2).tolist()
[[0, 0], [0, 1], [1, 1], [1, 2]]
>>> greedy([Span(0, 1, 0, 0.9), Span(1, 2, 1, 0.8), Span(3, 3, 0, 0.7)], flat_ner=True, multi_label=False)
[Span(start=0, end=1, label=0, score=0.9), Span(start=3, end=3, label=0, score=0.7)]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ._base import BaseArgs, score

__all__ = ["DEFAULT_VARIANT", "FILES", "TASKS", "ModelArgs", "Span", "decode_spans", "decode_tokens", "greedy",
           "prompt", "span_index", "split_words", "word_mask"]

FILES = {"model": ("model",)}
TASKS = frozenset({"zero-shot-entity-recognition"})
DEFAULT_VARIANT = None
CONFIG_FILE = "gliner_config.json"

WORD = re.compile(r"\w+(?:[-_]\w+)*|\S")  # the package's "whitespace" splitter


@dataclass
class ModelArgs(BaseArgs):
    """gliner_config.json's keys that inference reads (defaults: the package's)."""

    span_mode: str = "markerV0"
    max_width: int = 12
    max_len: int = 384
    ent_token: str = "[ENT]"
    sep_token: str = "[SEP]"
    words_splitter_type: str = "whitespace"
    subtoken_pooling: str = "first"

    def __post_init__(self) -> None:
        if self.words_splitter_type != "whitespace":
            raise ValueError(f"gliner: words_splitter_type {self.words_splitter_type!r} is not supported (it needs "
                             "a language toolkit); the 'whitespace' splitter is")
        if self.subtoken_pooling not in ("first", "last", "mean", "max"):
            raise ValueError(f"gliner: unknown subtoken_pooling {self.subtoken_pooling!r}")

    @property
    def token_level(self) -> bool:
        """Whether the model scores words (start, end, inside) rather than spans."""
        return self.span_mode == "token_level"


class Span(NamedTuple):
    start: int  # first word
    end: int  # last word (inclusive)
    label: int  # index into the labels
    score: float


def split_words(text: str) -> list[tuple[str, int, int]]:
    """The words of ``text`` with their character start and end."""
    return [(m.group(), m.start(), m.end()) for m in WORD.finditer(text)]


def prompt(labels: Sequence[str], ent_token: str, sep_token: str) -> list[str]:
    """The words before the text: each label after an entity token, then the separator."""
    words: list[str] = []
    for label in labels:
        words += [ent_token, label] if label else [ent_token]  # an empty label adds no word, as the package
    return [*words, sep_token]


def word_mask(word_ids: Sequence[int | None], prompt_words: int, pooling: str) -> list[int]:
    """Each token's word of the text (1-based), 0 for special tokens, the prompt and the subtokens the pooling
    skips: the package's ``prepare_word_mask``."""
    mask, seen, previous = [], 0, None
    for i, word in enumerate(word_ids):
        if word is None:
            mask.append(0)
        else:
            first = word != previous
            seen += first
            last = (word_ids[i + 1] if i + 1 < len(word_ids) else None) != word
            chosen = pooling in ("mean", "max") or (pooling == "first" and first) or (pooling == "last" and last)
            mask.append(seen - prompt_words if chosen and seen > prompt_words else 0)
        previous = word
    return mask


def span_index(num_words: int, max_width: int) -> np.ndarray:
    """Every (start, end) span of 1 to ``max_width`` words from each word, (num_words * max_width, 2) int64;
    spans past the text are in it (the span mask marks them)."""
    starts = np.repeat(np.arange(num_words), max_width)
    return np.stack([starts, starts + np.tile(np.arange(max_width), num_words)], 1).astype(np.int64)


def decode_spans(logits: np.ndarray, num_words: int, num_labels: int, threshold: float) -> list[Span]:
    """Span candidates of a span model's logits (words, max_width, labels) above ``threshold``, in the package's
    order (word, width, label)."""
    probs = score(logits[:num_words, :, :num_labels], "sigmoid")
    out = []
    for s, k, c in zip(*np.nonzero(probs > threshold)):
        if s + k + 1 <= num_words:
            out.append(Span(int(s), int(s + k), int(c), float(probs[s, k, c])))
    return out


def decode_tokens(logits: np.ndarray, num_words: int, num_labels: int, threshold: float) -> list[Span]:
    """Span candidates of a token model's logits (words, labels, [start, end, inside]): a start and a later end of
    one label, every word between inside, scored by the least of those scores, in the package's order."""
    probs = score(logits[:num_words, :num_labels], "sigmoid")
    start, end, inside = probs[..., 0], probs[..., 1], probs[..., 2]
    starts = list(zip(*np.nonzero(start > threshold)))
    ends = list(zip(*np.nonzero(end > threshold)))
    out = []
    for st, c in starts:
        for ed, c_end in ends:
            if ed < st or c != c_end:
                continue
            ins = inside[st:ed + 1, c]
            if (ins < threshold).any():
                continue
            out.append(Span(int(st), int(ed), int(c), float(min(ins.min(), start[st, c], end[ed, c]))))
    return out


def _overlaps(a: Span, b: Span, flat_ner: bool, multi_label: bool) -> bool:
    if (a.start, a.end) == (b.start, b.end):
        return not multi_label
    apart = a.start > b.end or b.start > a.end
    if flat_ner:
        return not apart
    nested = (a.start <= b.start and a.end >= b.end) or (b.start <= a.start and b.end >= a.end)
    return not (apart or nested)


def greedy(spans: Sequence[Span], flat_ner: bool, multi_label: bool) -> list[Span]:
    """The best spans first, each kept unless it overlaps one kept before (``flat_ner`` False allows nesting,
    ``multi_label`` one span with several labels), in the order of their start: the package's greedy search."""
    kept: list[Span] = []
    for span in sorted(spans, key=lambda s: -s.score):
        if not any(_overlaps(span, other, flat_ner, multi_label) for other in kept):
            kept.append(span)
    return sorted(kept, key=lambda s: s.start)


def read_settings(repo: Any) -> dict:
    """gliner_config.json over config.json; a clear error when the repository has neither GLiNER file."""
    settings = repo.read_json(CONFIG_FILE)
    if settings is None:
        raise ValueError(f"gliner: {repo.name} has no {CONFIG_FILE} (the GLiNER settings: span mode, widths, "
                         "prompt tokens)")
    return {**repo.config, **settings, "model_type": "gliner"}
