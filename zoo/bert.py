"""Encoder text models: BERT and the families that run the same way (one ONNX graph, token ids in).

>>> from transmuter_mlx.zoo import bert
>>> args = bert.ModelArgs.from_dict({"model_type": "bert", "id2label": {"0": "NEG", "1": "POS"},
...                                  "max_position_embeddings": 512})
>>> args.num_labels, args.score_function, args.max_length
(2, 'softmax', 512)

Serves bert, distilbert, electra, albert, deberta, deberta-v2 and modernbert (see ``REMAP`` in
zoo/__init__.py; RoBERTa's kin are zoo/roberta.py). What differs between them for running the graph,
such as whether it takes ``token_type_ids``, is read from the graph's inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ._base import HeadArgs

#: the ONNX files by role (``onnx/model.onnx`` and its variants)
FILES = {"model": ("model",)}
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
class ModelArgs(HeadArgs):
    """The config.json keys the text pipelines read (extra keys are ignored).

    ``POSITION_OFFSET``: positions a family's position ids skip (RoBERTa's start after the padding index).
    """

    POSITION_OFFSET: ClassVar[int] = 0

    max_position_embeddings: int | None = None
    type_vocab_size: int | None = None
    pad_token_id: int | None = None
    sentence_transformers: dict[str, Any] = field(default_factory=dict)
    sbert_ce_default_activation_function: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sentence_transformers = dict(self.sentence_transformers or {})

    @property
    def max_length(self) -> int | None:
        """The longest row the position table holds, None when config.json does not say."""
        if not self.max_position_embeddings or self.max_position_embeddings <= 0:
            return None
        return self.max_position_embeddings - self.POSITION_OFFSET

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


def hidden_output(outputs: Sequence[str] | Mapping[str, Any]) -> str:
    """The name of the token-states output among a graph's outputs."""
    for name in HIDDEN_OUTPUTS:
        if name in outputs:
            return name
    raise ValueError(
        f"the ONNX graph has no token-states output {list(HIDDEN_OUTPUTS)}; its outputs: {list(outputs)}"
    )

