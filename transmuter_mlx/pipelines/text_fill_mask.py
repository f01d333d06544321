"""fill_mask: the most likely tokens for the mask token of a text."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..processors.text import text_input
from ..zoo._base import score
from .base import EncoderPipeline, Prepared


class FillMask(EncoderPipeline):
    """Tokens for the mask: ``{"predictions": [{"score", "token", "token_str", "sequence"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> fill = tm.text.fill_mask("Xenova/bert-base-uncased")
    >>> predictions = fill("Paris is the [MASK] of France.", top_k=2)["predictions"]
    >>> predictions[0]
    {'score': ..., 'token': ..., 'token_str': '...', 'sequence': 'paris is the...of france.'}
    >>> len(predictions), predictions[0]["score"] >= predictions[1]["score"]
    (2, True)

    ``top_k`` (default 5) predictions, best first; ``targets`` (a str or list) limits them to
    those tokens (a target that is not a token is replaced by its first token, with a warning).
    With several masks, ``predictions`` has one list per mask, as in transformers.
    """

    task = "fill-mask"
    defaults = MappingProxyType({"top_k": 5, "targets": None})
    count_options = MappingProxyType({"top_k": (1, False)})

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        if self.tokenizer.mask_token_id is None:
            raise ValueError(f"{self.task}: the tokenizer of {self.repo.name} has no mask token")

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The ids of ``targets``, once per call (warnings for targets that are not tokens)."""
        targets = options["targets"]
        return {**options, "target_ids": self.target_ids(targets) if targets is not None else None}

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        rows = self.processor.rows([text_input(self.task, index, item)], owners=[index])
        if not (rows[0].input_ids == self.tokenizer.mask_token_id).any():
            raise ValueError(
                f"{self.task}: input {index}: no mask token ({self.tokenizer.mask_token}) found on the input"
            )
        return Prepared(rows)

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        logits = self.output(outputs[0], "logits")
        return self.predictions(prepared.rows[0].input_ids, logits, options["top_k"], options["target_ids"])

    def predictions(
        self, ids: np.ndarray, logits: np.ndarray, top_k: int, targets: np.ndarray | None
    ) -> dict:
        tok = self.tokenizer
        masked = np.nonzero(ids == tok.mask_token_id)[0]
        probs = score(logits[masked], "softmax")
        if targets is not None:
            probs, top_k = probs[:, targets], min(top_k, len(targets))
        single = len(masked) == 1
        result = []
        for i, p in enumerate(probs):
            best = np.argsort(-p, kind="stable")[:top_k]
            row = []
            for j in best:
                token = int(targets[j]) if targets is not None else int(j)
                filled = ids.copy()
                filled[masked[i]] = token
                filled = filled[filled != tok.pad_token_id] if tok.pad_token_id is not None else filled
                row.append(
                    {
                        "score": float(p[j]),
                        "token": token,
                        "token_str": tok.decode([token], skip_special_tokens=False),
                        "sequence": tok.decode(filled, skip_special_tokens=single),
                    }
                )
            result.append(row)
        return {"predictions": result[0] if single else result}

    def target_ids(self, targets: Any) -> np.ndarray:
        """Token ids of targets, as transformers' FillMaskPipeline.get_target_ids."""
        targets = [targets] if isinstance(targets, str) else list(targets)
        vocab = self.tokenizer.backend.get_vocab()
        ids = []
        for target in targets:
            token = vocab.get(target)
            if token is None:
                enc = self.tokenizer.encode([target], add_special_tokens=False, max_length=1, truncation=True)
                if not enc.attention_mask[0].any():
                    warnings.warn(
                        f"{self.task}: target {target!r} is not in the vocabulary; ignoring it", stacklevel=4
                    )
                    continue
                token = int(enc.input_ids[0][0])
                warnings.warn(
                    f"{self.task}: target {target!r} is not in the vocabulary; replacing it with "
                    f"{self.tokenizer.convert_ids_to_tokens(token)!r}",
                    stacklevel=4,
                )
            ids.append(token)
        ids = sorted(set(ids))
        if not ids:
            raise ValueError(f"{self.task}: at least one target must be provided when passed")
        return np.asarray(ids)
