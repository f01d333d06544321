"""Options shared by every task (the spec's "Options of all tasks"), checked by name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..converters.precision import compute_dtype
from ..hub import PreferredVariant

DEFAULT_SEQUENCE_LENGTHS = (32, 128, 512)


@dataclass(frozen=True)
class Compile:
    """The shapes a pipeline compiles for: rows per batch, and the padded text lengths."""

    batch_size: int = 1
    sequence_length: tuple[int, ...] = DEFAULT_SEQUENCE_LENGTHS

    @classmethod
    def parse(cls, value: Mapping[str, Any] | None) -> Compile:
        """``compile={"batch_size": n, "sequence_length": [a, b, ...]}`` (or None): not a mapping, or an
        unknown key, is a TypeError; a batch size or length that is not a positive int is a ValueError."""
        if value is not None and not isinstance(value, Mapping):
            raise TypeError(f"compile must be a dict such as {{'batch_size': 8, 'sequence_length': [128]}}, "
                            f"got {value!r} ({type(value).__name__})")
        value = dict(value or {})
        unknown = set(value) - {"batch_size", "sequence_length"}
        if unknown:
            raise TypeError(
                f"unknown compile option(s) {sorted(unknown)}; expected batch_size, sequence_length"
            )
        batch = positive_int("compile batch_size", value.get("batch_size", 1))
        lengths = value.get("sequence_length", DEFAULT_SEQUENCE_LENGTHS)
        if not isinstance(lengths, list | tuple) or not lengths:
            lengths = positive_int("compile sequence_length", lengths, "or a non-empty list of them")
            return cls(batch, (lengths,))
        name = f"each length of compile sequence_length {list(lengths)!r}"
        return cls(batch, tuple(sorted(positive_int(name, n) for n in lengths)))

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
    """Options of all tasks. ``extra`` holds the task's own options, already checked. ``dtype`` is a numpy dtype
    (float32, float16 or ml_dtypes' bfloat16) or None; ``dtype="float16"`` without ``variant`` makes ``variant`` a
    ``PreferredVariant("fp16")``: the repository's fp16 file when it has one."""

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
        try:  # a numpy dtype (np.float16, bfloat16 of ml_dtypes), or None; a bad one fails here, at build time
            kwargs["dtype"] = compute_dtype(given.get("dtype"))
        except ValueError as error:
            raise ValueError(f"{task}: {error}") from None
        if kwargs["dtype"] == np.float16 and given.get("variant") is None:
            kwargs["variant"] = PreferredVariant("fp16")  # the repository's fp16 file when it has one
        return cls(**kwargs, extra=extra)


def positive_int(name: str, value: Any, note: str = "") -> int:
    """``value`` as an int, when it is one (numpy ints too, not bools nor floats) and positive; else a
    ValueError naming ``name``, the value and what is allowed: ``positive_int("compile batch_size", 2.7)``."""
    if not isinstance(value, int | np.integer) or isinstance(value, bool | np.bool_) or value < 1:
        allowed = "a positive int" + (f" {note}" if note else "")
        raise ValueError(f"{name} must be {allowed}, got {value!r} ({type(value).__name__})")
    return int(value)


def check_counts(task: str, options: Mapping[str, Any], counts: Mapping[str, tuple[int, bool]]) -> None:
    """The integer options of a task (``counts``: name -> least value, whether None is allowed) among
    ``options``: an int at least that value, or a ValueError naming the task, the option and the value."""
    for name, (least, optional) in counts.items():
        value = options.get(name)
        if name not in options or (value is None and optional):
            continue
        if not isinstance(value, int | np.integer) or isinstance(value, bool | np.bool_) or value < least:
            allowed = f"an int >= {least}" + (" or None" if optional else "")
            raise ValueError(f"{task}: {name} must be {allowed}, got {value!r} ({type(value).__name__})")


def as_list(inputs: Any, single_types: tuple[type, ...]) -> tuple[list[Any], bool]:
    """``(items, batched)``: a list or tuple of inputs is a batch, anything else one input."""
    if isinstance(inputs, list) or (isinstance(inputs, tuple) and not isinstance(inputs, single_types)):
        return list(inputs), True
    return [inputs], False
