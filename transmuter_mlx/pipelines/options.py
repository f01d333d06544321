"""Options shared by every task (the spec's "Options of all tasks"), checked by name."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

DEFAULT_SEQUENCE_LENGTHS = (32, 128, 512)


@dataclass(frozen=True)
class Compile:
    """The shapes a pipeline compiles for: rows per batch, and the padded text lengths."""

    batch_size: int = 1
    sequence_length: tuple[int, ...] = DEFAULT_SEQUENCE_LENGTHS

    @classmethod
    def parse(cls, value: Mapping[str, Any] | None) -> Compile:
        value = dict(value or {})
        unknown = set(value) - {"batch_size", "sequence_length"}
        if unknown:
            raise TypeError(
                f"unknown compile option(s) {sorted(unknown)}; expected batch_size, sequence_length"
            )
        batch = int(value.get("batch_size", 1))
        if batch < 1:
            raise ValueError(f"compile batch_size must be >= 1, got {batch}")
        lengths = value.get("sequence_length", DEFAULT_SEQUENCE_LENGTHS)
        lengths = (lengths,) if isinstance(lengths, int) else tuple(sorted(int(n) for n in lengths))
        if not lengths or min(lengths) < 1:
            raise ValueError(f"compile sequence_length must be positive integers, got {lengths}")
        return cls(batch, lengths)

    def lengths_for(self, max_length: int | None) -> tuple[int, ...]:
        """The bucket lengths, limited to the model's maximum length (which becomes a bucket)."""
        if not max_length:
            return self.sequence_length
        kept = tuple(n for n in self.sequence_length if n < max_length)
        return kept + (max_length,) if len(kept) < len(self.sequence_length) else kept

    def bucket(self, length: int, max_length: int | None) -> int:
        """The smallest bucket that holds ``length`` tokens (the largest one truncates)."""
        lengths = self.lengths_for(max_length)
        for n in lengths:
            if length <= n:
                return n
        return lengths[-1]


@dataclass(frozen=True)
class Options:
    """Options of all tasks. ``extra`` holds the task's own options, already checked."""

    compile: Compile = field(default_factory=Compile)
    backend: str = "mlx"
    device: str | None = None
    dtype: Any = None
    variant: str | None = None
    cache_dir: str | None = None
    revision: str | None = None
    offline: bool | None = None
    model: Any = None
    tokenizer: Any = None
    featurizer: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, task: str, given: Mapping[str, Any], task_defaults: Mapping[str, Any]) -> Options:
        """Split ``given`` into common and task options; an unknown name is a TypeError."""
        common = {f.name for f in fields(cls)} - {"extra"}
        unknown = [k for k in given if k not in common and k not in task_defaults]
        if unknown:
            valid = sorted(common | set(task_defaults))
            raise TypeError(f"{task}: unknown option(s) {unknown}; valid options are {valid}")
        extra = {**task_defaults, **{k: v for k, v in given.items() if k in task_defaults}}
        kwargs = {k: v for k, v in given.items() if k in common}
        kwargs["compile"] = Compile.parse(given.get("compile"))
        return cls(**kwargs, extra=extra)


def warn_truncated(task: str, length: int, limit: int) -> None:
    warnings.warn(f"{task}: an input of {length} tokens was truncated to {limit}", stacklevel=4)


def as_list(inputs: Any, single_types: tuple[type, ...]) -> tuple[list[Any], bool]:
    """``(items, batched)``: a list or tuple of inputs is a batch, anything else one input."""
    if isinstance(inputs, list) or (isinstance(inputs, tuple) and not isinstance(inputs, single_types)):
        return list(inputs), True
    return [inputs], False


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
