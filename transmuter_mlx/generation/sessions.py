"""``DecoderSession``s over ONNX decoder exports, with the KV-cache layout read from the graph.

>>> import transmuter_mlx as tm                                   # doctest: +SKIP
>>> from transmuter_mlx.generation.sessions import open_session   # doctest: +SKIP
>>> session = open_session(tm.load("onnx/model.onnx"), pad_token_id=0)   # doctest: +SKIP
>>> session.prefill([[5, 6, 7], [8]]).shape                       # doctest: +SKIP
(2, 512)

The cache is ``past_key_values.N.key/value`` in and ``present.N.key/value`` out, each
(batch, kv_heads, length, head_dim); the heads, head size and dtype come from the graph inputs.
Two modes so far, both growing the cache by one position per step:

- ``position_ids`` exports (optimum ``model.onnx`` of GPT-2, Llama, Qwen2): the prompts are padded
  on the left, the attention mask hides the padding, and each row's positions count its own tokens
  (``cumsum(mask) - 1``, as transformers builds them), so rows of any lengths share one cache.
- merged decoders without ``position_ids`` (``decoder_model_merged.onnx``, ``use_cache_branch``):
  the model takes positions from the cache length, which all rows of a cache share, so the rows are
  grouped by prompt length and each group keeps its own cache; a step runs the groups in turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CacheLayout", "GrowSession", "open_session"]

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")


@dataclass(frozen=True)
class CacheLayout:
    """The cache inputs of a decoder graph: their names (in layer order) and (heads, head_dim, dtype)."""

    names: tuple[str, ...]
    heads: int
    head_dim: int
    dtype: np.dtype
    position_ids: bool
    use_cache_branch: bool

    @classmethod
    def of(cls, model: Any) -> CacheLayout:
        """The layout of a loaded ``Model`` (its ``inputs``)."""
        past = sorted(((int(m[1]), m[2], i) for i in model.inputs if (m := _PAST.match(i.name))),
                      key=lambda x: (x[0], x[1] != "key"))
        if not past:
            raise ValueError(f"{model.name}: no past_key_values.N.key/value inputs; not a decoder with a KV cache")
        info = past[0][2]
        heads, head_dim = info.shape[1], info.shape[3]
        if not isinstance(heads, int) or not isinstance(head_dim, int):
            raise ValueError(f"{model.name}: cache input {info.name} has symbolic heads or head size {info.shape}")
        names = {i.name for i in model.inputs}
        return cls(tuple(i.name for _, _, i in past), heads, head_dim, np.dtype(info.dtype or np.float32),
                   "position_ids" in names, "use_cache_branch" in names)


@dataclass
class _Group:
    rows: list[int]  # the global rows of this cache, in cache order
    mask: np.ndarray  # (rows, length) int64, 1 where a position holds a token
    cache: dict[str, Any]


class GrowSession:
    """A decoder whose cache grows by one position per token (see the module docstring).

    ``model`` is a loaded ``Model``; ``pad_token_id`` fills the left padding of the prompts.
    """

    def __init__(self, model: Any, pad_token_id: int = 0):
        self.model, self.B, self.pad = model, model.backend, int(pad_token_id)
        self.layout = CacheLayout.of(model)
        self.groups: list[_Group] = []
        self.padding: list[int] = []

    def _empty_cache(self, rows: int) -> dict[str, Any]:
        shape = (rows, self.layout.heads, 0, self.layout.head_dim)
        return {n: self.B.zeros(shape, self.layout.dtype) for n in self.layout.names}

    def _run(self, group: _Group, input_ids: np.ndarray, positions: np.ndarray, first: bool) -> Any:
        feeds: dict[str, Any] = {"input_ids": input_ids, "attention_mask": group.mask, **group.cache}
        if self.layout.position_ids:
            feeds["position_ids"] = positions
        if self.layout.use_cache_branch:
            feeds["use_cache_branch"] = np.array([not first])
        out = self.model(feeds)
        group.cache = {n: out[n.replace("past_key_values", "present")] for n in self.layout.names}
        logits = out["logits"]
        length = self.B.shape(logits)[1]
        last = self.B.slice(logits, [0, length - 1, 0], [self.B.shape(logits)[0], length, self.B.shape(logits)[2]],
                            [1, 1, 1])
        return self.B.reshape(last, (self.B.shape(logits)[0], self.B.shape(logits)[2]))

    def prefill(self, prompts: Sequence[Sequence[int]]) -> Any:
        """Run the prompts; one group (left-padded) with ``position_ids``, else one group per length."""
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
            group = _Group(rows, mask, self._empty_cache(len(rows)))
            parts.append(self._run(group, ids, _positions(mask), first=True))
            self.groups.append(group)
        return self._gather(parts)

    def step(self, tokens: np.ndarray) -> Any:
        """Run one token per row (global row order)."""
        tokens = np.asarray(tokens, np.int64).reshape(-1)
        parts = []
        for group in self.groups:
            group.mask = np.concatenate([group.mask, np.ones((len(group.rows), 1), np.int64)], 1)
            positions = _positions(group.mask)[:, -1:]
            parts.append(self._run(group, tokens[group.rows][:, None], positions, first=False))
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


def _positions(mask: np.ndarray) -> np.ndarray:
    """``cumsum(mask) - 1`` with 1 at padding, as transformers' ``prepare_inputs_for_generation``."""
    positions = np.cumsum(mask, -1) - 1
    return np.where(mask == 0, 1, positions).astype(np.int64)


def open_session(model: Any, pad_token_id: int = 0) -> GrowSession:
    """The session for a loaded decoder ``Model``, chosen from its graph inputs."""
    return GrowSession(model, pad_token_id)
