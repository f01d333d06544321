"""Whisper's log-mel spectrogram (``WhisperFeatureExtractor``): 30 s windows, or a whole long recording.

>>> import numpy as np
>>> whisper = AudioProcessor.from_config({"feature_extractor_type": "WhisperFeatureExtractor"})
>>> whisper.features(np.zeros(16000, np.float32))["input_features"].shape
(80, 3000)
>>> long = whisper.long_features(np.zeros(16000 * 45, np.float32))
>>> long["input_features"].shape, long["attention_mask"].shape
((80, 4500), (4500,))

``features`` pads (with ``padding_value``) or truncates a clip to ``chunk_length`` seconds (30 s: 3000
frames of ``hop_length`` samples), as the extractor does by default; ``long_features`` featurizes a whole
recording, as transformers' speech recognition pipeline does for Whisper and audio over 30 s
(``truncation=False, padding="longest", return_attention_mask=True``). The spectrogram is the STFT of a
periodic Hann window of ``n_fft`` samples, centred with reflect padding, its last frame dropped; the power
through the Slaney mel filters (0-8 kHz), ``log10`` of it floored at 1e-10, clamped to 8 below its maximum,
then ``(x + 4) / 4``. transformers computes it with numpy (float64 FFT), or with torch when torch is
installed (float32 FFT): this equals its numpy path exactly, and its torch path within 1e-4 (its two paths
differ by up to 6e-5 on speech). ``dither`` (random noise, off by default) is not added.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .base import AudioProcessor, register
from .spectrogram import mel_filter_bank, spectrogram, window_function

__all__ = ["WhisperFeatures"]


@register("WhisperFeatureExtractor")
class WhisperFeatures(AudioProcessor):
    """``WhisperFeatureExtractor``: ``{"input_features": (feature_size, 3000)}`` float32 per clip."""

    fixed_size = True

    def __init__(self, config: Mapping[str, Any], task: str = "") -> None:
        super().__init__(config, task)
        self.feature_size = int(self.value("feature_size", 80))
        self.hop_length = int(self.value("hop_length", 160))
        self.chunk_length = int(self.value("chunk_length", 30))
        self.n_fft = int(self.value("n_fft", 400))
        self.n_samples = self.chunk_length * self.sampling_rate  # the samples of one window (30 s)
        self.nb_max_frames = self.n_samples // self.hop_length  # its frames (3000)
        self.mel_filters = mel_filter_bank(1 + self.n_fft // 2, self.feature_size, 0.0, 8000.0,
                                           self.sampling_rate, norm="slaney", mel_scale="slaney")
        self.window = window_function(self.n_fft, "hann")
        self.feed_names = ("input_features",)

    def log_mel(self, waveform: np.ndarray) -> np.ndarray:
        """The ``(feature_size, len // hop_length)`` log-mel spectrogram of a waveform as it is."""
        spec = spectrogram(waveform, self.window, self.n_fft, self.hop_length, power=2.0,
                           mel_filters=self.mel_filters, log_mel="log10")[:, :-1]
        # float32 and in place, as transformers computes it (a long recording's spectrogram exists once;
        # its last frame stays allocated under the view)
        np.maximum(spec, spec.max() - np.float32(8.0), out=spec)
        spec += np.float32(4.0)
        spec /= np.float32(4.0)
        return spec

    def pad(self, waveform: np.ndarray, length: int) -> np.ndarray:
        """``waveform`` padded with ``padding_value`` or truncated to ``length`` samples."""
        if waveform.shape[0] >= length:
            return waveform[:length]
        out = np.full(length, self.padding_value, np.float32)
        out[: waveform.shape[0]] = waveform
        return out

    def features(self, waveform: np.ndarray) -> dict[str, np.ndarray]:
        """``{"input_features": (feature_size, nb_max_frames)}``: the clip padded or truncated to 30 s. (The
        frame mask transformers' pipeline asks for is ``frame_mask(min(len, n_samples), n_samples)``; Whisper's
        encoder takes none.)"""
        return {"input_features": np.ascontiguousarray(self.log_mel(self.pad(waveform, self.n_samples)))}

    def long_features(self, waveform: np.ndarray) -> dict[str, np.ndarray]:
        """A whole recording, untruncated: ``{"input_features": (feature_size, len // hop_length),
        "attention_mask": (len // hop_length,) int32}``, as transformers' pipeline featurizes audio over
        ``chunk_length`` for Whisper's long-form generation. The features are a view (without the last
        STFT frame) of one float32 array: a long recording's spectrogram is never copied."""
        n = waveform.shape[0]
        return {"input_features": self.log_mel(waveform), "attention_mask": self.frame_mask(n, n)}

    def frame_mask(self, samples: int, padded: int) -> np.ndarray:
        """The attention mask of ``samples`` real samples padded to ``padded``, one entry per frame
        (transformers takes every ``hop_length``-th sample's mask, the last dropped unless it divides)."""
        hop = self.hop_length
        count = -(-padded // hop) - (1 if padded % hop else 0)  # computed per frame, not per sample
        mask = np.zeros(count, np.int32)
        mask[: -(-samples // hop)] = 1
        return mask

    def num_frames(self, num_samples: int) -> int:
        """The frames of a clip of ``num_samples`` (transformers' ``num_frames``, for word timestamps)."""
        return num_samples // self.hop_length
