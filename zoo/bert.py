"""Encoder text models: BERT and the families that run the same way (one ONNX graph, token ids in).

>>> from transmuter_mlx.zoo import bert
>>> args = bert.ModelArgs.from_dict({"model_type": "bert", "id2label": {"0": "NEG", "1": "POS"}})
>>> args.num_labels, args.score_function
(2, 'softmax')

Serves bert, distilbert, roberta, xlm-roberta, camembert, electra, mpnet, albert, deberta,
deberta-v2 and modernbert (see ``REMAP`` in zoo/__init__.py). What differs between them for
running the graph, such as whether it takes ``token_type_ids``, is read from the graph's inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: the ONNX file (``onnx/model.onnx`` and its variants)
ONNX_STEM = "model"
#: the inputs this family may feed, in this order; a graph takes a subset of them
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
#: names the graph gives its outputs: token states of the base model, and the heads' logits
HIDDEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
TASKS = frozenset(
    {
        "text-embedding",
        "text-classification",
        "text-ranking",
        "zero-shot-classification",
        "token-classification",
        "fill-mask",
        "question-answering",
    }
)
#: the variant an encoder loads when neither the caller nor config.json chooses one
DEFAULT_VARIANT = None


@dataclass
class ModelArgs:
    """The config.json keys the text pipelines read (extra keys are ignored)."""

    model_type: str = "bert"
    max_position_embeddings: int | None = None
    type_vocab_size: int | None = None
    pad_token_id: int | None = None
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    problem_type: str | None = None
    num_labels: int | None = None
    sentence_transformers: dict[str, Any] = field(default_factory=dict)
    sbert_ce_default_activation_function: str | None = None

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> ModelArgs:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in config.items() if k in names})

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
        self.sentence_transformers = dict(self.sentence_transformers or {})

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

    @property
    def cross_encoder_activation(self) -> str | None:
        """The activation that sentence-transformers saved for a cross-encoder, if any."""
        return self.sentence_transformers.get("activation_fn") or self.sbert_ce_default_activation_function


def feed_names(graph_inputs: Sequence[Any]) -> tuple[str, ...]:
    """The inputs to feed a graph: those of ``INPUT_NAMES`` it takes (another input it needs is an error).

    >>> from types import SimpleNamespace as N
    >>> feed_names([N(name="input_ids"), N(name="attention_mask")])
    ('input_ids', 'attention_mask')
    """
    names = [i.name for i in graph_inputs]
    unknown = [n for n in names if n not in INPUT_NAMES]
    if unknown:
        raise ValueError(
            f"the ONNX graph takes input(s) {unknown} that an encoder text model does not feed; "
            f"it feeds {list(INPUT_NAMES)}"
        )
    if "input_ids" not in names:
        raise ValueError(f"the ONNX graph does not take input_ids (its inputs: {names})")
    return tuple(n for n in INPUT_NAMES if n in names)


def feeds(
    names: Sequence[str],
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    token_type_ids: np.ndarray,
    dtypes: Mapping[str, Any],
) -> dict[str, np.ndarray]:
    """The feeds of one padded batch, cast to the dtypes the graph declares."""
    arrays = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
    return {n: arrays[n].astype(dtypes.get(n) or np.int64, copy=False) for n in names}


def hidden_output(outputs: Mapping[str, Any]) -> str:
    """The name of the token-states output among a graph's outputs."""
    for name in HIDDEN_OUTPUTS:
        if name in outputs:
            return name
    raise ValueError(
        f"the ONNX graph has no token-states output {list(HIDDEN_OUTPUTS)}; its outputs: {list(outputs)}"
    )
