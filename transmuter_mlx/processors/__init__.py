"""Processors: what turns a task's inputs into model feeds, one protocol for text, images and audio.

>>> import transmuter_mlx as tm
>>> from transmuter_mlx.processors import Processor
>>> fill = tm.text.fill_mask("Xenova/bert-base-uncased")
>>> isinstance(fill.processor, Processor), fill.processor.kind
(True, 'tokenizer')

A task's ``preprocess`` turns one input into *features* (``Processor.preprocess``: a text into token
rows; next, an image into pixels, an audio clip into frames). The batcher (``pipelines/batching.py``)
groups features by ``bucket`` (the compiled shape that holds them: a sequence length today, an image
size or a frame count next), fills a partial batch (to the next power of two rows), ``collate``s it
into the feeds of one compiled shape and, after the model ran, ``cut``s each row's per-position
outputs back to its own positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Bucket", "Processor"]

Bucket = tuple[int, ...]  # a compiled shape, beyond the batch axis (a sequence length: (128,))


@runtime_checkable
class Processor(Protocol):
    """Features of one input, and the padded feeds of a batch of them (see the module docstring)."""

    kind: str  # "tokenizer", "image", "audio": the task table's processor kind

    def preprocess(self, item: Any, index: int) -> list[Any]:
        """The features (rows) of input ``index``; bad input is an error naming the index."""
        ...

    def bucket(self, features: Any) -> Bucket:
        """The compiled shape that holds ``features``."""
        ...

    def collate(self, batch: Sequence[Any], bucket: Bucket) -> dict[str, np.ndarray]:
        """The feeds of one batch of features, padded to ``bucket``."""
        ...

    def cut(self, value: np.ndarray, features: Any, bucket: Bucket) -> np.ndarray:
        """A batch row's output, with the positions that padding added removed."""
        ...
