"""KV caches made of slots: a running decoding batch that rows join and leave at any step (continuous batching).

>>> import numpy as np, transmuter_mlx as tm
>>> from tests.fixtures.generation_models import build
>>> slots = open_slots(tm.load(str(build("gpt2") / "onnx" / "model.onnx")), slots=4)
>>> first = slots.join(2, [5, 6, 7])            # prefilled alone, then copied into slot 2
>>> slots.step(np.array([0, 0, 9, 0])).shape    # every slot steps; only the live ones count
(4, 512)
>>> slots.leave(2)

A slot cache has ``slots`` rows, always: a step runs all of them (so the compiled shapes stay those of
``slots`` rows), a free slot runs on padding and its logits are ignored. ``join(slot, prompt)`` prefills
the prompt alone (a one-row session of the same mode) and copies its cache into the slot; the row's tokens
are then those of its sequential run. One class per KV-cache mode (see ``sessions.py``):

- ``BufferSlots`` (exports with ``position_ids``): the buffer is right-aligned; a slot's mask marks its own
  positions and its position ids count its own tokens; a free slot's mask is cleared before each step.
- ``GQASlots`` (GroupQueryAttention): each slot's tokens start at row 0; ``valid`` counts them.
- ``GrowSlots`` (merged decoders without ``position_ids``, whose positions come from the cache length): each
  row keeps its own growing cache (one model call per live row and step): rows still join and leave the
  running loop at any step.
- ``EncoderDecoderSlots`` (text-to-text): likewise a session per row, which encodes the row's input when
  it joins (``join(slot, prompt, source)``, ``source`` the encoder's feeds).

Both fixed buffers double (free positions on the left, resp. right) when a row needs more room.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .sessions_buffer import BufferSession, GQASession
from .sessions_common import CacheLayout, capacity, last_logits, run_model, token_column
from .sessions_grow import GrowSession

__all__ = ["BufferSlots", "EncoderDecoderSlots", "GQASlots", "GrowSlots", "open_slots"]


class _FixedSlots:
    """What the two fixed-buffer caches share: the buffer, its growth, and a slot's copy into it."""

    scratch_type: type = BufferSession

    def __init__(self, model: Any, pad_token_id: int, layout: CacheLayout, slots: int) -> None:
        self.model, self.B, self.pad, self.layout, self.slots = model, model.backend, int(pad_token_id), layout, slots
        self.size = 0
        self.cache: dict[str, Any] = {}  # made by the first join, on the thread that decodes (MLX streams)
        self.live = np.zeros(slots, bool)

    def _zeros(self, size: int) -> dict[str, Any]:
        shape = (self.slots, self.layout.heads, size, self.layout.head_dim)
        return {n: self.B.zeros(shape, self.layout.dtype) for n in self.layout.names}

    def _grow(self, need: int) -> None:
        """Room for ``need`` positions in every slot (a power of two, doubled from the present size)."""
        if need <= self.size:
            return
        size = capacity(need, 0) if self.size == 0 else self.size
        while size < need:
            size *= 2
        extra = size - self.size
        if self.size == 0:
            self.cache = self._zeros(size)
        else:
            self.cache = {n: self.B.pad(v, [(0, 0), (0, 0), self.free_side(extra), (0, 0)], 0)
                          for n, v in self.cache.items()}
        self.size = size
        self._grew(extra)

    def _grew(self, extra: int) -> None:
        """Host state that follows the buffer's width (a mask)."""

    def _prefill_alone(self, prompt: Sequence[int]) -> tuple[Any, dict[str, Any]]:
        scratch = self.scratch_type(self.model, self.pad, self.layout)
        scratch.reserve(0)
        logits = scratch.prefill([list(prompt)])
        return logits, scratch.cache

    def _put(self, slot: int, row: dict[str, Any]) -> None:
        """Slot ``slot`` of every cache tensor replaced by ``row`` (1, heads, size, dim)."""
        B = self.B
        out = {}
        for name, value in self.cache.items():
            parts = []
            if slot > 0:
                parts.append(B.slice(value, [0, 0, 0, 0], [slot, *B.shape(value)[1:]], [1, 1, 1, 1]))
            parts.append(row[name])
            if slot + 1 < self.slots:
                parts.append(B.slice(value, [slot + 1, 0, 0, 0], list(B.shape(value)), [1, 1, 1, 1]))
            out[name] = B.concatenate(parts, 0)
        self.cache = out

    def _columns(self, value: Any, start: int, stop: int) -> Any:
        rows, heads, _, dim = self.B.shape(value)
        return self.B.slice(value, [0, 0, start, 0], [rows, heads, stop, dim], [1, 1, 1, 1])

    def leave(self, slot: int) -> None:
        """Frees ``slot`` (its cache is ignored from now on and cleared when it is joined again)."""
        self.live[slot] = False


