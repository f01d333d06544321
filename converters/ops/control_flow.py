"""Control flow: If, Loop, Scan, and SequenceMap (a loop over sequences).

Bodies run through ``ctx.run_subgraph``, so every node of a body picks its backend like a node of
the main graph: a body fed host values folds on the host, one fed device values runs on the
device and, when the node is replayed, is traced with it (``mx.compile`` unrolls the loop).
Conditions and trip counts are static inputs: a folded one keeps the model compiled, a computed
one makes the planner run the signature eagerly. A loop condition computed inside the body is
read with ``ctx.to_host`` (a sync, or eager mode when planning).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from ..values import np_dtype
from .registry import register


def _host_bool(v: Any) -> bool:
    return bool(np.asarray(v).reshape(-1)[0])


def _stack(B: Any, values: list[Any], axis: int) -> Any:
    """Stack body outputs; host values stay on the host, mixed ones go to the device."""
    if all(isinstance(v, np.ndarray | np.generic) for v in values):
        return np.stack([np.asarray(v) for v in values], axis=axis)
    return B.stack([v if B.is_array(v) else B.asarray(v) for v in values], axis=axis)


def _empty_scan_output(graph: onnx.GraphProto, index: int) -> np.ndarray:
    """A scan output of zero iterations: shape (0, *body output shape) where the body says it."""
    t = graph.output[index].type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else 0 for d in t.shape.dim] if t.HasField("shape") else []
    return np.zeros((0, *dims), dtype=np_dtype(t.elem_type) if t.elem_type else np.float32)


@register("If", 1, static_inputs=(0,), context=True)
def if_1(
    B: Any, cond: np.ndarray, *, then_branch: onnx.GraphProto, else_branch: onnx.GraphProto, ctx: Any
) -> Any:
    return tuple(ctx.run_subgraph(then_branch if _host_bool(cond) else else_branch, []))


@register("Loop", 1, static_inputs=(0, 1), context=True)
def loop_1(
    B: Any, M: np.ndarray | None, cond: np.ndarray | None, *v_initial: Any, body: onnx.GraphProto, ctx: Any
) -> Any:
    trip_count = None if M is None else int(np.asarray(M).reshape(-1)[0])
    keep_going = True if cond is None else _host_bool(cond)
    carried = list(v_initial)
    n_carried = len(carried)
    scans: list[list[Any]] = [[] for _ in range(len(body.output) - 1 - n_carried)]
    i = 0
    while keep_going and (trip_count is None or i < trip_count):
        outs = ctx.run_subgraph(body, [np.array(i, np.int64), np.array(keep_going), *carried])
        carried = outs[1 : 1 + n_carried]
        for acc, v in zip(scans, outs[1 + n_carried :]):
            acc.append(v)
        keep_going = _host_bool(ctx.to_host(outs[0]))
        i += 1
    stacked = [
        _stack(B, acc, 0) if acc else _empty_scan_output(body, 1 + n_carried + k)
        for k, acc in enumerate(scans)
    ]
    return tuple(carried + stacked)


def _scan(B: Any, ctx: Any, body: onnx.GraphProto, states: list[Any], xs: list[Any], in_axes: list[int],
          in_reverse: list[bool], out_axes: list[int], out_reverse: list[bool]) -> list[Any]:  # fmt: skip
    """One scan over ``xs`` (no batch axis): the final states, then the stacked scan outputs."""
    steps = B.shape(xs[0])[in_axes[0]] if xs else 0
    slices = []
    for x, axis, rev in zip(xs, in_axes, in_reverse):
        parts = [B.squeeze(p, (axis,)) for p in B.split(x, [1] * steps, axis)] if steps else []
        slices.append(parts[::-1] if rev else parts)
    n_out = len(body.output) - len(states)
    scans: list[list[Any]] = [[] for _ in range(n_out)]
    for t in range(steps):
        outs = ctx.run_subgraph(body, [*states, *(s[t] for s in slices)])
        states = outs[: len(states)]
        for acc, v in zip(scans, outs[len(states) :]):
            acc.append(v)
    results = []
    for k, acc in enumerate(scans):
        if not acc:
            empty = _empty_scan_output(body, len(states) + k)
            results.append(np.moveaxis(empty, 0, out_axes[k] % empty.ndim))
            continue
        rank = len(B.shape(acc[0])) + 1
        results.append(_stack(B, acc[::-1] if out_reverse[k] else acc, out_axes[k] % rank))
    return list(states) + results


@register("Scan", 8, static_inputs=(0,), context=True)
def scan_8(B: Any, sequence_lens: np.ndarray | None, *inputs: Any, body: onnx.GraphProto, num_scan_inputs: int,
           directions: list[int] | None = None, ctx: Any) -> Any:  # fmt: skip
    """Scan with a leading batch axis on every input; ``sequence_lens`` cuts each batch entry."""
    n_state = len(inputs) - num_scan_inputs
    batch = B.shape(inputs[0])[0]
    directions = list(directions or [0] * num_scan_inputs)
    n_out = len(body.output) - n_state
    per_batch = []
    for b in range(batch):
        items = [B.squeeze(B.slice(v, [b], [b + 1], [1]), (0,)) for v in inputs]
        xs = items[n_state:]
        steps = B.shape(xs[0])[0] if xs else 0
        length = steps if sequence_lens is None else int(np.asarray(sequence_lens).reshape(-1)[b])
        if length < steps:
            xs = [B.slice(x, [0], [length], [1]) for x in xs]
        outs = _scan(B, ctx, body, items[:n_state], xs, [0] * num_scan_inputs, [d == 1 for d in directions],
                     [0] * n_out, [False] * n_out)  # fmt: skip
        for k in range(n_state, len(outs)):
            if length < steps:  # pad the scan outputs of a short entry with zeros
                pads = [(0, steps - length)] + [(0, 0)] * (len(B.shape(outs[k])) - 1)
                outs[k] = B.pad(outs[k], pads, 0)
        per_batch.append(outs)
    return tuple(_stack(B, [o[k] for o in per_batch], 0) for k in range(len(body.output)))


@register("Scan", 9, context=True)
def scan_9(B: Any, *inputs: Any, body: onnx.GraphProto, num_scan_inputs: int, scan_input_axes: list[int] | None = None,
           scan_input_directions: list[int] | None = None, scan_output_axes: list[int] | None = None,
           scan_output_directions: list[int] | None = None, ctx: Any) -> Any:  # fmt: skip
    n_state = len(inputs) - num_scan_inputs
    n_out = len(body.output) - n_state
    xs = list(inputs[n_state:])
    in_axes = [a % len(B.shape(x)) for a, x in zip(scan_input_axes or [0] * num_scan_inputs, xs)]
    in_reverse = [d == 1 for d in scan_input_directions or [0] * num_scan_inputs]
    out_reverse = [d == 1 for d in scan_output_directions or [0] * n_out]
    outs = _scan(B, ctx, body, list(inputs[:n_state]), xs, in_axes, in_reverse, list(scan_output_axes or [0] * n_out),
                 out_reverse)  # fmt: skip
    return tuple(outs)


@register("SequenceMap", 17, context=True)
def sequence_map_17(
    B: Any, input_sequence: list[Any], *additional_inputs: Any, body: onnx.GraphProto, ctx: Any
) -> Any:
    """Run ``body`` on each element; the other sequences go element by element, tensors whole."""
    results: list[list[Any]] = [[] for _ in body.output]
    for i in range(len(input_sequence)):
        args = [input_sequence[i]] + [a[i] if isinstance(a, list) else a for a in additional_inputs]
        for acc, v in zip(results, ctx.run_subgraph(body, args)):
            acc.append(v)
    return tuple(results)
