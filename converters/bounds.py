"""Index checks: an out-of-range index never reaches a device gather or scatter.

An op declares its index inputs (``OpSpec.index_bounds``: Gather's indices lie in ``[-n, n)``). A device
library reads memory past the table for such an index (MLX: garbage, or a crash of the process), so
the runner checks every declared index, as cheaply as its origin allows:

- a **host** value (a constant of the signature) is checked once, when the signature is planned;
- a value computed from the **feeds** by a few cheap ops (``input_ids`` itself, a ``position_ids`` cast,
  GroupQueryAttention's ``seqlens_k = ReduceSum(attention_mask) - 1``) is recomputed on the host from
  the caller's arrays and checked before the device runs: no wait for the device;
- any other value is checked on the **device**: the replay returns its extremes, read after the call.

In every case the device op gets the index clamped into its range, so a value that is not checked
(a feed the caller marks ``unchecked``: the decoding loop's picked tokens, still on the device) can
give a wrong row but never reads outside the table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import IndexOutOfRangeError
from .ops.registry import IndexBound
from .values import is_host

__all__ = ["Guard", "check_extremes", "check_values", "clamp", "extremes", "host_source"]

# ops cheap enough to recompute on the host at every call, when they lie between a feed and an index
HOST_CHECKABLE = frozenset({
    "Identity", "Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Transpose", "Slice",
    "Concat", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Min", "Max", "Clip", "Where", "Equal",
    "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "ReduceSum", "ReduceMax",
    "ReduceMin", "CumSum", "Range", "Shape", "Size", "ConstantOfShape", "Tile", "Sign",
})  # fmt: skip
MAX_HOST_STEPS = 32  # a longer chain is checked on the device instead


def _range(bound: IndexBound) -> str:
    low, high = bound.low, bound.high
    text = f"[{low}, {high})" if isinstance(low, int) else f"[{list(low)}, {list(high)}) per index entry"
    return f"{text}{' (' + bound.what + ')' if bound.what else ''}"


def check_values(label: str, name: str, bound: IndexBound, values: np.ndarray, origin: str = "",
                 positions: bool = True) -> None:
    """Raise an IndexOutOfRangeError naming the first value of ``values`` outside ``bound`` (and its position
    in the input, with ``positions``)."""
    v = np.asarray(values)
    if v.size == 0:
        return
    low, high = np.asarray(bound.low), np.asarray(bound.high)
    bad = (v < low) | (v >= high)
    if bound.ignore is not None:
        bad &= v != bound.ignore
    if not bad.any():
        return
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    value = v[where if low.ndim == 0 else where[:-1]]
    position = list(where if low.ndim == 0 else where[:-1])
    where_text = f" at position {position}" if positions else ""
    raise IndexOutOfRangeError(
        f"node {label}: input {name!r}{origin} holds index {value.tolist()}{where_text}, out of range {_range(bound)}")


def clamp(B: Any, value: Any, bound: IndexBound) -> Any:
    """``value`` with every entry outside ``bound`` moved into it (``ignore`` entries kept)."""
    dtype = B.dtype(value)
    low = B.asarray(np.asarray(bound.low, dtype))
    high = B.asarray(np.asarray(bound.high, dtype) - 1)
    clamped = B.minimum(B.maximum(value, low), high)
    if bound.ignore is None:
        return clamped
    return B.where(B.equal(value, B.full((), bound.ignore, dtype)), value, clamped)


def extremes(B: Any, value: Any, bound: IndexBound) -> Any:
    """(2,) or (2, k) int64 on the device: the smallest and the largest index (``ignore`` entries skipped)."""
    v = B.astype(value, np.int64)
    rank = len(B.shape(v))
    per_entry = not isinstance(bound.low, int)
    axes = tuple(range(rank - 1)) if per_entry else tuple(range(rank))
    lo_v, hi_v = v, v
    if bound.ignore is not None:
        skip = B.equal(v, B.full((), bound.ignore, np.int64))
        lo_v = B.where(skip, B.asarray(np.asarray(bound.low, np.int64)), v)
        hi_v = B.where(skip, B.asarray(np.asarray(bound.low, np.int64)), v)
    if not axes:
        return B.stack([lo_v, hi_v], 0)
    return B.stack([B.min(lo_v, axes, False), B.max(hi_v, axes, False)], 0)


def check_extremes(label: str, name: str, bound: IndexBound, found: np.ndarray) -> None:
    """Raise when the (2, ...) extremes read back from the device leave ``bound``."""
    shape = (2,) if isinstance(bound.low, int) else (2, -1)
    check_values(label, name, bound, np.asarray(found).reshape(shape), " (computed on the device)", positions=False)


@dataclass
class Guard:
    """One checked index input of one planned signature.

    ``source`` (when the index can be recomputed on the host) is the list of trace positions of the steps
    that compute it from ``feeds``; the other values those steps read are ``constants``.
    """

    label: str
    name: str  # the value name of the index input
    bound: IndexBound
    step_index: int  # position of the guarded step in the plan's trace
    source: list[int] | None = None
    feeds: frozenset[str] = frozenset()
    constants: dict[str, Any] = field(default_factory=dict)

    @property
    def on_host(self) -> bool:
        return self.source is not None


def host_source(name: str, trace: Sequence[tuple[Any, list[Any]]], env: Mapping[str, Any],
                feed_names: set[str]) -> tuple[list[int], frozenset[str], dict[str, Any]] | None:
    """The steps (trace positions, in order) that compute value ``name`` from feeds with host-cheap ops,
    the feeds they read and the host constants they read; None when there is no such chain."""
    producer = {o: i for i, (step, _) in enumerate(trace) for o in step.outputs if o}
    needed: set[int] = set()
    feeds: set[str] = set()
    constants: dict[str, Any] = {}
    todo = [name]
    while todo:
        n = todo.pop()
        if n in feed_names:
            feeds.add(n)
            continue
        if n != name and is_host(env.get(n)):
            constants[n] = env.get(n)  # a constant of the signature (a weight, or folded from shapes)
            continue
        i = producer.get(n)
        if i is None:
            return None  # a device value that no step made and no feed is
        if i in needed:
            continue
        step = trace[i][0]
        if step.spec.op_type not in HOST_CHECKABLE or step.captures or step.spec.context:
            return None
        needed.add(i)
        if len(needed) > MAX_HOST_STEPS:
            return None
        todo.extend(x for x in step.inputs if x)
    if not feeds:
        return None
    return sorted(needed), frozenset(feeds), constants


def host_value(guard: Guard, trace: Sequence[tuple[Any, list[Any]]], feeds: Mapping[str, np.ndarray],
               run_step: Callable[[Any, list[Any]], list[Any]]) -> np.ndarray:
    """The guarded index recomputed on the host from the caller's ``feeds`` (numpy)."""
    values: dict[str, Any] = {**guard.constants, **{n: feeds[n] for n in guard.feeds}}
    for i in guard.source or ():
        step = trace[i][0]
        outs = run_step(step, [values.get(n) if n else None for n in step.inputs])
        values.update(zip(step.outputs, outs))
    return np.asarray(values[guard.name])
