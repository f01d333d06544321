"""The text tasks as functions, named as the spec names them; each returns a pipeline.

>>> import transmuter_mlx as tm
>>> embed = tm.text.text_embedding("Xenova/all-MiniLM-L6-v2")      # doctest: +SKIP
>>> embed(["a cat", "a dog"])[0]["embedding"].shape                 # doctest: +SKIP
(384,)

Each function takes the repository (a Hub repo id or a local folder; the task's default model
when None) and the options of ``tm.pipeline``; see docs/text.md for each task's options and results.
The spec's ``zero_shot_entity_recognition`` (GLiNER) is not implemented yet.
"""

from __future__ import annotations

from typing import Any

from .pipelines import pipeline
from .pipelines.text import (
    FillMask,
    QuestionAnswering,
    TextClassification,
    TextEmbedding,
    TextRanking,
    TokenClassification,
    ZeroShotClassification,
)
from .pipelines.text_generation import TextGeneration
from .pipelines.text_to_text import TextToText

__all__ = [
    "fill_mask",
    "generation",
    "question_answering",
    "text_classification",
    "text_embedding",
    "text_ranking",
    "text_to_text",
    "token_classification",
    "zero_shot_classification",
]


def text_embedding(model: Any = None, /, **options: Any) -> TextEmbedding:
    """``text_embedding("Xenova/all-MiniLM-L6-v2")("a cat")`` -> ``{"embedding": mx.array}``."""
    return pipeline("text-embedding", model, **options)


def text_classification(model: Any = None, /, **options: Any) -> TextClassification:
    """``text_classification(repo)("I love this")`` -> ``{"predictions": [{"label", "score"}]}``."""
    return pipeline("text-classification", model, **options)


def text_ranking(model: Any = None, /, **options: Any) -> TextRanking:
    """``text_ranking(repo)({"query": q, "documents": [d0, d1]})`` -> ``{"results": [...]}``."""
    return pipeline("text-ranking", model, **options)


def zero_shot_classification(
    model: Any = None, labels: Any = None, /, **options: Any
) -> ZeroShotClassification:
    """``zero_shot_classification(repo, ["urgent", "phone"])("My phone broke")`` -> predictions."""
    if labels is not None:
        options["labels"] = labels
    return pipeline("zero-shot-classification", model, **options)


def token_classification(model: Any = None, /, **options: Any) -> TokenClassification:
    """``token_classification(repo, aggregation_strategy="simple")(text)`` -> ``{"entities": [...]}``."""
    return pipeline("token-classification", model, **options)


def fill_mask(model: Any = None, /, **options: Any) -> FillMask:
    """``fill_mask(repo)("Paris is the [MASK] of France.")`` -> ``{"predictions": [...]}``."""
    return pipeline("fill-mask", model, **options)


def question_answering(model: Any = None, /, **options: Any) -> QuestionAnswering:
    """``question_answering(repo)({"question": q, "context": c})`` -> ``{"results": [...]}``."""
    return pipeline("question-answering", model, **options)


def text_to_text(model: Any = None, /, **options: Any) -> TextToText:
    """``text_to_text("Xenova/opus-mt-en-de")("The house is wonderful.")`` -> ``{"results": [{"text", ...}]}``."""
    return pipeline("text2text-generation", model, **options)


def generation(model: Any = None, /, **options: Any) -> TextGeneration:
    """``generation(repo, max_new_tokens=32)({"messages": [...]})`` -> ``{"results": [{"text", ...}]}``."""
    return pipeline("text-generation", model, **options)
