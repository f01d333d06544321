"""Task pipelines: ``pipeline(task, model, **options)`` over one task table (tasks.py).

>>> import transmuter_mlx as tm
>>> sst2 = "Xenova/distilbert-base-uncased-finetuned-sst-2-english"
>>> pipe = tm.pipeline("sentiment-analysis", sst2)
>>> pipe.task, pipe("I love this")
('text-classification', {'predictions': [{'label': ..., 'score': ...}]})
>>> resolve_task("ner")
'token-classification'
"""

from __future__ import annotations

from typing import Any

from .base import Pipeline
from .tasks import ALIASES, TASKS, Task

__all__ = ["ALIASES", "TASKS", "Pipeline", "Task", "UnknownTaskError", "pipeline", "resolve_task"]


class UnknownTaskError(ValueError):
    """A task name that is neither in the task table nor an alias."""


def resolve_task(task: str) -> str:
    """The table name of a task or alias; an UnknownTaskError listing the valid names otherwise."""
    name = ALIASES.get(task, task) if isinstance(task, str) else task
    if name not in TASKS:
        raise UnknownTaskError(
            f"unknown task {task!r}; valid tasks: {', '.join(TASKS)}; aliases: {', '.join(ALIASES)}"
        )
    return name


def pipeline(task: str, model: Any = None, /, **options: Any) -> Pipeline:
    """Build the pipeline of ``task`` on ``model`` (a repo id, a folder; the task's default when None).

    >>> embed = pipeline("feature-extraction", "Xenova/all-MiniLM-L6-v2",
    ...                  compile={"batch_size": 8})
    >>> [e["embedding"].shape for e in embed(["a cat", "a dog", "a bird"])]   # one compiled batch of 8 rows
    [(384,), (384,), (384,)]

    ``options`` are the options of all tasks (``compile``, ``backend``, ``device``, ``dtype``,
    ``variant``, ``cache_dir``, ``revision``, ``offline``, ``model``/``tokenizer`` loaded by
    hand) and the task's own; an unknown one raises a TypeError naming it.
    """
    return TASKS[resolve_task(task)].cls(model, **options)
