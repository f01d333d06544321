"""The tokenizer as a processor: texts (or text pairs) -> token rows -> padded feeds of a compiled length.

>>> from transmuter_mlx.processors.text import text_input
>>> text_input("fill-mask", 0, "Paris is the [MASK] of France.")
'Paris is the [MASK] of France.'
>>> text_input("fill-mask", 3, 42)
Traceback (most recent call last):
TypeError: fill-mask: input 3: the text must be a str, got int

A row is one token sequence of an input (a :class:`~transmuter_mlx.tokenizer.TokenRow`, unpadded): one per
text, one per candidate label in zero-shot classification, one per window of a long context in question
answering. Its bucket is the smallest ``compile.sequence_length`` that holds it (limited to the model's
maximum length); a batch is padded once, to its bucket, on the tokenizer's padding side.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._tokenize import check_unicode, pad_rows
from ..tokenizer import TextInput, Tokenizer, TokenRow
from . import Bucket

if TYPE_CHECKING:
    from ..pipelines.options import Compile

__all__ = ["TextProcessor", "text_input"]

FEEDS = ("input_ids", "attention_mask", "token_type_ids")  # what a row can feed a text encoder


def text_input(task: str, index: int, value: Any, what: str = "text") -> str:
    """``value`` if it is a str of Unicode text; a TypeError naming the input otherwise (a ValueError for a
    lone surrogate, which no UTF-8 tokenizer can take)."""
    if not isinstance(value, str):
        raise TypeError(f"{task}: input {index}: the {what} must be a str, got {type(value).__name__}")
    return check_unicode(value, f"{task}: input {index}", what)


class TextProcessor:
    """Token rows of texts, and the feeds of a batch of rows (see the module docstring).

    ``max_length`` is the model's longest row (the tokenizer's ``model_max_length`` capped by the positions
    of the family); ``feed_dtypes`` the graph's text inputs and their dtypes, in feeding order.
    """

    kind = "tokenizer"

    def __init__(self, tokenizer: Tokenizer, compile: Compile, max_length: int | None,
                 feed_dtypes: Mapping[str, Any], task: str = "") -> None:
        self.tokenizer = tokenizer
        self.compile = compile
        self.max_length = max_length
        self.feed_dtypes = {n: np.dtype(d or np.int64) for n, d in feed_dtypes.items() if n in FEEDS}
        self.task = task
        self.pad_id = next((i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0)

    @property
    def limit(self) -> int:
        """The longest row, in tokens: the largest bucket (limited to the model's maximum length)."""
        return self.compile.lengths_for(self.max_length)[-1]

    def preprocess(self, item: TextInput, index: int) -> list[TokenRow]:
        """The row of one text or pair (truncated to ``limit``, with a warning)."""
        return self.rows([item], owners=[index])

    def rows(self, items: Sequence[TextInput], owners: Sequence[int] | None = None, truncation: bool | str = True,
             max_length: int | None = None, stride: int = 0, windows: bool = False) -> list[TokenRow]:
        """Rows of ``items`` (``owners[i]`` is the input that item i serves); with ``windows`` a text over the
        length gives overlapping windows (``stride`` tokens of overlap), without it it is truncated with a
        warning."""
        if not items:
            return []
        limit = max_length or self.limit
        rows = self.tokenizer.encode_rows(list(items), truncation=truncation, max_length=limit, stride=stride,
                                          return_overflow=True)
        owners = list(range(len(items))) if owners is None else list(owners)
        kept, seen, warned = [], set(), set()
        for row in rows:
            if row.sample in seen and not windows:
                if row.sample not in warned:
                    warned.add(row.sample)
                    self._warn_truncated(items[row.sample], limit)
                continue
            seen.add(row.sample)
            row.owner = owners[row.sample]
            kept.append(row)
        return kept

    def _warn_truncated(self, item: TextInput, limit: int) -> None:
        length = len(self.tokenizer.encode_rows([item], truncation=False)[0])
        warnings.warn(f"{self.task}: an input of {length} tokens was truncated to {limit}", stacklevel=7)

    def bucket(self, row: TokenRow) -> Bucket:
        return (self.compile.bucket(len(row), self.max_length),)

    def collate(self, batch: Sequence[TokenRow], bucket: Bucket) -> dict[str, np.ndarray]:
        """The graph's text feeds for ``batch``, padded to the bucket's length, in the dtypes it declares."""
        arrays = pad_rows(batch, bucket[0], self.pad_id, self.tokenizer.padding_side, tuple(self.feed_dtypes))
        return {n: arrays[n].astype(dtype, copy=False) for n, dtype in self.feed_dtypes.items()}

    def cut(self, value: np.ndarray, row: TokenRow, bucket: Bucket) -> np.ndarray:
        """A per-token output cut to the row's own tokens (other outputs as they are)."""
        length = bucket[0]
        if value.ndim == 0 or value.shape[0] != length:
            return value
        n = len(row)
        return value[length - n:] if self.tokenizer.padding_side == "left" else value[:n]
