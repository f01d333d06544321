"""text_embedding: one vector per text, pooled and normalised as sentence-transformers does."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..converters.backends import HOST
from ..processors.text import text_input
from .base import EncoderPipeline, Prepared
from .sentence_config import read_sentence_config

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
PROCESSORS = ("l2_norm", None)


class TextEmbedding(EncoderPipeline):
    """Embeddings of texts: ``{"embedding": array}`` (the pooled vector, or token vectors without pooling),
    an array of the pipeline's backend (``mx.array`` on mlx, ``torch.Tensor`` on torch), float32.

    >>> import transmuter_mlx as tm
    >>> embed = tm.text.text_embedding("Xenova/all-MiniLM-L6-v2")         # doctest: +SKIP
    >>> embed("The cat sat on the mat.")["embedding"].shape                # doctest: +SKIP
    (384,)

    Pooling, normalisation and the maximum length come from the sentence-transformers files of
    the repository (modules.json, 1_Pooling/config.json, sentence_bert_config.json) or of its
    model card's ``base_model``; without them, mean pooling and no normalisation. Options:
    ``output_pool`` (a mode of ``POOLING_MODES``, a list of them to concatenate, or None for the
    token vectors) and ``embedding_processor`` (``"l2_norm"`` or None) override those files.
    """

    task = "text-embedding"
    defaults = MappingProxyType({"output_pool": "auto", "embedding_processor": "auto"})

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        self.sentence = read_sentence_config(self.repo)
        if self.sentence is not None and self.sentence.max_seq_length:
            p = self.processor
            p.max_length = min(x for x in (p.max_length, self.sentence.max_seq_length) if x)
        extra = self.options.extra
        if (
            self.sentence is not None
            and extra["output_pool"] == "auto"
            and extra["embedding_processor"] == "auto"
        ):
            self.sentence.check(self.task)
        self.settings(extra)
        self.hidden_name = self.family.hidden_output([o.name for o in self.model.outputs])

    def settings(self, options: Mapping[str, Any]) -> tuple[tuple[str, ...] | None, bool]:
        """``(pooling modes or None, normalise)`` for the options of a call."""
        pool, processor = options["output_pool"], options["embedding_processor"]
        sentence = self.sentence
        if pool == "auto":
            modes = sentence.pooling if sentence is not None and sentence.pooling else ("mean",)
        elif pool is None:
            modes = None
        else:
            modes = (pool,) if isinstance(pool, str) else tuple(pool)
            bad = [m for m in modes if m not in POOLING_MODES]
            if bad or not modes:
                raise ValueError(
                    f"{self.task}: unknown output_pool {pool!r}; expected one of {POOLING_MODES} or None"
                )
        if processor == "auto":
            normalize = bool(sentence is not None and sentence.normalize)
        elif processor in PROCESSORS or processor == "none":
            normalize = processor == "l2_norm"
        else:
            raise ValueError(
                f"{self.task}: unknown embedding_processor {processor!r}; expected 'l2_norm' or None"
            )
        return modes, normalize

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        modes, normalize = self.settings(options)
        return {**options, "modes": modes, "normalize": normalize}

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        return Prepared(self.processor.rows([text_input(self.task, index, item)], owners=[index]))

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        hidden = self.output(outputs[0], self.hidden_name)
        return self.embedding(hidden, options["modes"], options["normalize"], self.model.backend)

    @staticmethod
    def embedding(hidden: np.ndarray, modes: tuple[str, ...] | None, normalize: bool, B: Any = HOST) -> dict[str, Any]:
        """``{"embedding": ...}`` of one row's token states: pooled by ``modes`` (None: the token vectors),
        an array of the backend ``B``."""
        vector = hidden if modes is None else np.concatenate([pool(hidden, m) for m in modes], axis=-1)
        if normalize:
            vector = vector / np.maximum(np.linalg.norm(vector, axis=-1, keepdims=True), 1e-12)
        return {"embedding": B.asarray(vector.astype(np.float32))}


def pool(hidden: np.ndarray, mode: str) -> np.ndarray:
    """Pool the token vectors ``(tokens, hidden)`` of one row (no padding) as sentence-transformers does."""
    n = hidden.shape[0]
    if mode == "cls":
        return hidden[0]
    if mode == "lasttoken":
        return hidden[-1]
    if mode == "max":
        return hidden.max(axis=0)
    if mode == "mean":
        return hidden.sum(axis=0) / max(n, 1e-9)
    if mode == "mean_sqrt_len_tokens":
        return hidden.sum(axis=0) / np.sqrt(max(n, 1e-9))
    if mode == "weightedmean":
        weights = np.arange(1, n + 1, dtype=hidden.dtype)[:, None]
        return (hidden * weights).sum(axis=0) / max(weights.sum(), 1e-9)
    raise ValueError(f"unknown pooling mode {mode!r}; expected one of {POOLING_MODES}")
