"""Outputs computed at the last position only: a decoder's logits, where the caller reads the last token's.

A prompt of L tokens makes logits of (batch, L, vocab); the language-model head is about a fifth of a prefill's
work at SmolLM2-135M's size, spent on L - 1 rows nobody reads (transformers computes only the last one:
``logits_to_keep``). ``last_position(program, names)`` is the program whose outputs ``names`` hold position
L - 1 of axis 1 alone: where an output is the head's product (``MatMul`` of the hidden state by a 2-D weight,
or its fused or 4-bit forms) followed only by row-wise ops (a Cast, a soft cap: element-wise with constants of
at most one axis), a Slice of the hidden state goes before the product. ``Model`` slices any other output
after the run (the same values, without the saving).

>>> import transmuter_mlx as tm
>>> from transmuter_mlx.hub import open_repo
>>> model = tm.load(open_repo("Xenova/gpt2").onnx_path())              # doctest: +SKIP
>>> feeds = {...}                                                      # doctest: +SKIP
>>> model(feeds, last_position=["logits"])["logits"].shape             # doctest: +SKIP
(1, 1, 50257)
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from collections.abc import Collection, Mapping

import numpy as np

from .graph import Program, Step
from .ops.fused import FUSED_DOMAIN
from .ops.registry import DEFAULT_DOMAIN, MS_DOMAIN, resolve

# element-wise ops that act on each position alone, with a constant of at most one axis (the vocabulary's)
_ROW_WISE = {"Cast", "Identity", "Tanh", "Sigmoid", "Neg", "Relu", "Exp", "Log", "Abs", "Add", "Sub", "Mul", "Div"}
# products whose input 0 is (batch, length, width) and whose other inputs are weights: (domain, op_type)
_PRODUCTS = {(DEFAULT_DOMAIN, "MatMul"), (FUSED_DOMAIN, "MatMulAdd"), (MS_DOMAIN, "MatMulNBits")}


def last_position(program: Program, names: Collection[str], ranks: Mapping[str, int | None]) -> tuple[Program, set[str]]:
    """``program`` with each of ``names`` (outputs with positions on axis 1) computed at the last position only where
    its head allows it, and the names it could not rewrite (the caller slices those after the run). ``ranks``: the
    outputs' declared ranks; only one of rank 3 or more is rewritten (axis 1 of a 2-D product's input is the
    axis it sums over)."""
    variant = copy.copy(program)
    variant.steps = list(program.steps)
    variant.initializers = dict(program.initializers)
    left = set()
    for name in names:
        if (ranks.get(name) or 0) < 3 or not _rewrite(variant, name):
            left.add(name)
    return variant, left


def _rewrite(program: Program, output: str) -> bool:
    """Put a Slice of the last position before the product that ``output`` comes from; False where it does not."""
    steps = program.steps
    producer = {o: i for i, s in enumerate(steps) for o in s.outputs if o}
    readers = collections.Counter(n for s in steps for n in (*s.inputs, *s.captures) if n)
    readers.update(program.output_names)
    value = output
    if readers[output] != 1:  # read by a node as well: that node must see every position
        return False
    while value in producer:
        index = producer[value]
        step = steps[index]
        if (step.spec.domain, step.spec.op_type) in _PRODUCTS:
            return _slice_before(program, index, output) if _is_matrix(program, step) else False
        if step.spec.domain != DEFAULT_DOMAIN or step.spec.op_type not in _ROW_WISE:
            return False
        data = [n for n in step.inputs if n and not _small_constant(program, producer, n)]
        if len(data) != 1 or readers[data[0]] != 1:  # a value also read elsewhere must stay whole
            return False
        value = data[0]
    return False


def _slice_before(program: Program, index: int, output: str) -> bool:
    step = program.steps[index]
    hidden, last = step.inputs[0], f"{step.inputs[0]}::last_position"
    constants = {"starts": -1, "ends": np.iinfo(np.int64).max, "axes": 1}
    names = []
    for key, v in constants.items():
        names.append(f"{output}::last_position_{key}")
        program.initializers[names[-1]] = np.array([v], np.int64)
    spec = resolve(DEFAULT_DOMAIN, "Slice", max(program.opsets.get(DEFAULT_DOMAIN, 13), 13))
    cut = Step(f"{step.name}/last_position", spec, {}, (hidden, *names), (last,), {})
    program.steps[index:index + 1] = [cut, dataclasses.replace(step, inputs=(last, *step.inputs[1:]))]
    return True


def _is_matrix(program: Program, step: Step) -> bool:
    """Whether the product's weight is 2-D, so its input 0 has the output's rank: a 2-D initializer, or the
    Transpose of one (a head tied to the embeddings); MatMulNBits' always is."""
    if step.spec.op_type == "MatMulNBits":
        return True
    name = step.inputs[1] if len(step.inputs) > 1 else ""
    made = next((s for s in program.steps if name in s.outputs), None)
    if made is not None and made.spec.op_type == "Transpose" and made.spec.domain == DEFAULT_DOMAIN:
        name = made.inputs[0]
    weight = program.initializers.get(name)
    return isinstance(weight, np.ndarray) and weight.ndim == 2


def _small_constant(program: Program, producer: dict[str, int], name: str) -> bool:
    """A constant (an initializer, or a Constant node's value) of at most one axis of more than one entry, the
    last: a scalar, or a vector over the vocabulary (Marian's final_logits_bias is (1, vocab))."""
    value = program.initializers.get(name)
    if value is None and name in producer:
        step = program.steps[producer[name]]
        if step.spec.op_type == "Constant" and step.spec.domain == DEFAULT_DOMAIN:
            value = next((step.attrs[k] for k in ("value", "value_float", "value_int") if k in step.attrs), None)
    return value is not None and np.ndim(value) <= 3 and int(np.prod(np.shape(value)[:-1])) == 1
