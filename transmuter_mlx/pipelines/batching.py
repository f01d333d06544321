"""The one batcher of every pipeline: bucket -> fill a partial batch -> run -> cut.

>>> fill([7, 8], 4)
[7, 8, 7, 7]
>>> [batch_rows(n, 32) for n in (1, 3, 9, 32)], batch_rows(5, 6)
([1, 4, 16, 32], 6)

``run_batched`` groups rows (features) by the compiled shape that holds them (``processor.bucket``), runs
them ``batch_size`` at a time, and gives each row its outputs, cut back to its own positions. A partial
batch is filled with copies of its first row up to the next power of two (``batch_rows``), not to
``batch_size``: the model compiles a few shapes per bucket (at most log2(batch_size) + 1), and three
long texts left over at ``batch_size: 32`` run as 4 rows, not 32. The generating pipelines fill their
partial batches to ``batch_size`` with the same ``fill`` (their KV cache has that many rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ..processors import Bucket, Processor

__all__ = ["batch_rows", "chunks", "fill", "run_batched"]

T = TypeVar("T")


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """``items`` in consecutive pieces of at most ``size``."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def fill(batch: Sequence[T], size: int) -> list[T]:
    """``batch`` filled to ``size`` with copies of its first element (their results are dropped)."""
    return list(batch) + [batch[0]] * (size - len(batch))


def batch_rows(count: int, batch_size: int) -> int:
    """The rows a batch of ``count`` inputs runs with: the next power of two, at most ``batch_size``."""
    return min(1 << (count - 1).bit_length(), batch_size)


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
            batch = fill([rows[i] for i in chunk], batch_rows(len(chunk), batch_size))
            outputs = run(processor.collate(batch, bucket))
            for j, i in enumerate(chunk):
                results[i] = {k: processor.cut(v[j], rows[i], bucket) if per_position else v[j]
                              for k, v in outputs.items()}
    return results
