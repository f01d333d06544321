"""Sequence and optional ops. A sequence is a Python list of arrays; an absent optional is None."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import register


def _position(position: np.ndarray | None, length: int, default: int) -> int:
    if position is None:
        return default
    p = int(np.asarray(position).reshape(-1)[0])
    if not -length <= p <= length:
        raise IndexError(f"sequence position {p} is out of range for a sequence of {length}")
    return p + length if p < 0 else p


@register("SequenceConstruct", 11)
def sequence_construct_11(B: Any, *inputs: Any) -> list[Any]:
    return list(inputs)


@register("SequenceEmpty", 11)
def sequence_empty_11(B: Any, *, dtype: int = 1) -> list[Any]:
    return []


@register("SequenceInsert", 11, static_inputs=(2,))
def sequence_insert_11(
    B: Any, input_sequence: list[Any], tensor: Any, position: np.ndarray | None = None
) -> list[Any]:
    seq = list(input_sequence)
    seq.insert(_position(position, len(seq), len(seq)), tensor)
    return seq


@register("SequenceAt", 11, static_inputs=(1,))
def sequence_at_11(B: Any, input_sequence: list[Any], position: np.ndarray) -> Any:
    p = _position(position, len(input_sequence), 0)
    if p == len(input_sequence):
        raise IndexError(f"sequence position {p} is out of range for a sequence of {p}")
    return input_sequence[p]


@register("SequenceErase", 11, static_inputs=(1,))
def sequence_erase_11(B: Any, input_sequence: list[Any], position: np.ndarray | None = None) -> list[Any]:
    seq = list(input_sequence)
    p = _position(position, len(seq), len(seq) - 1)
    del seq[p]
    return seq


@register("SequenceLength", 11, shape_only=True)
def sequence_length_11(B: Any, input_sequence: list[Any]) -> np.ndarray:
    return np.array(len(input_sequence), dtype=np.int64)


@register("SplitToSequence", 11, static_inputs=(1,))
def split_to_sequence_11(
    B: Any, input: Any, split: np.ndarray | None = None, *, axis: int = 0, keepdims: int = 1
) -> list[Any]:
    n = B.shape(input)[axis]
    axis = axis % len(B.shape(input))
    if split is None:
        parts = B.split(input, [1] * n, axis) if n else []
        return [B.squeeze(p, (axis,)) for p in parts] if not keepdims else parts
    split = np.asarray(split)
    if split.ndim == 0:  # equal chunks of this size, the last one smaller
        chunk = int(split)
        sizes = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
    else:
        sizes = [int(s) for s in split]
    return B.split(input, sizes, axis)


@register("ConcatFromSequence", 11)
def concat_from_sequence_11(B: Any, input_sequence: list[Any], *, axis: int, new_axis: int = 0) -> Any:
    if new_axis:
        return B.stack(input_sequence, axis)
    return B.concatenate(input_sequence, axis)


@register("Optional", 15)
def optional_15(B: Any, input: Any = None, *, type: Any = None) -> Any:
    return input


@register("OptionalHasElement", 15, shape_only=True)
def optional_has_element_15(B: Any, input: Any = None) -> np.ndarray:
    return np.array(input is not None)


@register("OptionalGetElement", 15)
def optional_get_element_15(B: Any, input: Any) -> Any:
    if input is None:
        raise ValueError("OptionalGetElement of an empty optional")
    return input
