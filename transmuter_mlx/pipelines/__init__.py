"""Task pipelines: ``pipeline(task, model, **options)`` over one task table.

>>> import transmuter_mlx as tm
>>> sst2 = "Xenova/distilbert-base-uncased-finetuned-sst-2-english"
>>> pipe = tm.pipeline("sentiment-analysis", sst2)             # doctest: +SKIP
>>> pipe("I love this")                                          # doctest: +SKIP
{'predictions': [{'label': 'POSITIVE', 'score': 0.9998}]}
>>> resolve_task("ner")
'token-classification'
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .base import Pipeline
from .text import (
    FillMask,
    QuestionAnswering,
    TextClassification,
    TextEmbedding,
    TextRanking,
    TokenClassification,
    ZeroShotClassification,
)
from .text_generation import TextGeneration
from .text_to_text import Summarization, TextToText, Translation

__all__ = ["ALIASES", "TASKS", "Pipeline", "Task", "UnknownTaskError", "pipeline", "resolve_task"]


@dataclass(frozen=True)
class Task:
    """A row of the task table: the pipeline class, its modality and the repository used by default."""

    cls: type[Pipeline]
    modality: str
    default_model: str


TASKS: MappingProxyType[str, Task] = MappingProxyType(
    {
        "text-embedding": Task(TextEmbedding, "text", "Xenova/all-MiniLM-L6-v2"),
        "text-classification": Task(
            TextClassification, "text", "Xenova/distilbert-base-uncased-finetuned-sst-2-english"
        ),
        "text-ranking": Task(TextRanking, "text", "Xenova/ms-marco-MiniLM-L-6-v2"),
        "zero-shot-classification": Task(
            ZeroShotClassification, "text", "Xenova/distilbert-base-uncased-mnli"
        ),
        "token-classification": Task(TokenClassification, "text", "Xenova/bert-base-NER"),
        "fill-mask": Task(FillMask, "text", "Xenova/bert-base-uncased"),
        "question-answering": Task(QuestionAnswering, "text", "Xenova/distilbert-base-cased-distilled-squad"),
        "text-generation": Task(TextGeneration, "text", "onnx-community/Qwen3-0.6B-ONNX"),
        "text2text-generation": Task(TextToText, "text", "Xenova/flan-t5-small"),
        "translation": Task(Translation, "text", "Xenova/t5-small"),
        "summarization": Task(Summarization, "text", "Xenova/distilbart-cnn-6-6"),
    }
)

ALIASES: MappingProxyType[str, str] = MappingProxyType(
    {
        "feature-extraction": "text-embedding",
        "sentence-similarity": "text-embedding",
        "embeddings": "text-embedding",
        "sentiment-analysis": "text-classification",
        "reranking": "text-ranking",
        "ner": "token-classification",
        # the snake_case names of the task functions (tm.text.*)
        "text_embedding": "text-embedding",
        "text_classification": "text-classification",
        "text_ranking": "text-ranking",
        "zero_shot_classification": "zero-shot-classification",
        "token_classification": "token-classification",
        "fill_mask": "fill-mask",
        "question_answering": "question-answering",
        "text_to_text": "text2text-generation",
        "generation": "text-generation",
    }
)


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
    ...                  compile={"batch_size": 8})              # doctest: +SKIP

    ``options`` are the options of all tasks (``compile``, ``backend``, ``device``, ``dtype``,
    ``variant``, ``cache_dir``, ``revision``, ``offline``, ``model``/``tokenizer`` loaded by
    hand) and the task's own; an unknown one raises a TypeError naming it.
    """
    return TASKS[resolve_task(task)].cls(model, **options)
