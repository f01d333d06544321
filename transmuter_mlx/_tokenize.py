"""Helpers of tokenizer.py: input checks, padding of encodings into arrays, byte offsets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def validate_texts(texts: object) -> list[str | tuple[str, str]]:
    """The batch as a list of str or (str, str); a TypeError names the first bad item's index.

    >>> validate_texts("hi"), validate_texts([("q", "c"), ""])
    (['hi'], [('q', 'c'), ''])
    """
    batch = [texts] if isinstance(texts, str | tuple) or texts is None else texts
    if not isinstance(batch, Sequence):
        raise TypeError(
            f"texts must be a str, a (text, text_pair) tuple, or a list of them; got {type(texts).__name__}"
        )
    items: list[str | tuple[str, str]] = []
    for i, item in enumerate(batch):
        if isinstance(item, str):
            items.append(item)
        elif isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
            items.append((item[0], item[1]))
        else:
            raise TypeError(
                f"input {i}: expected a str or a (text, text_pair) tuple of two str, got {type(item).__name__}"
                + (f" {item!r}" if isinstance(item, tuple) else "")
            )
        for text in (item,) if isinstance(item, str) else item:
            check_unicode(text, f"input {i}")
    return items


def check_unicode(text: str, where: str, what: str = "text") -> str:
    """``text`` if it is Unicode text; a ValueError naming ``where`` (and ``what`` the text is) for a
    lone surrogate.

    A lone surrogate (U+D800..U+DFFF, from bytes decoded with ``errors="surrogateescape"`` or half
    of a UTF-16 pair) has no UTF-8 encoding: tokenizers rejects it with an internal TypeError, as
    transformers does. Replacing it silently would change the text, so it is an error that says where.

    >>> check_unicode("café", "input 0")
    'café'
    >>> check_unicode("a\\udc80b", "input 3")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: input 3: the text has a lone surrogate '\\udc80' (U+DC80) at character 1, ...
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        char = text[error.start]
        raise ValueError(
            f"{where}: the {what} has a lone surrogate {char!r} (U+{ord(char):04X}) at character {error.start}, "
            "which is not Unicode text and has no UTF-8 encoding (it comes from bytes decoded with "
            "errors='surrogateescape' or half of a UTF-16 pair); clean the text first, e.g. "
            "text.encode('utf-8', 'replace').decode('utf-8')"
        ) from None
    return text


def check_unicode_in(item: Any, where: str) -> Any:
    """``item`` if every str in it (dict values, list and tuple items) is Unicode text (:func:`check_unicode`).

    >>> check_unicode_in({"messages": [{"role": "user", "content": "hi"}]}, "input 0")["messages"][0]["role"]
    'user'
    """
    if isinstance(item, str):
        check_unicode(item, where)
    elif isinstance(item, Mapping):
        for value in item.values():
            check_unicode_in(value, where)
    elif isinstance(item, list | tuple):
        for value in item:
            check_unicode_in(value, where)
    return item


@dataclass
class TokenRow:
    """One encoded row, unpadded: (tokens,) int64 arrays, and ``offsets`` (tokens, 2) of UTF-8 bytes into its
    text (the first or second of a pair, as ``sequence_ids`` says; -1 on special tokens, as ``word_ids``).
    ``sample`` is the index of the text it came from; ``owner`` the input it serves (a pipeline's own)."""

    sample: int
    input_ids: np.ndarray
    token_type_ids: np.ndarray
    offsets: np.ndarray
    sequence_ids: np.ndarray
    word_ids: np.ndarray
    special_tokens_mask: np.ndarray
    owner: int = -1

    @classmethod
    def of(cls, encoding: Any, sample: int) -> TokenRow:
        """The row of a ``tokenizers.Encoding`` (character offsets, turned into bytes by the caller)."""
        return cls(
            sample,
            np.asarray(encoding.ids, np.int64),
            np.asarray(encoding.type_ids, np.int64),
            np.asarray(encoding.offsets, np.int64).reshape(-1, 2),
            np.asarray([-1 if x is None else x for x in encoding.sequence_ids], np.int64),
            np.asarray([-1 if x is None else x for x in encoding.word_ids], np.int64),
            np.asarray(encoding.special_tokens_mask, np.int64),
            sample,
        )

    def __len__(self) -> int:
        return len(self.input_ids)


# what a padding position holds, per field (attention_mask is 1 on the row's own tokens)
PADDING = {"input_ids": None, "attention_mask": 0, "token_type_ids": 0, "offsets": 0, "sequence_ids": -1,
           "word_ids": -1, "special_tokens_mask": 1}


def pad_rows(rows: Sequence[TokenRow], lengths: int | Sequence[int], pad_id: int, side: str,
             fields: Sequence[str] = tuple(PADDING)) -> dict[str, np.ndarray]:
    """``fields`` of ``rows`` padded on ``side`` to one length: ``lengths`` itself, or the smallest of
    ``lengths`` that holds the longest row (the longest row's length when empty); ``pad_id`` fills the ids.

    >>> pad_rows([], [8], 0, "right")["input_ids"].shape
    (0, 8)
    """
    longest = max((len(r) for r in rows), default=0)
    length = lengths if isinstance(lengths, int) else longest
    if not isinstance(lengths, int) and lengths:
        fits = [b for b in sorted(lengths) if b >= longest]
        if not fits:
            raise ValueError(f"an input has {longest} tokens, more than the largest pad_to length {max(lengths)}")
        length = fits[0]
    n = len(rows)
    out = {}
    for name in fields:
        fill = pad_id if name == "input_ids" else PADDING[name]
        out[name] = np.full((n, length, 2) if name == "offsets" else (n, length), fill, np.int64)
    for i, r in enumerate(rows):
        k = len(r)
        cols = slice(length - k, length) if side == "left" else slice(0, k)
        for name in fields:
            out[name][i, cols] = 1 if name == "attention_mask" else getattr(r, name)
    return out


def byte_table(text: str) -> np.ndarray | None:
    """Byte position of each character boundary of ``text`` in UTF-8 (None for ASCII text).

    >>> byte_table("é!").tolist()
    [0, 2, 3]
    """
    if text.isascii():
        return None
    points = np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), dtype=np.uint32)
    sizes = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def char_to_byte_offsets(rows: Sequence[TokenRow], items: Sequence[Any]) -> None:
    """Turn the character offsets of each row into byte offsets into the UTF-8 text of its sequence (in place).

    >>> row = TokenRow(0, *[np.zeros(1, np.int64)] * 2, np.array([[0, 1]]), np.zeros(1, np.int64),
    ...                *[np.zeros(1, np.int64)] * 2)
    >>> char_to_byte_offsets([row], ["é"]); row.offsets.tolist()
    [[0, 2]]
    """
    tables: dict[tuple[int, int], np.ndarray | None] = {}
    for row in rows:
        item = items[row.sample]
        texts = (item,) if isinstance(item, str) else item
        for seq, text in enumerate(texts):
            key = (row.sample, seq)
            if key not in tables:
                tables[key] = byte_table(text)
            table = tables[key]
            if table is not None:
                mask = row.sequence_ids == seq
                row.offsets[mask] = table[row.offsets[mask]]
