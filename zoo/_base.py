"""What the family modules share: config reading, the head fields of a classifier, the cache facts of a
decoder, and the score function of classification logits.

>>> args = HeadArgs.from_dict({"model_type": "bert", "id2label": {"0": "NEG", "1": "POS"}, "other": 1})
>>> args.num_labels, args.label2id, args.score_function
(2, {'NEG': 0, 'POS': 1}, 'softmax')
>>> score(np.array([0.0, 1.0]), "softmax").round(4).tolist()
[0.2689, 0.7311]
>>> DecoderArgs.from_dict({"hidden_size": 64, "num_attention_heads": 4}).head_dim
16
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

__all__ = ["DECODER_FILES", "DECODER_TASKS", "SCORE_FUNCTIONS", "SEQ2SEQ_FILES", "SEQ2SEQ_TASKS", "BaseArgs",
           "DecoderArgs", "HeadArgs", "language_ids", "score"]

SCORE_FUNCTIONS = ("softmax", "sigmoid", "none")

Args = TypeVar("Args", bound="BaseArgs")


@dataclass
class BaseArgs:
    """A family's config.json keys: fields named as the keys, other keys ignored, derived values set in
    ``__post_init__``."""

    model_type: str = ""

    @classmethod
    def from_dict(cls: type[Args], config: Mapping[str, Any]) -> Args:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in config.items() if k in names})


@dataclass
class HeadArgs(BaseArgs):
    """The fields of a classification head, normalised as transformers' ``PretrainedConfig`` does."""

    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    num_labels: int | None = None
    problem_type: str | None = None

    def __post_init__(self) -> None:
        if self.id2label:
            self.id2label = {int(k): str(v) for k, v in self.id2label.items()}
        if self.num_labels is None:
            self.num_labels = len(self.id2label) if self.id2label else 2
        if not self.id2label:
            self.id2label = {i: f"LABEL_{i}" for i in range(self.num_labels)}
        if not self.label2id:
            self.label2id = {v: k for k, v in self.id2label.items()}
        self.label2id = {str(k): int(v) for k, v in self.label2id.items()}

    @property
    def score_function(self) -> str:
        """How a sequence classifier's logits become scores, as transformers decides it."""
        if self.problem_type == "regression":
            return "none"
        if self.problem_type == "multi_label_classification" or self.num_labels == 1:
            return "sigmoid"
        return "softmax"

    @property
    def entailment_id(self) -> int:
        """The id of the label starting with "entail" (an NLI head), -1 without one."""
        return next((i for label, i in self.label2id.items() if label.lower().startswith("entail")), -1)


def score(logits: np.ndarray, function: str) -> np.ndarray:
    """Scores of logits over the last axis, as transformers computes them (``softmax``, ``sigmoid``, ``none``)."""
    logits = np.asarray(logits)
    if function == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    if function == "softmax":
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)
    if function in ("none", "identity"):
        return logits
    raise ValueError(f"unknown function_to_apply {function!r}; expected one of {SCORE_FUNCTIONS}")


@dataclass
class DecoderArgs(BaseArgs):
    """What a decoder with a KV cache takes from config.json: the cache's heads and head size (for graphs
    that leave them symbolic) and its positions. ``POSITIONS`` is the kind of position encoding of the
    family (``"absolute"``: a table of rows, ``"rotary"``, ``"relative"``: T5's buckets)."""

    POSITIONS: ClassVar[str] = "rotary"
    POSITIONS_KEY: ClassVar[str] = "max_position_embeddings"  # where the config says it (for messages)

    hidden_size: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    max_position_embeddings: int | None = None

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None and self.hidden_size and self.num_attention_heads:
            self.head_dim = self.hidden_size // self.num_attention_heads

    @property
    def positions(self) -> int | None:
        """The positions a row may take (prompt and new tokens), None when the config declares none."""
        return self.max_position_embeddings


#: the ONNX file of a decoder-only LM with a KV cache: the transformers.js v3 name, else the merged one
DECODER_FILES = {"model": ("model", "decoder_model_merged")}
DECODER_TASKS = frozenset({"text-generation"})

#: the ONNX files of an encoder-decoder by role: the merged decoder, else the first-step and with-past pair
SEQ2SEQ_FILES = {
    "encoder": ("encoder_model",),
    "decoder": ("decoder_model_merged", "decoder_model"),
    "decoder_with_past": ("decoder_with_past_model",),
}
SEQ2SEQ_TASKS = frozenset({"text2text-generation", "translation", "summarization"})


def language_ids(code: str) -> tuple[str, ...]:
    """The tokens a language code may be spelled as in a tokenizer: the code itself (``"fra_Latn"``)."""
    return (code,)
