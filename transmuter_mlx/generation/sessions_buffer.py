"""Sessions with a KV buffer of fixed capacity: every decode step has the same input shapes.

- ``BufferSession`` (exports with ``position_ids``): the buffer is the graph's ``past`` and the mask
  marks its free rows 0. The graph returns ``present = past ++ new``; the session keeps its last
  ``capacity`` rows, so the buffer slides left by the new rows on the device and the valid rows stay
  right-aligned after the free ones.
- ``GQASession`` (GroupQueryAttention that counts valid rows from the mask values): the operator
  writes each row's new keys and values in place after its valid rows (``seqlens_k = sum(mask) - 1``)
  and returns the buffer; the prompts are padded on the right, so each row's tokens start at row 0.

Both keep the capacity a power of two: ``reserve(steps, longest)`` (called by ``generate``) sizes it for
the prompt and the new tokens, never above the longest row there can be (a bound that is not a power of
two is not rounded up), and the buffer doubles when it runs out anyway (without a reserve).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .sessions_common import (
    MAX_CHUNK,
    CacheLayout,
    capacity,
    chunk_sizes,
    last_logits,
    run_model,
    token_column,
)

__all__ = ["BufferSession", "GQASession"]


class _Fixed:
    """The buffer, its capacity, the reserve and the beam reorder that both sessions share."""

    max_chunk = MAX_CHUNK  # the longest prompt piece run at once

    def __init__(self, model: Any, pad_token_id: int = 0, layout: CacheLayout | None = None):
        self.model, self.B, self.pad = model, model.backend, int(pad_token_id)
        self.layout = layout or CacheLayout.of(model)
        self.steps = 0  # new tokens to make room for (``reserve``)
        self.longest: int | None = None  # the longest row there can be, prompt included (``reserve``)
        self.cache: dict[str, Any] = {}
        self.padding: list[int] = []

    def reserve(self, steps: int, longest: int | None = None) -> None:
        """Make room for ``steps`` new tokens after the next prompt (a hint; the buffer grows anyway), in a
        buffer of at most ``longest`` rows when the prompt's padding leaves room for that."""
        self.steps = max(int(steps), 0)
        self.longest = longest

    def _empty(self, rows: int, length: int) -> dict[str, Any]:
        shape = (rows, self.layout.heads, length, self.layout.head_dim)
        return {n: self.B.zeros(shape, self.layout.dtype) for n in self.layout.names}

    def _pad_cache(self, before: int, after: int) -> None:
        pads = [(0, 0), (0, 0), (before, after), (0, 0)]
        self.cache = {n: self.B.pad(v, pads, 0) for n, v in self.cache.items()}

    def _take_rows(self, rows: np.ndarray) -> np.ndarray | None:
        index = np.asarray(rows, np.int64).reshape(-1)
        if np.array_equal(index, np.arange(len(index))):
            return None
        taken = self.B.asarray(index)
        self.cache = {n: self.B.take(v, taken, 0) for n, v in self.cache.items()}
        return index


class BufferSession(_Fixed):
    """Mode (b): a left-padded, right-aligned buffer with masked free rows and explicit positions.

    >>> import transmuter_mlx as tm
    >>> from transmuter_mlx.hub import open_repo
    >>> repo = open_repo("Xenova/gpt2")
    >>> session = BufferSession(tm.load(repo.onnx_path()), pad_token_id=0)   # model.onnx: position_ids
    >>> session.reserve(64); session.prefill([[5, 6, 7], [8]]).shape == (2, repo.config["vocab_size"])
    True
    >>> session.mask.shape                                # 3 prompt tokens + 64 new: a buffer of 128
    (2, 128)
    """

    def prefill(self, prompts: Sequence[Sequence[int]]) -> Any:
        """Run the left-padded prompts in power-of-two chunks; the logits of each row's last token."""
        width = max(len(p) for p in prompts)
        rows = len(prompts)
        ids = np.full((rows, width), self.pad, np.int64)
        mask = np.zeros((rows, width), np.int64)
        for r, p in enumerate(prompts):
            ids[r, width - len(p):] = p
            mask[r, width - len(p):] = 1
        self.padding = [width - len(p) for p in prompts]
        size = capacity(width, self.steps, self.longest)
        self.cache, self.mask, self.used = self._empty(rows, size), np.zeros((rows, size), np.int64), 0
        self.next = np.zeros(rows, np.int64)  # the position of each row's next token
        start = 0
        for s in chunk_sizes(width, self.max_chunk):
            logits = self._run(ids[:, start:start + s], mask[:, start:start + s], last=True)
            start += s
        return last_logits(self.B, logits)

    def step(self, tokens: np.ndarray) -> Any:
        """Run one token per row (host or device tokens)."""
        ids = token_column(self.B, tokens)
        return last_logits(self.B, self._run(ids, np.ones((self.B.shape(ids)[0], 1), np.int64)))

    def reorder(self, rows: np.ndarray) -> None:
        """Row r continues from old row ``rows[r]``."""
        index = self._take_rows(rows)
        if index is not None:
            self.mask, self.next = self.mask[index], self.next[index]

    def _run(self, ids: np.ndarray, new_mask: np.ndarray, last: bool = False) -> Any:
        s = new_mask.shape[1]
        size = self.mask.shape[1]
        if self.used + s > size:  # out of room: double, free rows on the left
            grown = _doubled(size, self.used + s)
            self._pad_cache(grown - size, 0)
            self.mask = np.pad(self.mask, [(0, 0), (grown - size, 0)])
        mask = np.concatenate([self.mask, new_mask], 1)
        pos = np.where(new_mask == 0, 1, np.cumsum(new_mask, 1) - 1 + self.next[:, None]).astype(np.int64)
        feeds: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, **self.cache}
        out = run_model(self.model, feeds, last=last)
        present = self.layout.present(out)
        rows, heads, length, dim = self.B.shape(present[self.layout.names[0]])
        self.cache = {n: self.B.slice(v, [0, 0, s, 0], [rows, heads, length, dim], [1, 1, 1, 1])
                      for n, v in present.items()}
        self.mask = mask[:, s:]
        self.used += s
        self.next = self.next + new_mask.sum(1)
        return out["logits"]


