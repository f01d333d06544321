"""The text tasks as functions, named as the spec names them; each returns a pipeline.

>>> import transmuter_mlx as tm
>>> embed = tm.text.text_embedding("Xenova/all-MiniLM-L6-v2")
>>> embed(["a cat", "a dog"])[0]["embedding"].shape
(384,)

Each function takes the repository (a Hub repo id or a local folder; the task's default model
when None) and the options of ``tm.pipeline``; see docs/text.md for each task's options and results.
There is one function per text row of the task table (``transmuter_mlx.pipelines.tasks.TASKS``,
whose ``function`` names it; tests/test_task_table.py checks that they agree).
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
    ZeroShotEntityRecognition,
)
from .pipelines.text_generation import TextGeneration
from .pipelines.text_to_text import Summarization, TextToText, Translation

__all__ = [
    "fill_mask",
    "generation",
    "question_answering",
    "summarization",
    "text_classification",
    "text_embedding",
    "text_ranking",
    "text_to_text",
    "token_classification",
    "translation",
    "zero_shot_classification",
    "zero_shot_entity_recognition",
]


def text_embedding(model: Any = None, /, **options: Any) -> TextEmbedding:
    """Sentence embeddings, pooled as sentence-transformers pools them.

    >>> embed = text_embedding("Xenova/all-MiniLM-L6-v2")
    >>> embed("a cat")["embedding"].shape
    (384,)
    """
    return pipeline("text-embedding", model, **options)


def text_classification(model: Any = None, /, **options: Any) -> TextClassification:
    """Labels of a text (or a text pair) with their scores, best first.

    >>> classify = text_classification("Xenova/distilbert-base-uncased-finetuned-sst-2-english")
    >>> classify("I love this")
    {'predictions': [{'label': ..., 'score': ...}]}
    """
    return pipeline("text-classification", model, **options)


def text_ranking(model: Any = None, /, **options: Any) -> TextRanking:
    """Documents ranked by their relevance to a query (a cross-encoder).

    >>> rank = text_ranking("Xenova/ms-marco-MiniLM-L-6-v2")
    >>> rank({"query": "Who lives in Berlin?", "documents": ["New York has museums.",
    ...       "Berlin has 3.5 million inhabitants."]})
    {'results': [{'index': ..., 'score': ...}, {'index': ..., 'score': ...}]}
    """
    return pipeline("text-ranking", model, **options)


def zero_shot_classification(
    model: Any = None, labels: Any = None, /, **options: Any
) -> ZeroShotClassification:
    """Scores of the labels you give for a text, from an NLI model.

    >>> classify = zero_shot_classification("Xenova/distilbert-base-uncased-mnli",
    ...                                     ["urgent", "phone", "tablet"])
    >>> sorted(p["label"] for p in classify("My phone broke")["predictions"])
    ['phone', 'tablet', 'urgent']
    """
    if labels is not None:
        options["labels"] = labels
    return pipeline("zero-shot-classification", model, **options)


def zero_shot_entity_recognition(
    model: Any = None, labels: Any = None, /, **options: Any
) -> ZeroShotEntityRecognition:
    """Entities of the labels you give, from a GLiNER model (span or token level).

    >>> find = zero_shot_entity_recognition("onnx-community/gliner_small-v2.1", ["person", "organization"])
    >>> entities = find("Cristiano Ronaldo plays for Al Nassr.")["entities"]
    >>> all(set(e) == {"start", "end", "label", "score", "phrase"} for e in entities)
    True
    """
    if labels is not None:
        options["labels"] = labels
    return pipeline("zero-shot-entity-recognition", model, **options)


def token_classification(model: Any = None, /, **options: Any) -> TokenClassification:
    """Named entities (a label per token, or per span with ``aggregation_strategy``).

    >>> ner = token_classification("Xenova/bert-base-NER", aggregation_strategy="simple")
    >>> ner("Hugging Face Inc. is in New York City.")["entities"][0]["label"] in ("PER", "ORG", "LOC", "MISC")
    True
    """
    return pipeline("token-classification", model, **options)


def fill_mask(model: Any = None, /, **options: Any) -> FillMask:
    """The best tokens for the mask token of a text.

    >>> fill = fill_mask("Xenova/bert-base-uncased")
    >>> len(fill("Paris is the [MASK] of France.")["predictions"])    # top_k=5 by default
    5
    """
    return pipeline("fill-mask", model, **options)


def question_answering(model: Any = None, /, **options: Any) -> QuestionAnswering:
    """Answers to a question, as spans of a context.

    >>> qa = question_answering("Xenova/distilbert-base-cased-distilled-squad")
    >>> context = "The tower is in Paris."
    >>> answer = qa({"question": "Where is the tower?", "context": context})["results"][0]
    >>> context.encode()[answer["start"]:answer["end"]].decode() == answer["text"]   # a span of the context
    True
    """
    return pipeline("question-answering", model, **options)


def text_to_text(model: Any = None, /, **options: Any) -> TextToText:
    """Text generated from text by an encoder-decoder (T5, Marian, NLLB, M2M100, BART).

    >>> translate = text_to_text("Xenova/opus-mt-en-de")
    >>> translate("The house is wonderful.")
    {'results': [{'text': '...', 'token_summary': {'input': ..., 'output': ..., 'padding': ...}}]}
    """
    return pipeline("text2text-generation", model, **options)


def translation(model: Any = None, /, **options: Any) -> Translation:
    """:func:`text_to_text` under transformers' task name (its default model: Xenova/t5-small).

    >>> translate = translation("Xenova/nllb-200-distilled-600M", source_language_token="eng_Latn",
    ...                         target_language_token="fra_Latn")
    >>> len(translate("The house is wonderful.", num_beams=2, num_return_sequences=2)["results"])
    2
    """
    return pipeline("translation", model, **options)


def summarization(model: Any = None, /, **options: Any) -> Summarization:
    """:func:`text_to_text` under transformers' task name (its default model: Xenova/distilbart-cnn-6-6).

    >>> summarize = summarization("Xenova/distilbart-cnn-6-6", max_new_tokens=40)
    >>> article = "The tower is 324 metres tall, about the same height as an 81-storey building."
    >>> summarize(article)["results"][0]["token_summary"]["output"] <= 40
    True
    """
    return pipeline("summarization", model, **options)


def generation(model: Any = None, /, **options: Any) -> TextGeneration:
    """Text generated by a decoder LM, from a prompt or chat messages.

    >>> chat = generation("onnx-community/Qwen2.5-0.5B-Instruct", max_new_tokens=32)
    >>> result = chat({"messages": [{"role": "user", "content": "Write a haiku about MLX."}]})["results"][0]
    >>> isinstance(result["text"], str), result["token_summary"]["output"] <= 32
    (True, True)
    """
    return pipeline("text-generation", model, **options)
