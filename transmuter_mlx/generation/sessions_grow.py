"""Mode (c): a cache that grows by one row per token, for merged decoders without ``position_ids``.

The model takes positions from the cache length, which all rows of a cache share, so the rows are
grouped by prompt length and each group keeps its own cache; a step runs the groups in turn. Each
cache length is a new input shape (compiled on first use and cached by the model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .sessions_common import (
    MAX_CHUNK,
    CacheLayout,
    chunk_sizes,
    last_logits,
    positions,
    run_model,
    token_column,
)

__all__ = ["GrowSession"]


@dataclass
class _Group:
    rows: list[int]  # the global rows of this cache, in cache order
    mask: np.ndarray  # (rows, length) int64, 1 where a position holds a token
    cache: dict[str, Any]


class GrowSession:
    """A decoder whose cache grows by one position per token (see the module docstring).

    ``model`` is a loaded ``Model``; ``pad_token_id`` fills the left padding of the prompts (only
    used when the graph has ``position_ids`` and is run in this mode on purpose).

    >>> import transmuter_mlx as tm
    >>> from transmuter_mlx.hub import open_repo
    >>> repo = open_repo("Xenova/gpt2")
    >>> session = GrowSession(tm.load(repo.onnx_path()), pad_token_id=0)
    >>> session.prefill([[5, 6, 7], [8]]).shape == (2, repo.config["vocab_size"])
    True
    """

    max_chunk = MAX_CHUNK  # the longest prompt piece run at once

    def __init__(self, model: Any, pad_token_id: int = 0, layout: CacheLayout | None = None):
        self.model, self.B, self.pad = model, model.backend, int(pad_token_id)
        self.layout = layout or CacheLayout.of(model)
        self.groups: list[_Group] = []
        self.padding: list[int] = []

    def _empty_cache(self, rows: int) -> dict[str, Any]:
        shape = (rows, self.layout.heads, 0, self.layout.head_dim)
        return {n: self.B.zeros(shape, self.layout.dtype) for n in self.layout.names}

    def _run(self, group: _Group, input_ids: np.ndarray, new_mask: np.ndarray, first: bool, last: bool = False) -> Any:
        group.mask = np.concatenate([group.mask, new_mask], 1)
        feeds: dict[str, Any] = {"input_ids": input_ids, "attention_mask": group.mask, **group.cache}
        if self.layout.position_ids:
            feeds["position_ids"] = positions(group.mask)[:, -input_ids.shape[1]:]
        if self.layout.use_cache_branch:
            feeds["use_cache_branch"] = np.array([not first])
        out = run_model(self.model, feeds, grows=True, last=last)
        group.cache = self.layout.present(out)
        return out["logits"]

    def prefill(self, prompts: Sequence[Sequence[int]]) -> Any:
        """Run the prompts in power-of-two chunks; one left-padded group with ``position_ids``, else
        one group per length."""
        if self.layout.position_ids:
            members = [list(range(len(prompts)))]
        else:
            by_length: dict[int, list[int]] = {}
            for r, p in enumerate(prompts):
                by_length.setdefault(len(p), []).append(r)
            members = list(by_length.values())
        width = max(len(p) for p in prompts)
        self.padding = [width - len(p) if self.layout.position_ids else 0 for p in prompts]
        self.groups, parts = [], []
        for rows in members:
            length = max(len(prompts[r]) for r in rows)
            ids = np.full((len(rows), length), self.pad, np.int64)
            mask = np.zeros((len(rows), length), np.int64)
            for i, r in enumerate(rows):
                ids[i, length - len(prompts[r]):] = prompts[r]
                mask[i, length - len(prompts[r]):] = 1
            group = _Group(rows, np.zeros((len(rows), 0), np.int64), self._empty_cache(len(rows)))
            start = 0
            for s in chunk_sizes(length, self.max_chunk):
                logits = self._run(group, ids[:, start:start + s], mask[:, start:start + s], first=start == 0,
                                   last=True)
                start += s
            parts.append(last_logits(self.B, logits))
            self.groups.append(group)
        return self._gather(parts)

    def step(self, tokens: np.ndarray) -> Any:
        """Run one token per row (global row order; host or device tokens)."""
        parts = []
        for group in self.groups:
            one = np.ones((len(group.rows), 1), np.int64)
            ids = token_column(self.B, tokens, None if len(self.groups) == 1 else group.rows)
            parts.append(last_logits(self.B, self._run(group, ids, one, first=False)))
        return self._gather(parts)

    def reorder(self, rows: np.ndarray) -> None:
        """Row r continues from old row ``rows[r]``; both must be in the same group (beams of one input)."""
        where = {r: (g, i) for g, group in enumerate(self.groups) for i, r in enumerate(group.rows)}
        for g, group in enumerate(self.groups):
            local = []
            for r in group.rows:
                src_group, src = where[int(rows[r])]
                if src_group != g:
                    raise ValueError(f"row {r} cannot continue row {rows[r]}: they have different caches")
                local.append(src)
            index = np.asarray(local, np.int64)
            if np.array_equal(index, np.arange(len(local))):
                continue
            group.mask = group.mask[index]
            taken = self.B.asarray(index)
            group.cache = {n: self.B.take(v, taken, 0) for n, v in group.cache.items()}

    def _gather(self, parts: list[Any]) -> Any:
        """The logits of the groups back in global row order."""
        if len(parts) == 1 and self.groups[0].rows == list(range(len(self.groups[0].rows))):
            return parts[0]
        order = [r for group in self.groups for r in group.rows]
        inverse = np.argsort(np.asarray(order, np.int64), kind="stable")
        return self.B.take(self.B.concatenate(parts, 0), self.B.asarray(inverse), 0)