class BufferSlots(_FixedSlots):
    """Slots of a right-aligned buffer with masked free positions and explicit positions (``BufferSession``)."""

    scratch_type = BufferSession

    def __init__(self, model: Any, pad_token_id: int, layout: CacheLayout, slots: int) -> None:
        super().__init__(model, pad_token_id, layout, slots)
        self.mask = np.zeros((slots, 0), np.int64)
        self.next = np.zeros(slots, np.int64)

    @staticmethod
    def free_side(extra: int) -> tuple[int, int]:
        return (extra, 0)  # right-aligned: free positions on the left

    def _grew(self, extra: int) -> None:
        self.mask = np.pad(self.mask, [(0, 0), (extra, 0)])

    def join(self, slot: int, prompt: Sequence[int], source: Any = None) -> Any:
        """Prefill ``prompt`` into ``slot``; the (1, vocab) logits of its last token (``source``: unused here)."""
        logits, alone = self._prefill_alone(prompt)
        n = len(prompt)
        self._grow(n + 1)  # a step drops the oldest column: one more must be free
        row = {}
        for name, value in alone.items():  # its last n columns, right-aligned in the slot
            width = self.B.shape(value)[2]
            row[name] = self.B.pad(self._columns(value, width - n, width), [(0, 0), (0, 0), (self.size - n, 0), (0, 0)], 0)
        self._put(slot, row)
        self.mask[slot] = 0
        self.mask[slot, self.size - n:] = 1
        self.next[slot] = n
        self.live[slot] = True
        return logits

    def step(self, tokens: np.ndarray) -> Any:
        """One token per slot (host int64; free slots' tokens are ignored); (slots, vocab) logits."""
        self.mask[~self.live] = 0
        self.next[~self.live] = 0
        self._grow(int(self.mask.sum(1).max(initial=0)) + 1)
        new = np.ones((self.slots, 1), np.int64)
        mask = np.concatenate([self.mask, new], 1)
        feeds = {"input_ids": token_column(self.B, tokens), "attention_mask": mask,
                 "position_ids": self.next[:, None].copy(), **self.cache}
        out = run_model(self.model, feeds)
        present = self.layout.present(out)
        self.cache = {n: self._columns(v, 1, self.size + 1) for n, v in present.items()}
        self.mask = mask[:, 1:]
        self.next = self.next + 1
        return last_logits(self.B, out["logits"])


class GQASlots(_FixedSlots):
    """Slots of a GroupQueryAttention buffer written in place, each slot's tokens from row 0 (``GQASession``)."""

    scratch_type = GQASession

    def __init__(self, model: Any, pad_token_id: int, layout: CacheLayout, slots: int) -> None:
        super().__init__(model, pad_token_id, layout, slots)
        self.valid = np.zeros(slots, np.int64)

    @staticmethod
    def free_side(extra: int) -> tuple[int, int]:
        return (0, extra)  # each slot's tokens from row 0: free positions on the right

    def join(self, slot: int, prompt: Sequence[int], source: Any = None) -> Any:
        logits, alone = self._prefill_alone(prompt)
        n = len(prompt)
        self._grow(n + 1)
        row = {name: self.B.pad(self._columns(value, 0, n), [(0, 0), (0, 0), (0, self.size - n), (0, 0)], 0)
               for name, value in alone.items()}
        self._put(slot, row)
        self.valid[slot] = n
        self.live[slot] = True
        return logits

    def step(self, tokens: np.ndarray) -> Any:
        self.valid[~self.live] = 0
        self.valid = self.valid + 1
        self._grow(int(self.valid.max()))
        mask = (np.arange(self.size)[None, :] < self.valid[:, None]).astype(np.int64)
        feeds = {"input_ids": token_column(self.B, tokens), "attention_mask": mask, **self.cache}
        if self.layout.position_ids:
            feeds["position_ids"] = (self.valid[:, None] - 1).astype(np.int64)
        out = run_model(self.model, feeds)
        self.cache = self.layout.present(out)
        return last_logits(self.B, out["logits"])


class _RowSessions:
    """Slots that are sessions of one row each (their caches cannot share a batch): a step runs each live row."""

    def __init__(self, B: Any, slots: int) -> None:
        self.B, self.slots = B, slots
        self.rows: list[Any] = [None] * slots

    @property
    def live(self) -> np.ndarray:
        return np.array([r is not None for r in self.rows])

    def step(self, tokens: np.ndarray) -> Any:
        B, out, vocab = self.B, [], None
        for slot, session in enumerate(self.rows):
            if session is not None:
                out.append(session.step(np.asarray(tokens[slot:slot + 1], np.int64)))
                vocab = B.shape(out[-1])[1]
            else:
                out.append(None)
        if vocab is None:
            raise RuntimeError(f"{type(self).__name__}.step with no live slot")
        zero = B.zeros((1, vocab), np.float32)
        return B.concatenate([B.astype(x, np.float32) if x is not None else zero for x in out], 0)

    def leave(self, slot: int) -> None:
        self.rows[slot] = None


class GrowSlots(_RowSessions):
    """Slots of merged decoders whose positions come from the cache length: a growing cache per live row."""

    def __init__(self, model: Any, pad_token_id: int, layout: CacheLayout, slots: int) -> None:
        super().__init__(model.backend, slots)
        self.model, self.pad, self.layout = model, int(pad_token_id), layout

    def join(self, slot: int, prompt: Sequence[int], source: Any = None) -> Any:
        session = GrowSession(self.model, self.pad, self.layout)
        logits = session.prefill([list(prompt)])
        self.rows[slot] = session
        return logits


class EncoderDecoderSlots(_RowSessions):
    """Slots of an encoder-decoder (``EncoderDecoderSession``): a row encodes its ``source`` (the encoder's
    feeds) and grows its own decoder cache."""

    def __init__(self, session: Any, slots: int) -> None:
        super().__init__(session.B, slots)
        self.session = session

    def join(self, slot: int, prompt: Sequence[int], source: Any = None) -> Any:
        row = self.session.fresh()
        row.encode(source)
        logits = row.prefill([list(prompt)])
        self.rows[slot] = row
        return logits


SLOTS = {"buffer": BufferSlots, "gqa": GQASlots, "grow": GrowSlots}


def open_slots(model: Any, pad_token_id: int = 0, slots: int = 1, *, heads: int | None = None,
               head_dim: int | None = None, mode: str | None = None) -> BufferSlots | GQASlots | GrowSlots:
    """The slot cache of ``slots`` rows for a loaded decoder, in the mode its graph implies (or ``mode``)."""
    layout = CacheLayout.of(model, heads, head_dim)
    return SLOTS[mode or layout.mode](model, pad_token_id, layout, slots)
