"""The Audio Spectrogram Transformer's Kaldi-style filter banks (``ASTFeatureExtractor``).

>>> import numpy as np
>>> ast = AudioProcessor.from_config({"feature_extractor_type": "ASTFeatureExtractor"})
>>> ast.features(np.zeros(16000, np.float32))["input_values"].shape
(1024, 128)

Frames of 25 ms (400 samples) every 10 ms without centring (Kaldi's ``snip_edges``), each with its DC
offset removed, pre-emphasis 0.97 and a symmetric Hann window, a 512-point FFT, the power through
``num_mel_bins`` Kaldi mel filters (20 Hz to Nyquist), the natural log floored at float32's epsilon; then
zero-padded or truncated to ``max_length`` frames and normalised as ``(x - mean) / (2 * std)`` (AudioSet's
statistics by default). This is transformers' numpy path (used when torchaudio is not installed); with
torchaudio it calls ``torchaudio.compliance.kaldi.fbank``, the same recipe in float32. A clip shorter
than one frame (400 samples) is an error, as in transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .base import AudioProcessor, register
from .spectrogram import mel_filter_bank, spectrogram, window_function

__all__ = ["ASTFeatures"]


@register("ASTFeatureExtractor")
class ASTFeatures(AudioProcessor):
    """``ASTFeatureExtractor``: ``{"input_values": (max_length, num_mel_bins)}`` float32 per clip."""

    fixed_size = True

    def __init__(self, config: Mapping[str, Any], task: str = "") -> None:
        super().__init__(config, task)
        self.num_mel_bins = int(self.value("num_mel_bins", 128))
        self.max_length = int(self.value("max_length", 1024))
        self.do_normalize = bool(self.config.get("do_normalize", True))
        self.mean = float(self.value("mean", -4.2677393))
        self.std = float(self.value("std", 4.5689974))
        self.mel_filters = mel_filter_bank(257, self.num_mel_bins, 20, self.sampling_rate // 2, self.sampling_rate,
                                           norm=None, mel_scale="kaldi", triangularize_in_mel_space=True)
        self.window = window_function(400, "hann", periodic=False)

    def fbank(self, waveform: np.ndarray) -> np.ndarray:
        """The ``(frames, num_mel_bins)`` log filter banks of a clip, unpadded."""
        if waveform.shape[0] < 400:
            raise ValueError(f"the clip has {waveform.shape[0]} samples, fewer than one 25 ms frame (400)")
        return spectrogram(waveform, self.window, 400, 160, fft_length=512, power=2.0, center=False,
                           preemphasis=0.97, mel_filters=self.mel_filters, log_mel="log",
                           mel_floor=1.192092955078125e-07, remove_dc_offset=True).T

    def features(self, waveform: np.ndarray) -> dict[str, np.ndarray]:
        """``{"input_values": (max_length, num_mel_bins)}`` float32."""
        fbank = self.fbank(waveform)[: self.max_length]
        values = np.zeros((self.max_length, self.num_mel_bins), np.float32)
        values[: fbank.shape[0]] = fbank
        if self.do_normalize:
            values = (values - np.float32(self.mean)) / np.float32(self.std * 2)
        return {"input_values": values}
