"""The models a server holds: each a pipeline behind its own ``tm.Serving``, with a bounded queue.

>>> import transmuter_mlx as tm
>>> served = ServedModel("upper", "text-classification", tm.Serving(lambda xs: xs), max_queue=1)
>>> with served.admit():
...     served.queue_depth
1
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..generation.continuous import ContinuousBatcher
from ..pipelines import pipeline, resolve_task
from ..serving import Serving
from .errors import BadRequest, NotFound, QueueFull

__all__ = ["ModelRegistry", "ServedModel", "batcher_for", "count_tokens", "parse_model_specs"]

RETRY_AFTER_S = 1  # what a 429 tells the client to wait


@dataclass
class ServedModel:
    """One model: its id in requests (the MODEL string as given), its task, its Serving and queue bound."""

    id: str
    task: str
    serving: Serving | ContinuousBatcher
    max_queue: int = 256
    _in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def pipe(self) -> Any:
        return self.serving.pipe

    @property
    def queue_depth(self) -> int:
        """Requests admitted and not yet answered."""
        return self._in_flight

    @contextmanager
    def admit(self, count: int = 1) -> Iterator[None]:
        """Holds ``count`` places of the queue for the block; a QueueFull (429) when they are not free."""
        with self._lock:
            if self._in_flight + count > self.max_queue:
                raise QueueFull(f"model {self.id!r} has {self._in_flight} requests waiting (--max-queue "
                                f"{self.max_queue}); retry later", headers={"Retry-After": str(RETRY_AFTER_S)})
            self._in_flight += count
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= count

    # what the endpoints read from the model besides its results (a Ray deployment answers them remotely)
    async def count_tokens(self, texts: list[Any]) -> int:
        """The tokens of ``texts`` (strings or pairs) as the pipeline's tokenizer counts them (0: no tokenizer)."""
        return count_tokens(self.pipe, texts)

    async def default_max_new_tokens(self) -> int | None:
        """The new tokens a generation request gets when it does not say (generation_config.json's)."""
        return getattr(getattr(self.pipe, "generation", None), "max_new_tokens", None)

    async def sampling_rate(self) -> int:
        """The rate a speech model takes its audio at."""
        return int(self.pipe.recognizer.sampling_rate)

    def gauges(self) -> dict[str, float]:
        stats = self.serving.stats
        return {"queue_depth": self.queue_depth, "batches": stats.batches, "batch_inputs": stats.inputs}


def batcher_for(pipe: Any, batch_timeout_ms: float = 10, continuous: bool = True) -> Serving | ContinuousBatcher:
    """Text generation and text-to-text: a :class:`ContinuousBatcher` (requests join the running batch;
    ``continuous=False``: batch at a time); any other task: a ``tm.Serving`` that gathers concurrent calls for up to
    ``batch_timeout_ms``."""
    if continuous and callable(getattr(pipe, "row_input", None)):  # the generation tasks
        return ContinuousBatcher(pipe)
    return Serving(pipe, batch_timeout_ms=batch_timeout_ms)


def count_tokens(pipe: Any, texts: list[Any]) -> int:
    """The tokens of ``texts`` as the pipeline's tokenizer counts them (0 when it has none)."""
    tokenizer = getattr(pipe, "tokenizer", None)
    if tokenizer is None or not texts:
        return 0
    try:
        return int(np.asarray(tokenizer.encode(texts).attention_mask).sum())
    except Exception:  # noqa: BLE001 - usage is informative; a tokenizer that cannot count gives 0
        return 0


def parse_model_specs(specs: Sequence[str]) -> list[tuple[str, str]]:
    """``["text-embedding=Xenova/all-MiniLM-L6-v2", ...]`` -> ``[(task, model), ...]`` (tasks resolved)."""
    pairs = []
    for spec in specs:
        task, sep, model = spec.partition("=")
        if not sep or not task or not model:
            raise ValueError(f"expected TASK=MODEL (e.g. text-embedding=Xenova/all-MiniLM-L6-v2), got {spec!r}")
        pairs.append((resolve_task(task), model))
    return pairs


class ModelRegistry:
    """The served models by id; ``find(id, tasks)`` picks the one a request names."""

    def __init__(self, models: Sequence[ServedModel]) -> None:
        self.models: dict[str, ServedModel] = {}
        for m in models:
            if m.id in self.models:
                raise ValueError(f"model {m.id!r} is given twice; serve each model once")
            self.models[m.id] = m

    @classmethod
    def load(cls, pairs: Sequence[tuple[str, str]], *, max_queue: int = 256, batch_timeout_ms: float = 10,
             options: Mapping[str, Any] | None = None, continuous: bool = True) -> ModelRegistry:
        """Each ``(task, model)`` built as a pipeline (with ``options``) behind its own batcher
        (:func:`batcher_for`)."""
        served = []
        for task, model in pairs:
            pipe = pipeline(task, model, **dict(options or {}))
            served.append(ServedModel(model, task, batcher_for(pipe, batch_timeout_ms, continuous),
                                      max_queue=max_queue))
        return cls(served)

    def find(self, model_id: Any, tasks: Sequence[str], endpoint: str) -> ServedModel:
        """The model a request names (``model_id``; None: the only model of ``tasks``), checked to serve one of
        ``tasks``."""
        if model_id is None:
            fitting = [m for m in self.models.values() if m.task in tasks]
            if len(fitting) == 1:
                return fitting[0]
            raise BadRequest(f"model is required: {endpoint} is served by "
                             f"{[m.id for m in fitting] or 'no model of this server'}", param="model")
        if not isinstance(model_id, str):
            raise BadRequest(f"model must be a string, not {type(model_id).__name__}", param="model")
        served = self.models.get(model_id)
        if served is None:
            raise NotFound(f"model {model_id!r} is not served here; models: {sorted(self.models)}", param="model",
                           code="model_not_found")
        if served.task not in tasks:
            raise BadRequest(f"model {model_id!r} runs {served.task}; {endpoint} needs a model of "
                             f"{' or '.join(tasks)}", param="model")
        return served

    def close(self) -> None:
        """Finishes the queued calls and stops every Serving."""
        for m in self.models.values():
            m.serving.close()
