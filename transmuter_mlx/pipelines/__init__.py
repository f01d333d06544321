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

from ..hub import open_repo
from .base import SOURCE_TYPES, Pipeline
from .task_inference import TaskInferenceError, infer_task
from .tasks import ALIASES, TASKS, Task

__all__ = ["ALIASES", "TASKS", "Pipeline", "Task", "TaskInferenceError", "UnknownTaskError", "infer_task",
           "pipeline", "resolve_task"]


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


def pipeline(task: str | None = None, model: Any = None, /, **options: Any) -> Pipeline:
    """Build the pipeline of ``task`` on ``model`` (a repo id, a folder; the task's default when None).

    >>> embed = pipeline("feature-extraction", "Xenova/all-MiniLM-L6-v2",
    ...                  compile={"batch_size": 8})
    >>> [e["embedding"].shape for e in embed(["a cat", "a dog", "a bird"])]   # one compiled batch of 8 rows
    [(384,), (384,), (384,)]

    ``options`` are the options of all tasks (``compile``, ``backend``, ``device``, ``dtype``,
    ``variant``, ``cache_dir``, ``revision``, ``offline``, ``model``/``tokenizer`` loaded by
    hand) and the task's own; an unknown one raises a TypeError naming it.

    Without a task, the task is inferred from the repository (``infer_task``: its model card, config.json's
    architectures, its files), as transformers' ``pipeline(model=...)`` asks the Hub:

    >>> pipeline(model="Xenova/bert-base-uncased").task, pipeline(None, "Xenova/gpt2").task
    ('fill-mask', 'text-generation')
    """
    if task is None:
        source = model if model is not None else options.get("model")
        if not isinstance(source, SOURCE_TYPES):
            raise ValueError("pipeline() needs a task or a model repository (a repo id or a folder) to infer "
                             f"it from; valid tasks: {', '.join(TASKS)}")
        repo = open_repo(source, revision=options.get("revision"), cache_dir=options.get("cache_dir"),
                         offline=options.get("offline"))
        task = infer_task(repo)
        if model is not None:
            model = repo
        else:
            options["model"] = repo
    return TASKS[resolve_task(task)].cls(model, **options)