class GQASession(_Fixed):
    """Mode (a): GroupQueryAttention writes the cache in place; right-padded prompts.

    The mask has the capacity's width (``total_sequence_length``) and, in each row, as many ones
    as the rows valid after the run (``seqlens_k + 1``); the operator reads nothing else from it.
    An export that also declares ``position_ids`` gets each new token's position in its row.

    >>> import transmuter_mlx as tm
    >>> model = "Qwen2.5-0.5B-Instruct-genai/onnx/model.onnx"  # the onnxruntime-genai model builder's output
    >>> session = GQASession(tm.load(model), pad_token_id=0)  # doctest: +SKIP
    >>> session.prefill([[5, 6, 7], [8]]).shape[0]        # doctest: +SKIP
    2
    """

    def prefill(self, prompts: Sequence[Sequence[int]]) -> Any:
        """Run the right-padded prompts in power-of-two chunks; the logits of each row's last token.

        A short row's padding goes into its cache after its tokens, and its next token overwrites it.
        """
        width = max(len(p) for p in prompts)
        rows = len(prompts)
        ids = np.full((rows, width), self.pad, np.int64)
        for r, p in enumerate(prompts):
            ids[r, :len(p)] = p
        lengths = np.asarray([len(p) for p in prompts], np.int64)
        self.padding = [width - len(p) for p in prompts]
        self.cache = self._empty(rows, capacity(width, self.steps, self.longest))
        B, start, result = self.B, 0, None
        for s in chunk_sizes(width, self.max_chunk):
            last = lengths - 1 - start  # the row's last token inside this chunk, if it is there
            inside = (last >= 0) & (last < s)
            at_end = bool(np.all(last[inside] == s - 1))  # no row needs another position's logits
            logits = self._run(ids[:, start:start + s], np.full(rows, start + s, np.int64), last=at_end)
            if B.shape(logits)[1] == 1:  # the last position's alone
                last = np.zeros_like(last)
            if inside.any():
                index = B.asarray(np.clip(last, 0, s - 1).reshape(rows, 1, 1))
                vocab = B.shape(logits)[2]
                picked = B.take_along_axis(logits, B.broadcast_to(index, (rows, 1, vocab)), 1)
                picked = B.reshape(picked, (rows, vocab))
                result = picked if result is None else B.where(B.asarray(inside.reshape(rows, 1)), picked, result)
            start += s
        self.valid = lengths
        return result

    def step(self, tokens: np.ndarray) -> Any:
        """Run one token per row (host or device tokens), written after the row's valid cache rows."""
        self.valid = self.valid + 1
        return last_logits(self.B, self._run(token_column(self.B, tokens), self.valid))

    def reorder(self, rows: np.ndarray) -> None:
        """Row r continues from old row ``rows[r]``."""
        index = self._take_rows(rows)
        if index is not None:
            self.valid = self.valid[index]

    def _run(self, ids: np.ndarray, valid: np.ndarray, last: bool = False) -> Any:
        size = self.B.shape(self.cache[self.layout.names[0]])[2]
        if int(valid.max()) > size:  # out of room: double, free rows on the right
            grown = _doubled(size, int(valid.max()))
            self._pad_cache(0, grown - size)
            size = grown
        mask = (np.arange(size)[None, :] < valid[:, None]).astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, **self.cache}
        if self.layout.position_ids:  # exports that take them (transformers.js style): the rows' own
            s = self.B.shape(ids)[1]
            feeds["position_ids"] = (valid[:, None] - s + np.arange(s)[None, :]).astype(np.int64)
        out = run_model(self.model, feeds, last=last)
        self.cache = self.layout.present(out)
        return out["logits"]


def _doubled(size: int, need: int) -> int:
    """``size`` doubled until it holds ``need`` rows."""
    while size < need:
        size *= 2
    return size
