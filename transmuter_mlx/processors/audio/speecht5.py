"""SpeechT5's waveform input and log-mel targets (``SpeechT5FeatureExtractor``).

>>> import numpy as np
>>> t5 = AudioProcessor.from_config({"feature_extractor_type": "SpeechT5FeatureExtractor"})
>>> wave = np.sin(np.arange(16000) / 7).astype(np.float32)
>>> t5.features(wave)["input_values"].shape, t5.target_features(wave)["input_values"].shape
((16000,), (63, 80))

``features`` is the speech encoder's input: the samples (zero mean, unit variance when ``do_normalize``,
off by default) and an all-ones ``attention_mask`` (``return_attention_mask``, on by default).
``target_features`` is what transformers gives for ``audio_target=``: the ``(frames, num_mel_bins)``
log10 mel spectrogram (amplitude, not power) of a ``win_length`` ms periodic Hann window every
``hop_length`` ms (64 and 16 ms: 1024 and 256 samples at 16 kHz), Slaney mel filters ``fmin``-``fmax``
(80-7600 Hz) floored at ``mel_floor`` -- the spectrograms SpeechT5's speech decoder predicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .base import AudioProcessor, register  # noqa: F401 - the doctest's
from .spectrogram import mel_filter_bank, spectrogram, window_function
from .wav2vec2 import Wav2Vec2Features

__all__ = ["SpeechT5Features"]


@register("SpeechT5FeatureExtractor")
class SpeechT5Features(Wav2Vec2Features):
    """``SpeechT5FeatureExtractor``: ``{"input_values": (samples,), "attention_mask": (samples,)}`` per clip."""

    NORMALIZE = False

    def __init__(self, config: Mapping[str, Any], task: str = "") -> None:
        super().__init__(config, task)
        self.return_attention_mask = bool(self.config.get("return_attention_mask", True))
        self.num_mel_bins = int(self.value("num_mel_bins", 80))
        self.sample_size = int(self.value("win_length", 64)) * self.sampling_rate // 1000
        self.sample_stride = int(self.value("hop_length", 16)) * self.sampling_rate // 1000
        self.n_fft = 2 ** int(np.ceil(np.log2(self.sample_size)))
        self.mel_floor = float(self.value("mel_floor", 1e-10))
        self.window = window_function(self.sample_size, self.value("win_function", "hann_window"))
        self.mel_filters = mel_filter_bank(self.n_fft // 2 + 1, self.num_mel_bins, float(self.value("fmin", 80)),
                                           float(self.value("fmax", 7600)), self.sampling_rate,
                                           norm="slaney", mel_scale="slaney")

    def target_features(self, waveform: np.ndarray) -> dict[str, np.ndarray]:
        """transformers' ``audio_target=``: ``{"input_values": (frames, num_mel_bins) float32}``
        (+ ``attention_mask`` (frames,) int32 of ones)."""
        mel = spectrogram(waveform, self.window, self.sample_size, self.sample_stride, fft_length=self.n_fft,
                          mel_filters=self.mel_filters, mel_floor=self.mel_floor, log_mel="log10").T
        feeds = {"input_values": np.ascontiguousarray(mel, dtype=np.float32)}
        if self.return_attention_mask:
            feeds["attention_mask"] = np.ones(mel.shape[0], np.int32)
        return feeds
