"""The text task pipelines, one module each (text_*.py), gathered here.

>>> from transmuter_mlx.pipelines.text import TextClassification
>>> TextClassification.task
'text-classification'
"""

from __future__ import annotations

from .text_classification import TextClassification, TextRanking
from .text_embedding import TextEmbedding
from .text_fill_mask import FillMask
from .text_qa import QuestionAnswering
from .text_tokens import TokenClassification
from .text_zero_shot import ZeroShotClassification
from .text_zero_shot_entities import ZeroShotEntityRecognition

__all__ = [
    "FillMask",
    "QuestionAnswering",
    "TextClassification",
    "TextEmbedding",
    "TextRanking",
    "TokenClassification",
    "ZeroShotClassification",
    "ZeroShotEntityRecognition",
]
