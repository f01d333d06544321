"""audio_classification: the labels of a sound, from a classifier head on an audio encoder."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..zoo._base import SCORE_FUNCTIONS, score
from .audio import AudioPipeline
from .base import Prepared

__all__ = ["AudioClassification"]


class AudioClassification(AudioPipeline):
    """Labels of a clip, best first: ``{"predictions": [{"label", "score"}, ...]}``.

    >>> import numpy as np
    >>> from tests.fixtures.audio_models import build
    >>> classify = AudioClassification(build("ast"))
    >>> tone = np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000).astype(np.float32)  # 1 s at 16 kHz
    >>> classify(tone, top_k=2)["predictions"]
    [{'label': ..., 'score': ...}, {'label': ..., 'score': ...}]
    >>> every = classify(tone, top_k=None)["predictions"]     # all labels of id2label, best first
    >>> len(every) == len(classify.args.id2label), round(sum(p["score"] for p in every), 4)
    (True, 1.0)

    As transformers' audio-classification pipeline: the clip (samples at the model's sampling rate,
    ``{"array"/"raw": samples, "sampling_rate": n}`` at another rate, or a file) goes through the
    repository's feature extractor; labels come from ``id2label``; scores are a softmax of the
    logits whatever the config's ``problem_type`` (``function_to_apply``: ``"softmax"``,
    ``"sigmoid"``, ``"none"``); ``top_k`` (default 5, at most the number of labels; None for all).
    A feature extractor that gives every clip the same frames (AST: 1024 frames, about 10 s, longer
    clips cut, shorter ones padded) runs ``compile.batch_size`` clips per call; wav2vec2 and HuBERT
    classifiers pool over every frame of the clip, so each clip runs alone, at its own length.
    """

    task = "audio-classification"
    per_position = False
    defaults = MappingProxyType({"top_k": 5, "function_to_apply": "softmax"})
    count_options = MappingProxyType({"top_k": (1, True)})

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        name = options["function_to_apply"]
        name = "softmax" if name is None else name  # transformers: None is the default, a softmax
        if name not in SCORE_FUNCTIONS:
            raise ValueError(f"{self.task}: function_to_apply must be one of {list(SCORE_FUNCTIONS)}, got {name!r}")
        return {**options, "function_to_apply": name}

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        prepared = super().preprocess(index, item, options)
        # a family whose convolutions need a least length says so (wav2vec2: ``min_samples``); shorter
        # clips would give no frame to pool (transformers fails inside a convolution)
        least = int(getattr(self.args, "min_samples", 0) or 0)
        if prepared.data.shape[0] < least:
            raise ValueError(f"{self.task}: input {index}: {prepared.data.shape[0]} samples is too short: the "
                             f"model needs at least {least} ({least / self.sampling_rate:.4g} s at "
                             f"{self.sampling_rate} Hz)")
        return prepared

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        scores = score(self.output(outputs[0], "logits").reshape(-1), options["function_to_apply"])
        order = np.argsort(-scores, kind="stable")
        top_k = options["top_k"]
        order = order if top_k is None else order[:top_k]
        return {"predictions": [{"label": self.args.id2label[int(i)], "score": float(scores[i])} for i in order]}
