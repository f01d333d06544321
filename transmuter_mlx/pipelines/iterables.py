"""Pipelines over iterables: a generator, a dataset or any iterable of inputs gives its results lazily.

>>> import transmuter_mlx as tm
>>> embed = tm.text.text_embedding("Xenova/all-MiniLM-L6-v2")
>>> results = embed(f"sentence {i}" for i in range(1000))    # a generator in: nothing has run yet
>>> next(results)["embedding"].shape                          # the first batch runs when it is asked for
(384,)
>>> sum(1 for _ in results)
999

As transformers' ``pipe(KeyDataset(dataset, "text"), batch_size=8)``: the inputs are read ``batch_size`` at a
time (a call option; default the pipeline's ``compile`` batch size), each batch runs as one call of the pipeline
(the model runs it in batches of that size), and its results are yielded in order before the next batch is
read, so a generator of a million texts runs in the memory of one batch. ``progress=True`` shows a progress bar
(tqdm, on stderr; with the count of inputs when the iterable has a length). A list or tuple in still gives a
list out; ``batch_size`` and ``progress`` apply to it too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any

__all__ = ["RUN_OPTIONS", "is_iterable_input", "iterate"]

#: options of a call that say how to run it, not what to compute (every task takes them)
RUN_OPTIONS = ("batch_size", "progress")

#: values that are one input though Python can iterate them
_ONE_INPUT = (str, bytes, bytearray, Mapping, os.PathLike)


def is_iterable_input(inputs: Any) -> bool:
    """Whether ``inputs`` is an iterable of inputs other than a list or tuple (a generator, an iterator, a
    dataset, or a dataset read by index): not a str, bytes, dict or path, and not an array (which Python can
    iterate row by row)."""
    if isinstance(inputs, (list, tuple, *_ONE_INPUT)) or hasattr(inputs, "shape") and hasattr(inputs, "dtype"):
        return False  # arrays (numpy, mx.array, torch.Tensor) are one input
    return isinstance(inputs, Iterable) or _map_style(inputs)


def _map_style(inputs: Any) -> bool:
    """A dataset read by index (torch's ``Dataset``, transformers' ``KeyDataset``): a length and items."""
    return hasattr(inputs, "__len__") and hasattr(inputs, "__getitem__")


def iterate(call: Any, inputs: Iterable[Any], batch_size: int, options: Mapping[str, Any],
            progress: bool = False) -> Iterator[Any]:
    """The results of ``call(batch, **options)`` for consecutive batches of ``batch_size`` inputs, one by one."""
    bar = _progress_bar(inputs) if progress else None
    items = (inputs[i] for i in range(len(inputs))) if not isinstance(inputs, Iterable) else iter(inputs)
    try:
        while batch := list(islice(items, batch_size)):
            for result in call(batch, **options):
                yield result
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _progress_bar(inputs: Any) -> Any:
    from tqdm.auto import tqdm  # a dependency of huggingface_hub

    try:
        total = len(inputs)
    except TypeError:
        total = None
    return tqdm(total=total, unit="input")
