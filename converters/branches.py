"""An If on a flag input, replaced by the branch the flag picks: one straight program per flag value.

A merged decoder (optimum's ``decoder_model_merged.onnx``: Whisper, T5, Bart, Marian, GPT-2) holds the decoder
twice, in the two branches of one If on the ``use_cache_branch`` input. ``Model`` makes such a flag a constant of
the signature, so the If always takes the same branch; but a branch is a subgraph, which the planner walks as one
step: an eager replay (torch, or mlx uncompiled) ran it through the interpreter at every call, each node's
arguments built anew, no node specialised to its shapes, no written-out replay; Whisper tiny.en's decoder step on
torch spent more time there than in its products. ``inline_branches(program, flags)`` is ``program`` with each
such If replaced by the steps of the branch ``flags`` picks, so the planner sees one graph.

A branch's own names stay as they are unless the outer graph uses them too (ONNX forbids it, exports are not
always checked): those get the If's name as a suffix. A branch with a subgraph of its own that reads such a name
is left as an If. The branch's outputs become the If's outputs: the step that makes one is renamed, an outer
value or a constant passes through an Identity.

>>> import numpy as np, onnx
>>> from onnx import helper as h
>>> branch = lambda op: h.make_graph([h.make_node(op, ["x"], ["y_" + op])], op, [],
...                                   [h.make_tensor_value_info("y_" + op, onnx.TensorProto.FLOAT, None)])
>>> g = h.make_graph([h.make_node("If", ["flag"], ["y"], then_branch=branch("Neg"), else_branch=branch("Abs"))],
...                  "g", [h.make_tensor_value_info("flag", onnx.TensorProto.BOOL, []),
...                        h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
...                  [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
>>> program = Program(g, {"": 18})
>>> [(s.spec.op_type, s.inputs, s.outputs) for s in inline_branches(program, {"flag": False}).steps]
[('Abs', ('x',), ('y',))]
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection, Mapping

from .graph import Program, Step
from .ops.registry import DEFAULT_DOMAIN, resolve


def inline_branches(program: Program, flags: Mapping[str, bool]) -> Program:
    """``program`` with each If whose condition is one of ``flags`` (graph inputs, each a constant of the
    signature) replaced by the branch it takes; ``program`` itself when it has none."""
    if not any(_taken_branch(step, flags) is not None for step in program.steps):
        return program
    variant = copy.copy(program)
    variant.initializers = dict(program.initializers)
    # the weights' device copies are shared; a value computed from constants is cached by its name, and the two
    # branches of an export give one name to different values (each layer's position bias, a scale)
    variant.device_constants = {k: v for k, v in program.device_constants.items() if k[0] in program.initializers}
    variant.steps = []
    outer = _names(program)
    for step in program.steps:
        body = _taken_branch(step, flags)
        inlined = None if body is None else _inline(variant, step, inline_branches(program.subprogram(body), flags),
                                                    outer)
        variant.steps.extend([step] if inlined is None else inlined)
        outer.update(o for s in inlined or () for o in s.outputs)
        outer.update(variant.initializers)
    return variant


def is_if_on(step: Step, names: Collection[str]) -> bool:
    """Whether ``step`` is an If whose condition is one of ``names`` (graph inputs that may be flags)."""
    return step.spec.op_type == "If" and step.spec.domain == DEFAULT_DOMAIN and step.inputs[0] in names


def _taken_branch(step: Step, flags: Mapping[str, bool]):
    return step.subgraphs["then_branch" if flags[step.inputs[0]] else "else_branch"] if is_if_on(step, flags) else None


def _names(program: Program) -> set[str]:
    """Every value name a program holds: inputs, initializers, step inputs and outputs, and those its
    subgraphs read from it."""
    names = set(program.input_names) | set(program.initializers)
    for step in program.steps:
        names.update(step.inputs, step.outputs, step.captures)
    return names


def _inline(variant: Program, node: Step, branch: Program, outer: set[str]) -> list[Step] | None:
    """The steps that replace the If ``node`` by ``branch`` in ``variant`` (whose initializers take the branch's);
    None where a subgraph inside the branch reads a name that had to be renamed."""
    made = {o for s in branch.steps for o in s.outputs if o}
    rename = {n: f"{n}::{node.name}" for n in (made | set(branch.initializers)) & outer}
    given: dict[str, str] = {}  # a branch value -> the If output it becomes (the first one, if output twice)
    passed = []  # (value, If output) pairs that an Identity joins: outer values, constants, a value output twice
    for result, name in zip(node.outputs, branch.output_names):
        if result and name in made and name not in given:
            given[name] = result
        elif result:
            passed.append((given.get(name) or rename.get(name, name), result))
    rename.update(given)
    if any(n in rename for s in branch.steps for n in s.captures):
        return None
    for name, value in branch.initializers.items():
        variant.initializers[rename.get(name, name)] = value
    steps = [dataclasses.replace(s, inputs=tuple(rename.get(n, n) for n in s.inputs),
                                 outputs=tuple(rename.get(n, n) for n in s.outputs)) for s in branch.steps]
    identity = resolve(DEFAULT_DOMAIN, "Identity", variant.opsets.get(DEFAULT_DOMAIN, 1))
    return steps + [Step(f"{node.name}/{result}", identity, {}, (value,), (result,), {}) for value, result in passed]
