"""Raw waveforms as the model input (``Wav2Vec2FeatureExtractor``): wav2vec2, HuBERT, WavLM, Moonshine...

>>> import numpy as np
>>> w2v = AudioProcessor.from_config({"feature_extractor_type": "Wav2Vec2FeatureExtractor"})
>>> values = w2v.features(np.array([0.0, 1.0, 2.0, 3.0], np.float32))["input_values"]
>>> [round(float(v), 4) for v in values]
[-1.3416, -0.4472, 0.4472, 1.3416]

``do_normalize`` (default True) scales each clip to zero mean and unit variance,
``(x - mean) / sqrt(var + 1e-7)`` in float32 as transformers does, over the clip's own samples (before any
padding); ``return_attention_mask`` (default False) adds an all-ones ``attention_mask``. Moonshine's
ONNX repositories name this extractor with ``do_normalize: false`` (transformers 4.57.6 has no Moonshine
feature extractor of its own): the raw samples are the input. A clip must be longer than the model's
receptive field (400 samples for wav2vec2's convolutions), which the model, not the extractor, checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from .base import AudioProcessor, register

__all__ = ["Wav2Vec2Features", "zero_mean_unit_var"]


def zero_mean_unit_var(values: np.ndarray) -> np.ndarray:
    """transformers' ``zero_mean_unit_var_norm`` of one unpadded clip (float32 arithmetic, epsilon 1e-7)."""
    values = values.astype(np.float32, copy=False)
    return (values - values.mean()) / np.sqrt(values.var() + 1e-7)


@register("Wav2Vec2FeatureExtractor", "MoonshineFeatureExtractor")
class Wav2Vec2Features(AudioProcessor):
    """``Wav2Vec2FeatureExtractor``: ``{"input_values": (samples,)}`` float32 (+ ``attention_mask``)."""

    NORMALIZE: ClassVar[bool] = True  # ``do_normalize``'s default

    def __init__(self, config: Mapping[str, Any], task: str = "") -> None:
        super().__init__(config, task)
        self.do_normalize = bool(self.config.get("do_normalize", self.NORMALIZE))

    def features(self, waveform: np.ndarray) -> dict[str, np.ndarray]:
        """``{"input_values": (samples,)}`` float32 (+ ``attention_mask`` (samples,) int32 of ones when the
        config sets ``return_attention_mask``)."""
        values = waveform.astype(np.float32, copy=False)
        if self.do_normalize:
            values = zero_mean_unit_var(values)
        feeds = {"input_values": values}
        if self.return_attention_mask:
            feeds["attention_mask"] = np.ones(values.shape[0], np.int32)
        return feeds
