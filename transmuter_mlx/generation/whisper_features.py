"""A long recording's Whisper log-mel frames, computed window by window (memory bounded by a window).

>>> import numpy as np
>>> from transmuter_mlx.processors.audio import AudioProcessor
>>> whisper = AudioProcessor.from_config({"feature_extractor_type": "WhisperFeatureExtractor"})
>>> wave = np.sin(np.arange(16000 * 40) / 50.0).astype(np.float32)
>>> frames = LogMelFrames(whisper, wave)
>>> whole = whisper.long_features(wave)["input_features"]
>>> frames.total == whole.shape[1], float(np.abs(frames(2500, 3000) - whole[:, 2500:5500]).max()) < 1e-6
(True, True)

``WhisperFeatures.log_mel`` of a whole recording clamps every frame at 8 below the recording's loudest
frame, so a window's frames depend on the whole recording: a first pass finds that maximum block by block,
then each window's frames are computed when it is decoded, from its own samples (and the ``n_fft // 2``
samples either side that its centred frames reach; the recording's ends reflected as the STFT pads them).
The values are those of ``long_features`` (transformers' ``truncation=False`` features) without holding
the (bins, frames) array of hours of audio (230 MB an hour, more while it is computed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["LogMelFrames"]

BLOCK = 3000  # frames per block of the first pass


class LogMelFrames:
    """``frames(start, count)``: (bins, count) float32 log-mel frames of ``wave``, as ``long_features``."""

    def __init__(self, featurizer: Any, wave: np.ndarray) -> None:
        self.featurizer, self.wave = featurizer, wave
        self.hop, self.n_fft = int(featurizer.hop_length), int(featurizer.n_fft)
        self.total = len(wave) // self.hop  # the STFT's 1 + len // hop frames, the last one dropped
        self.floor = max(float(self.raw(s, min(BLOCK, self.total - s)).max())
                         for s in range(0, self.total, BLOCK)) - 8.0

    def raw(self, start: int, count: int) -> np.ndarray:
        """log10 of the mel power of frames ``start .. start + count`` (float32, before the clamp)."""
        f, n, pad = self.featurizer, len(self.wave), self.n_fft // 2
        index = (start + np.arange(count))[:, None] * self.hop + np.arange(self.n_fft)[None, :] - pad
        index = np.abs(index)  # reflect padding at the start: x[-i] = x[i]
        index = np.where(index >= n, 2 * (n - 1) - index, index)  # and at the end
        frames = self.wave[index].astype(np.float64) * f.window.astype(np.float64)
        spec = np.fft.rfft(frames, n=self.n_fft, axis=1)
        power = np.abs(spec.astype(np.complex64), dtype=np.float64) ** 2.0
        mel = np.maximum(1e-10, power @ f.mel_filters)
        return np.asarray(np.log10(mel).T, np.float32)

    def __call__(self, start: int, count: int) -> np.ndarray:
        count = max(0, min(count, self.total - start))
        spec = np.maximum(self.raw(start, count), np.float32(self.floor))
        return ((spec + np.float32(4.0)) / np.float32(4.0)).astype(np.float32)
