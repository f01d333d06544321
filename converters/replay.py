"""An eager replay written out as straight-line Python: one statement per device node, no interpreter loop.

A backend that does not trace (torch, or mlx with ``compile=False``) pays for the replay's walk at every call:
building each node's arguments from a dict of names, looking up guards, storing outputs and dropping dead
values cost a few microseconds a node, 4 ms of a 42 ms decode step of SmolLM2-135M on torch. ``straight_line``
writes that walk out once as the source of one function (as ``torch.fx`` does for a GraphModule): the
constants are names bound to it, each value a local freed with ``del`` after its last reader.

A node whose op declares ``replay_as`` (Reshape, Squeeze, Expand, Cast, ...) becomes the one backend call
that makes the output the planning walk recorded: ``B.reshape(x, (1, 9, 64))`` instead of the op's general
code, which works the shape out of its inputs again at every call. An op with a ``specialise`` (the fused
attention, RMSNorm, rotary embedding) is called as the kernel it chose for the signature's shapes.

>>> import numpy as np, onnx
>>> from onnx import helper as h
>>> import transmuter_mlx as tm
>>> g = h.make_graph([h.make_node("Unsqueeze", ["x", "axes"], ["u"]), h.make_node("Relu", ["u"], ["y"])], "g",
...                  [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
...                  [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
...                  [onnx.numpy_helper.from_array(np.array([0], np.int64), "axes")])
>>> model = tm.load(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]), compile=False)  # mlx, untraced
>>> x = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
>>> [model({"x": x})["y"].tolist() for _ in range(2)]     # the second call runs the written replay
[[[[1.0, 0.0, 3.0], [0.0, 5.0, 0.0]]], [[[1.0, 0.0, 3.0], [0.0, 5.0, 0.0]]]]
>>> print(straight_line(next(iter(model._executables.values()))).source)
def replay(v0):
    v1 = reshape(v0, (1, 2, 3))
    del v0
    o = f1(v1)
    v2 = o[0] if o.__class__ is tuple else o
    del v1
    return (v2,)
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import Any

from .bounds import clamp, extremes


class StraightLine:
    """A replay as one Python function; ``source`` is its code, calling the object runs it."""

    def __init__(self, source: str, names: dict[str, Any]):
        self.source = source
        code = compile(source, "<replay>", "exec")
        exec(code, names)  # noqa: S102 - our own source, from the graph's value names mapped to v0, v1, ...
        self.run: Callable[..., tuple[Any, ...]] = names["replay"]

    def __call__(self, *arrays: Any) -> tuple[Any, ...]:
        return self.run(*arrays)


def straight_line(exe: Any) -> StraightLine:
    """The replay of ``exe`` (an ``Executable``: its steps, their plans, guards and drops) as a ``StraightLine``."""
    B = exe.backend
    names: dict[str, Any] = {"B": B, "clamp": clamp, "extremes": extremes, "_outs": _outs,
                             "reshape": B.reshape, "broadcast_to": B.broadcast_to, "astype": B.astype}
    local: dict[str, str] = {}  # value name -> its local variable

    def var(name: str) -> str:
        return local.setdefault(name, f"v{len(local)}")

    def bind(value: Any, key: str) -> str:
        names[key] = value
        return key

    params = [var(n) for n in exe.feed_names + exe.constant_names]
    lines = [f"def replay({', '.join(params)}):"]
    device_guards = any(not g.on_host for g in exe.guards)
    if device_guards:
        lines.append("    found = []")
    keep = set(exe.device_output_names)
    clamped: dict[tuple, str] = {}  # (index value, bound) -> the local holding it clamped, for host-checked guards
    for index, ((step, plan), position) in enumerate(zip(exe.steps, exe._trace_positions)):
        args = [var(n) if n else "None" if c is None else bind(c, f"c{index}_{i}") for i, (n, c) in enumerate(plan)]
        guards = exe._guards_at.get(position, ())
        form, value = exe.shortcuts.get(index, (None, None))
        live = [o if o and (o in keep or o not in exe._drop_after[index]) else "" for o in step.outputs]
        targets = [var(o) if o else "_" for o in live]
        if form not in (None, "kernel") and not guards and plan and plan[0][0]:
            x = args[0]
            call = x if form == "identity" else f"{form}({x}, {value!r})" if form != "astype" else \
                f"astype({x}, {bind(value, f'dtype{index}')})"
            lines.append(f"    {targets[0]} = {call}")
        else:
            if guards:
                lines.append(f"    a = [{', '.join(args)}]")
                for j, g in enumerate(guards):
                    i = g.bound.input
                    same = (g.name, g.bound.low, g.bound.high, g.bound.ignore)
                    if g.on_host and same in clamped:  # checked on the host, clamped by an earlier node already
                        lines.append(f"    a[{i}] = {clamped[same]}")  # (each layer's seqlens_k: ~12 us a layer)
                        continue
                    bound = bind(g.bound, f"bound{index}_{j}")
                    if not g.on_host:
                        lines.append(f"    found.append(extremes(B, a[{i}], {bound}))")
                    lines.append(f"    a[{i}] = clamp(B, a[{i}], {bound})")
                    if g.on_host:
                        clamped[same] = f"k{len(clamped)}"
                        lines.append(f"    {clamped[same]} = a[{i}]")
                args = ["*a"]
            if step.spec.context and step.subgraphs:  # control flow: the interpreter's step, in the outer scope
                run = bind(functools.partial(_run_context, exe._interp, exe._host_env, step), f"step{index}")
                scope = ", ".join(f"{n!r}: {local[n]}" for n in step.captures if n in local)
                lines.append(f"    o = {run}([{', '.join(args)}], {{{scope}}})")
            else:  # the op's kernel for these shapes, or the op (a context op's ctx fixed: Split, LayerNormalization)
                context = {"ctx": exe._interp.context_for(step, B, exe._host_env)} if step.spec.context else {}
                op = value if form == "kernel" else functools.partial(step.spec.fn, B, **step.attrs, **context)
                lines.append(f"    o = {bind(op, f'f{index}')}({', '.join(args)})")
            if len(targets) == 1:
                lines.append(f"    {targets[0]} = o[0] if o.__class__ is tuple else o")
            elif targets:
                lines.append(f"    {', '.join(targets)}, = _outs(o, {len(targets)})")
        dead = [local[n] for n in exe._drop_after[index] if n in local and n not in keep]
        if dead:
            lines.append(f"    del {', '.join(dead)}")
    outputs = [local[n] for n in exe.device_output_names]
    result = f"({', '.join(outputs)}{',' if len(outputs) == 1 else ''})"
    lines.append(f"    return {result}" + (" + tuple(found)" if device_guards else ""))
    return StraightLine("\n".join(lines), names)


def _outs(out: Any, count: int) -> tuple[Any, ...]:
    """An op's outputs as ``count`` values: a single value is one, missing optional outputs are None."""
    outs = out if isinstance(out, tuple) else (out,)
    return outs[:count] + (None,) * (count - len(outs))


def _run_context(interp: Any, host_env: dict[str, Any], step: Any, args: list[Any],
                 scope: dict[str, Any]) -> tuple[Any, ...]:
    """The interpreter's run of ``step`` (not the Executable itself: its written code would hold it in a cycle)."""
    return tuple(interp.run_step(step, args, collections.ChainMap(scope, host_env)))
