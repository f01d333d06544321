"""Token ids in, text chunks out, by the rule of transformers' ``TextStreamer``.

>>> words = {0: "Hello", 1: " wor", 2: "ld", 3: "!\\n"}
>>> stream = TextStream(lambda ids: "".join(words[i] for i in ids), skip_prompt=False)
>>> [stream.push([i]) for i in range(4)] + [stream.end()]
[[], ['Hello '], [], ['world!\\n'], []]

The rule (``transformers.generation.streamers.TextStreamer.put``, 4.57): after each push the tokens
are decoded as one sequence, then

- text that ends with a newline goes out whole;
- text whose last character is a CJK ideograph goes out whole;
- otherwise the text goes out up to and including its last space, so a word that the next token
  may still change stays back.

A character split over several byte-level tokens (an emoji, most CJK) decodes to U+FFFD until its
last byte arrives. Such a tail is never a newline, a CJK ideograph or a space, so the third case
holds it back until the character is complete. ``end()`` flushes what is left.

The chunks always join to the decode of all the pushed tokens, which is the text a pipeline returns.
Two things keep it so where ``TextStreamer`` would print something else:

- every push decodes all the tokens since the prompt (``TextStreamer`` drops them after a newline, and
  a SentencePiece decoder then strips the leading space of the next word);
- with a decode that cleans up tokenization spaces (``cleans_spaces``: transformers'
  ``clean_up_tokenization``, which the text-generation pipeline applies), a later token can remove a
  space already decoded (``"x  "`` + ``"."`` decodes to ``"x ."``; ``" 's"`` becomes ``"'s"``), so the
  chunk stops before any text that a clean-up pattern could still reach (:func:`cleanup_stable_end`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..tokenizer import CLEANUP_REPLACEMENTS

REPLACEMENT_CHARACTER = "\ufffd"
# what a clean-up pattern is made of, and how far back of the end of a text one can start
_CLEANUP_CHARS = frozenset("".join(before for before, _ in CLEANUP_REPLACEMENTS))
_CLEANUP_REACH = max(len(before) for before, _ in CLEANUP_REPLACEMENTS) - 1

# The CJK blocks of ``TextStreamer._is_chinese_char`` (inclusive code point ranges).
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_cjk_character(char: str) -> bool:
    """Whether ``char`` is in a CJK ideograph block (the test of ``TextStreamer``).

    >>> is_cjk_character("好"), is_cjk_character("a"), is_cjk_character("の")
    (True, False, False)
    """
    code = ord(char)
    return any(low <= code <= high for low, high in _CJK_RANGES)


def cleanup_stable_end(text: str, end: int) -> int:
    """The largest cut at or before ``end`` that clean-up of ``text`` plus any later text keeps.

    Every clean-up pattern starts with a space and only removes spaces, so text that is cleaned up
    again with more text after it changes only where a pattern overlaps the end: the cut is stable
    when the character before it is in no pattern, or no space is among the last
    ``_CLEANUP_REACH`` characters before it (a pattern's space, then its other characters).

    >>> cleanup_stable_end("a b  ", 5), cleanup_stable_end("you ' ", 6), cleanup_stable_end("a\\n  ", 4)
    (3, 3, 2)
    """
    while end > 0 and text[end - 1] in _CLEANUP_CHARS and " " in text[max(0, end - _CLEANUP_REACH) : end]:
        end -= 1
    return end


class TextStream:
    """Turns the token ids of one generated row into text chunks, as ``TextStreamer`` prints them.

    >>> pieces = {0: "你", 1: "好", 2: " a", 3: " b"}
    >>> stream = TextStream(lambda ids: "".join(pieces[i] for i in ids), skip_prompt=False)
    >>> stream.push([0]), stream.push([1]), stream.push([2]), stream.push([3]), stream.end()
    (['你'], ['好'], [' '], ['a '], ['b'])

    ``decode`` is the tokenizer's decode function (ids -> text); ``decode_kwargs`` such as
    ``skip_special_tokens=True`` are passed to it on every call. With ``skip_prompt`` the first
    push after construction or ``end()`` is the prompt and gives no text. Each push is one step of
    the rule, as one ``TextStreamer.put``: push one token at a time to stream token by token.
    ``push`` and ``end`` return the chunks that are ready (no empty strings). ``cleans_spaces`` says
    that ``decode`` cleans up tokenization spaces (also implied by ``clean_up_tokenization_spaces=True``
    in ``decode_kwargs``).
    """

    def __init__(self, decode: Callable[..., str], skip_prompt: bool = True, *, cleans_spaces: bool = False,
                 **decode_kwargs: Any) -> None:
        self.decode = decode
        self.skip_prompt = skip_prompt
        self.cleans_spaces = cleans_spaces or bool(decode_kwargs.get("clean_up_tokenization_spaces"))
        self.decode_kwargs = decode_kwargs
        self._tokens: list[int] = []
        self._printed = 0
        self._next_is_prompt = True

    def push(self, token_ids: Iterable[int] | int) -> list[str]:
        """Adds token ids (one step) and returns the chunks that became final.

        >>> TextStream(lambda ids: " x" * len(ids), skip_prompt=False).push([7, 7])
        [' x ']
        """
        ids = [int(token_ids)] if isinstance(token_ids, int) else [int(i) for i in token_ids]
        if self.skip_prompt and self._next_is_prompt:
            self._next_is_prompt = False
            return []
        self._tokens.extend(ids)
        text = self.decode(self._tokens, **self.decode_kwargs)
        end = self._final_end(text)
        chunk = text[self._printed : end] if end > self._printed else ""
        self._printed += len(chunk)
        return [chunk] if chunk else []

    def _final_end(self, text: str) -> int:
        """Where the text that later tokens cannot change ends (the rule of the module docstring)."""
        if text.endswith("\n") or (text and is_cjk_character(text[-1])):
            end = len(text)
        else:  # a U+FFFD tail (incomplete character) is after the last space, so it stays back here
            end = text.rfind(" ") + 1
        return cleanup_stable_end(text, end) if self.cleans_spaces else end

    def end(self) -> list[str]:
        """Flushes the pending text and readies the stream for the next prompt.

        >>> stream = TextStream(lambda ids: "word" * len(ids), skip_prompt=False)
        >>> stream.push([1]), stream.end()
        ([], ['word'])
        """
        chunk = ""
        if self._tokens:
            chunk = self.decode(self._tokens, **self.decode_kwargs)[self._printed :]
        self._tokens, self._printed = [], 0
        self._next_is_prompt = True
        return [chunk] if chunk else []
