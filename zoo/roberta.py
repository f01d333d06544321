"""RoBERTa and its kin (XLM-RoBERTa, CamemBERT, MPNet, Longformer, ...): BERT encoders whose position ids
start after the padding index, so the table holds two rows fewer than ``max_position_embeddings`` says.

>>> from transmuter_mlx.zoo import roberta
>>> roberta.ModelArgs.from_dict({"model_type": "xlm-roberta", "max_position_embeddings": 514}).max_length
512
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from . import bert
from .bert import DEFAULT_VARIANT, FILES, INPUT_NAMES, TASKS, feed_names, hidden_output  # noqa: F401


@dataclass
class ModelArgs(bert.ModelArgs):
    POSITION_OFFSET: ClassVar[int] = 2
