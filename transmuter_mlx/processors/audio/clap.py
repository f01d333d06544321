"""CLAP's log-mel in decibels (``ClapFeatureExtractor``): 10 s windows, fused views of longer audio.

>>> import numpy as np
>>> clap = AudioProcessor.from_config({"feature_extractor_type": "ClapFeatureExtractor"})
>>> feeds = clap.features(np.zeros(48000, np.float32) + 0.1)
>>> feeds["input_features"].shape, feeds["is_longer"].tolist()
((4, 1001, 64), [True])

The STFT of a periodic Hann window of ``fft_window_size`` samples every ``hop_length``, centred with
reflect padding, its power through ``feature_size`` mel filters (``frequency_min``-``frequency_max``) in
decibels (``10 log10``, floored at -100 dB). A clip shorter than ``max_length_s`` is repeated
(``padding="repeatpad"``: whole repeats, then zeros; ``"repeat"``: repeated to the end; else zeros).

``truncation="fusion"`` (the default): HTK mel filters, and four views of the clip stacked,
``(4, frames, bins)``: a short clip's spectrogram four times; a longer clip's spectrogram shrunk to 10 s
(bilinear, as torch's ``interpolate``) then three 10 s crops of it. transformers draws the crops at random
from the front, middle and back thirds of the possible starts; here each is the first start of its third,
so that a result does not change from call to call. ``is_longer`` is always true for one clip (transformers
marks a random clip of a call "longer" when none is, and its pipeline calls the extractor one clip at a time).

``truncation="rand_trunc"``: Slaney mel filters, ``(1, frames, bins)``; a longer clip is cropped to 10 s
(transformers at a random start, here its first 10 s); ``is_longer`` tells whether it was longer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .base import AudioProcessor, register
from .spectrogram import mel_filter_bank, spectrogram, window_function

__all__ = ["ClapFeatures", "shrink_frames"]


def shrink_frames(mel: np.ndarray, frames: int) -> np.ndarray:
    """``mel`` ``(n, bins)`` resized to ``(frames, bins)`` along time as torch's bilinear ``interpolate``
    (``align_corners=False``) resizes it, in float32."""
    n = mel.shape[0]
    scale = np.float32(n / frames)
    source = np.maximum((np.arange(frames, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5),
                        np.float32(0))
    low = np.minimum(source.astype(np.int64), n - 1)
    high = np.minimum(low + 1, n - 1)
    weight = (source - low.astype(np.float32))[:, None]
    return ((np.float32(1) - weight) * mel[low] + weight * mel[high]).astype(np.float32)


@register("ClapFeatureExtractor")
class ClapFeatures(AudioProcessor):
    """``ClapFeatureExtractor``: ``{"input_features": (4 or 1, frames, bins) float32, "is_longer": (1,) bool}``."""

    SAMPLING_RATE = 48000
    fixed_size = True

    def __init__(self, config: Mapping[str, Any], task: str = "") -> None:
        super().__init__(config, task)
        self.feature_size = int(self.value("feature_size", 64))
        self.hop_length = int(self.value("hop_length", 480))
        self.max_length_s = self.value("max_length_s", 10)
        self.fft_window_size = int(self.value("fft_window_size", 1024))
        self.frequency_min = float(self.value("frequency_min", 0))
        self.frequency_max = float(self.value("frequency_max", 14000))
        self.truncation = self.value("truncation", "fusion")
        self.padding = self.value("padding", "repeatpad")
        if self.truncation not in ("fusion", "rand_trunc"):
            raise self.error(f"truncation {self.truncation!r} is not supported (fusion, rand_trunc)")
        self.nb_max_samples = int(self.max_length_s * self.sampling_rate)
        bins = self.fft_window_size // 2 + 1
        slaney = self.truncation != "fusion"
        self.mel_filters = mel_filter_bank(bins, self.feature_size, self.frequency_min, self.frequency_max,
                                           self.sampling_rate, norm="slaney" if slaney else None,
                                           mel_scale="slaney" if slaney else "htk")
        self.window = window_function(self.fft_window_size, "hann")
        self.feed_names = ("input_features", "is_longer")

    def log_mel(self, waveform: np.ndarray) -> np.ndarray:
        """The ``(frames, bins)`` decibel mel spectrogram of a waveform as it is."""
        return spectrogram(waveform, self.window, self.fft_window_size, self.hop_length, power=2.0,
                           mel_filters=self.mel_filters, log_mel="dB").T

    def fill(self, waveform: np.ndarray) -> np.ndarray:
        """A clip shorter than ``max_length_s`` repeated and/or zero-padded to it (``padding``)."""
        n, size = waveform.shape[0], self.nb_max_samples
        if self.padding == "repeat":
            waveform = np.tile(waveform, int(size / n) + 1)[:size]
        elif self.padding == "repeatpad":
            waveform = np.tile(waveform, int(size / n))
        out = np.zeros(size, waveform.dtype)
        out[: waveform.shape[0]] = waveform
        return out

    def features(self, waveform: np.ndarray) -> dict[str, np.ndarray]:
        """``{"input_features": (4, frames, bins) (fusion) or (1, frames, bins), "is_longer": (1,) bool}``."""
        size = self.nb_max_samples
        if waveform.shape[0] > size and self.truncation == "rand_trunc":
            mel, longer = self.log_mel(waveform[:size])[None], True  # transformers: a random 10 s
        elif waveform.shape[0] > size:
            mel = self.log_mel(waveform)
            chunk = size // self.hop_length + 1
            if mel.shape[0] == chunk:
                mel, longer = np.stack([mel] * 4), False
            else:
                ranges = np.array_split(np.arange(mel.shape[0] - chunk + 1), 3)
                starts = [int(r[0]) if len(r) else 0 for r in ranges]  # transformers: random in each third
                mel, longer = np.stack([shrink_frames(mel, chunk)] + [mel[s:s + chunk] for s in starts]), True
        else:
            wave = waveform if waveform.shape[0] == size else self.fill(waveform)
            mel, longer = self.log_mel(wave), False
            mel = np.stack([mel] * 4) if self.truncation == "fusion" else mel[None]
        if self.truncation == "fusion":
            longer = True  # one clip of a call: transformers marks it longer when none is
        return {"input_features": mel.astype(np.float32), "is_longer": np.array([longer])}
