"""The one batcher of every pipeline: bucket -> fill a partial batch -> run -> cut.

>>> fill([7, 8], 4)
[7, 8, 7, 7]

``run_batched`` groups rows (features) by the compiled shape that holds them (``processor.bucket``), runs
them ``batch_size`` at a time (a partial batch filled with copies of its first row, so every call runs one
of a few compiled shapes), and gives each row its outputs, cut back to its own positions. The generating
pipelines fill their partial batches with the same ``fill``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ..processors import Bucket, Processor

__all__ = ["chunks", "fill", "run_batched"]

T = TypeVar("T")


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """``items`` in consecutive pieces of at most ``size``."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def fill(batch: Sequence[T], size: int) -> list[T]:
    """``batch`` filled to ``size`` with copies of its first element (their results are dropped)."""
    return list(batch) + [batch[0]] * (size - len(batch))


def run_batched(rows: Sequence[Any], processor: Processor, run: Callable[[dict[str, np.ndarray]], Mapping[str, Any]],
                batch_size: int, per_position: bool = True) -> list[dict[str, np.ndarray]]:
    """Each row's outputs (by name), from ``run(feeds)`` on batches of ``batch_size`` rows of one bucket;
    ``per_position`` outputs (token states, not pooled logits) are cut back to the row's positions."""
    buckets: dict[Bucket, list[int]] = {}
    for i, row in enumerate(rows):
        buckets.setdefault(processor.bucket(row), []).append(i)
    results: list[dict[str, np.ndarray]] = [{} for _ in rows]
    for bucket, indices in sorted(buckets.items()):
        for chunk in chunks(indices, batch_size):
            outputs = run(processor.collate(fill([rows[i] for i in chunk], batch_size), bucket))
            for j, i in enumerate(chunk):
                results[i] = {k: processor.cut(v[j], rows[i], bucket) if per_position else v[j]
                              for k, v in outputs.items()}
    return results
