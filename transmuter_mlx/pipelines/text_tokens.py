"""token_classification: labels of tokens (named entities), grouped as transformers does."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..processors.text import text_input
from ..zoo._base import score
from .base import EncoderPipeline, Prepared
from .text_entities import STRATEGIES, aggregate, gather_pre_entities


class TokenClassification(EncoderPipeline):
    """Entities of a text: ``{"entities": [{"label", "score", "phrase", "start", "end", "word"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> ner = tm.text.token_classification("Xenova/bert-base-NER",
    ...                                    aggregation_strategy="simple")
    >>> text = "Hugging Face Inc. is a company based in New York City."
    >>> entity = ner(text)["entities"][0]
    >>> entity
    {'label': ..., 'score': ..., 'phrase': ..., 'start': ..., 'end': ..., 'word': ...}
    >>> text.encode()[entity["start"]:entity["end"]].decode() == entity["phrase"]
    True

    ``aggregation_strategy``: "none" (one entity per token, with its ``index``; the default),
    "simple", "first", "average" or "max", exactly as transformers' TokenClassificationPipeline;
    ``ignore_labels`` (default ["O"]) are dropped. ``start``/``end`` are UTF-8 byte offsets, so
    ``text.encode()[start:end].decode() == phrase``; ``word`` is the decoded tokens.
    """

    task = "token-classification"
    defaults = MappingProxyType({"aggregation_strategy": "none", "ignore_labels": ("O",)})

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The aggregation strategy (checked), the labels to drop and whether the tokenizer marks word pieces."""
        strategy = str(options["aggregation_strategy"] or "none").lower()
        if strategy not in STRATEGIES:
            raise ValueError(
                f"{self.task}: unknown aggregation_strategy {strategy!r}; expected one of {STRATEGIES}"
            )
        prefix = bool(getattr(self.tokenizer.backend.model, "continuing_subword_prefix", None))
        if not prefix and strategy in ("first", "average", "max"):
            warnings.warn(
                "Tokenizer does not support real words, using fallback heuristic", UserWarning, stacklevel=4
            )
        return {**options, "strategy": strategy, "ignore": set(options["ignore_labels"] or ()), "prefix": prefix}

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        text = text_input(self.task, index, item)
        return Prepared(self.processor.rows([text], owners=[index]), text)

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        logits = self.output(outputs[0], "logits")
        return self.entities(prepared.data, prepared.rows[0], logits, options["strategy"], options["ignore"],
                             options["prefix"])

    def entities(
        self, text: str, row: Any, logits: np.ndarray, strategy: str, ignore: set[str], prefix: bool
    ) -> dict[str, Any]:
        data = text.encode("utf-8")
        scores = score(logits, "softmax")
        ids = row.input_ids.tolist()
        words = self.tokenizer.convert_ids_to_tokens(ids)
        unk = np.asarray(ids) == (
            self.tokenizer.unk_token_id if self.tokenizer.unk_token_id is not None else -1
        )
        pre = gather_pre_entities(data, words, scores, row.offsets, row.special_tokens_mask, unk, prefix)
        grouped = aggregate(pre, strategy, self.args.id2label, self.tokenizer.convert_tokens_to_string)
        out = []
        for e in grouped:
            label = e.get("entity_group", e.get("entity"))
            if label in ignore:
                continue
            entity = {
                "label": label,
                "score": float(e["score"]),
                "phrase": data[e["start"] : e["end"]].decode("utf-8"),
                "start": e["start"],
                "end": e["end"],
                "word": e["word"],
            }
            if strategy == "none":
                entity["index"] = e["index"]
            out.append(entity)
        return {"entities": out}
