"""Helpers of tokenizer.py: input checks, padding of encodings into arrays, byte offsets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def pad_rows(rows: list, buckets: list[int], pad_id: int, side: str) -> dict[str, np.ndarray]:
    """Pad tokenizers encodings to one length (the longest, or the smallest bucket that fits).

    >>> pad_rows([], [8], 0, "right")["input_ids"].shape
    (0, 8)
    """
    longest = max((len(r.ids) for r in rows), default=0)
    length = longest
    if buckets:
        fits = [b for b in buckets if b >= longest]
        if not fits:
            raise ValueError(
                f"an input has {longest} tokens, more than the largest pad_to length {buckets[-1]}"
            )
        length = fits[0]
    n = len(rows)
    out = {
        "input_ids": np.full((n, length), pad_id, dtype=np.int64),
        "attention_mask": np.zeros((n, length), dtype=np.int64),
        "token_type_ids": np.zeros((n, length), dtype=np.int64),
        "offsets": np.zeros((n, length, 2), dtype=np.int64),
        "sequence_ids": np.full((n, length), -1, dtype=np.int64),
        "word_ids": np.full((n, length), -1, dtype=np.int64),
        "special_tokens_mask": np.ones((n, length), dtype=np.int64),
    }
    for i, r in enumerate(rows):
        k = len(r.ids)
        cols = slice(length - k, length) if side == "left" else slice(0, k)
        out["input_ids"][i, cols] = r.ids
        out["attention_mask"][i, cols] = r.attention_mask
        out["token_type_ids"][i, cols] = r.type_ids
        out["special_tokens_mask"][i, cols] = r.special_tokens_mask
        if k:
            out["offsets"][i, cols] = r.offsets
            out["sequence_ids"][i, cols] = [-1 if s is None else s for s in r.sequence_ids]
            out["word_ids"][i, cols] = [-1 if w is None else w for w in r.word_ids]
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


def char_to_byte_offsets(
    offsets: np.ndarray, sequence_ids: np.ndarray, items: list, sample: list[int]
) -> np.ndarray:
    """Turn the character offsets of each row into byte offsets into the UTF-8 text of its sequence.

    >>> char_to_byte_offsets(np.array([[[0, 1]]]), np.array([[0]]), ["é"], [0]).tolist()
    [[[0, 2]]]
    """
    tables: dict[tuple[int, int], np.ndarray | None] = {}
    out = offsets.copy()
    for row, index in enumerate(sample):
        item = items[index]
        texts = (item,) if isinstance(item, str) else item
        for seq, text in enumerate(texts):
            key = (index, seq)
            if key not in tables:
                tables[key] = byte_table(text)
            table = tables[key]
            if table is not None:
                mask = sequence_ids[row] == seq
                out[row][mask] = table[offsets[row][mask]]
    return out
