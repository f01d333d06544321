"""What the decoder sessions share: the cache layout read from the graph, prompt chunks, positions.

>>> chunk_sizes(9), chunk_sizes(1200)
([8, 1], [512, 512, 128, 32, 16])
>>> capacity(9, 64)
128
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MAX_CHUNK", "CacheLayout", "capacity", "chunk_sizes", "last_logits", "positions", "run_model",
           "token_column"]

_PAST = re.compile(r"^past_key_values\.(\d+)\.(?:(decoder|encoder)\.)?(key|value)$")
MAX_CHUNK = 512  # the longest prompt piece run at once


@dataclass(frozen=True)
class CacheLayout:
    """The cache inputs of a decoder graph: their names (self-attention ``names`` and, for an encoder-decoder,
    cross-attention ``cross``, in layer order), (heads, head_dim, dtype), and the mode of the cache the graph
    implies (``"gqa"``, ``"buffer"`` or ``"grow"``, see ``sessions``)."""

    names: tuple[str, ...]
    heads: int
    head_dim: int
    dtype: np.dtype
    position_ids: bool
    use_cache_branch: bool
    mode: str = "grow"
    cross: tuple[str, ...] = ()

    @classmethod
    def of(cls, model: Any, heads: int | None = None, head_dim: int | None = None) -> CacheLayout:
        """The layout of a loaded ``Model``: ``past_key_values.N.key/value`` (decoder-only) or
        ``past_key_values.N.decoder/encoder.key/value`` (encoder-decoder) inputs, and for GroupQueryAttention
        its nodes. A graph that leaves the heads or head size symbolic takes them from GroupQueryAttention's
        ``kv_num_heads``, else from ``heads``/``head_dim`` (the family's config), else (head size) from the
        width of the rotary cos cache.
        """
        past = sorted(((int(m[1]), m[2] or "decoder", m[3], i) for i in model.inputs if (m := _PAST.match(i.name))),
                      key=lambda x: (x[0], x[1], x[2] != "key"))
        if not past:
            raise ValueError(f"{model.name}: no past_key_values.N.key/value inputs; not a decoder with a KV cache")
        info = past[0][3]
        graph_heads, graph_head_dim = info.shape[1], info.shape[3]
        gqa = _gqa_nodes(model)
        if not isinstance(graph_heads, int):
            graph_heads = int(gqa[0].attrs["kv_num_heads"]) if gqa else heads
        if not isinstance(graph_head_dim, int):
            graph_head_dim = head_dim or _rotary_head_dim(model, gqa)
        if not isinstance(graph_heads, int) or not isinstance(graph_head_dim, int):
            raise ValueError(f"{model.name}: cache input {info.name} has symbolic heads or head size {info.shape} "
                             "and the model's config.json does not give them")
        names = {i.name for i in model.inputs}
        position_ids, branch = "position_ids" in names, "use_cache_branch" in names
        if gqa and all(_counts_mask_values(model, step) for step in gqa):
            mode = "gqa"
        elif position_ids and not gqa:
            mode = "buffer"
        else:
            mode = "grow"
        dtype = np.dtype(info.dtype or np.float32)
        compute = getattr(model, "dtype", None)  # a model loaded with dtype= takes its cache in that dtype
        if compute is not None and (dtype.kind == "f" or dtype.name == "bfloat16"):
            dtype = np.dtype(compute)
        return cls(tuple(i.name for _, kind, _, i in past if kind == "decoder"), graph_heads, graph_head_dim,
                   dtype, position_ids, branch, mode,
                   tuple(i.name for _, kind, _, i in past if kind == "encoder"))

    def present(self, out: dict[str, Any], names: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The ``present.*`` outputs of a step, under the ``past_key_values.*`` names they feed next."""
        return {n: out[n.replace("past_key_values", "present")] for n in (self.names if names is None else names)}


def _gqa_nodes(model: Any) -> list[Any]:
    program = getattr(model, "program", None)
    return [s for s in getattr(program, "steps", ()) if s.spec.op_type == "GroupQueryAttention"]


def _counts_mask_values(model: Any, gqa: Any) -> bool:
    """Whether a GroupQueryAttention's ``seqlens_k`` is a ReduceSum of the attention mask's values
    (the model builder's ``sum(mask) - 1``), not its width (Gemma 3 style)."""
    if len(gqa.inputs) < 6 or not gqa.inputs[5]:
        return False
    producer = {o: s for s in model.program.steps for o in s.outputs if o}
    todo, seen = [gqa.inputs[5]], set()
    while todo:
        name = todo.pop()
        step = producer.get(name)
        if step is None or name in seen:
            continue
        seen.add(name)
        if step.spec.op_type == "ReduceSum" and step.inputs[0] == "attention_mask":
            return True
        if step.spec.op_type in ("Shape", "Size"):
            continue
        todo.extend(n for n in step.inputs if n)
    return False


def _rotary_head_dim(model: Any, gqa: list[Any]) -> int | None:
    """Twice the width of GroupQueryAttention's cos cache (rotary over the whole head)."""
    for step in gqa:
        if len(step.inputs) > 7 and step.inputs[7] in model.program.initializers:
            return 2 * int(np.shape(model.program.initializers[step.inputs[7]])[-1])
    return None


def chunk_sizes(length: int, max_chunk: int = MAX_CHUNK) -> list[int]:
    """Power-of-two pieces of a prompt of ``length`` (largest first, at most ``max_chunk``)."""
    sizes = []
    while length > 0:
        size = min(max_chunk, 1 << (length.bit_length() - 1))
        sizes.append(size)
        length -= size
    return sizes


def capacity(width: int, steps: int, longest: int | None = None) -> int:
    """The power of two that holds ``width`` prompt positions and ``steps`` more (at least one more), but
    not more than ``longest`` (the longest row there can be: the model's context) when that holds them.

    >>> capacity(9, 64), capacity(9, 30000, longest=30009), capacity(200, 250, longest=256)
    (128, 30009, 512)
    """
    need = width + max(steps, 1)
    size = 1 << (need - 1).bit_length()
    return longest if longest is not None and need <= longest < size else size


def positions(mask: np.ndarray) -> np.ndarray:
    """``cumsum(mask) - 1`` with 1 at padding, as transformers' ``prepare_inputs_for_generation``."""
    pos = np.cumsum(mask, -1) - 1
    return np.where(mask == 0, 1, pos).astype(np.int64)


def token_column(B: Any, tokens: Any, rows: Any = None) -> Any:
    """The (rows, 1) int64 ``input_ids`` of one step (of ``rows`` only, when given): host tokens, or
    picked tokens still on the device (not synced, so the step can be queued before the host reads them)."""
    if B.is_array(tokens):
        ids = B.reshape(B.astype(tokens, np.int64), (-1, 1))
        return ids if rows is None else B.take(ids, B.asarray(np.asarray(rows, np.int64)), 0)
    ids = np.asarray(tokens, np.int64).reshape(-1, 1)
    return ids if rows is None else ids[np.asarray(rows, np.int64)]


def run_model(model: Any, feeds: dict[str, Any], grows: bool = False, last: bool = False) -> dict[str, Any]:
    """``model(feeds)`` for a decoding step. Token ids still on the device are the loop's own picks (over the
    logits' columns): the model does not read them back for its index check, which would wait for the
    device. A step whose cache ``grows`` has a new shape every token: it is traced only when that shape comes
    again (a later generation of the same batch), since on MLX's CPU device a trace compiles kernels (200
    GPT-2 tokens: 67 s traced at first use, 2 s untraced; repeated, 0.4 s traced, 1.4 s untraced). ``last``:
    only the last position's logits are read (a prompt's chunk): a Model's head computes that row alone."""
    B = getattr(model, "backend", None)  # a Model; any other callable of feeds is called as it is
    if B is None:
        return model(feeds)
    options: dict[str, Any] = {"compile": "on_reuse"} if grows and B.traces else {}
    if last and feeds["input_ids"].shape[-1] > 1:  # a one-token chunk keeps the decoding steps' signature
        options["last_position"] = ("logits",)
    if not B.is_host and B.is_array(feeds.get("input_ids")):
        options["unchecked"] = ("input_ids",)
    return model(feeds, **options) if options else model(feeds)


def last_logits(B: Any, logits: Any, index: int = -1) -> Any:
    """(rows, vocab): the logits at one position of (rows, length, vocab)."""
    rows, length, vocab = B.shape(logits)
    i = index % length
    return B.reshape(B.slice(logits, [0, i, 0], [rows, i + 1, vocab], [1, 1, 1]), (rows, vocab))
