"""Spectrograms as transformers' ``audio_utils`` computes them: windows, mel filter banks, the STFT, decibels.

>>> import numpy as np
>>> filters = mel_filter_bank(201, 80, 0.0, 8000.0, 16000, norm="slaney", mel_scale="slaney")
>>> filters.shape
(201, 80)
>>> wave = np.sin(np.arange(16000) * 0.1).astype(np.float32)
>>> spectrogram(wave, window_function(400), 400, 160, power=2.0, mel_filters=filters, log_mel="log10").shape
(80, 101)

The same arithmetic as transformers 4.57.6 (float64, then float32 at the end), vectorised and run over
blocks of frames, so that a long recording never needs more than its output and one block of frames in
memory (transformers loops frame by frame, and pads the whole waveform first).
"""

from __future__ import annotations

import numpy as np

__all__ = ["hertz_to_mel", "mel_filter_bank", "mel_to_hertz", "power_to_db", "spectrogram", "window_function"]

_BLOCK = 512  # frames per FFT block: bounds the memory of a long recording (~10 MB of temporaries)


def hertz_to_mel(freq: float | np.ndarray, mel_scale: str = "htk") -> float | np.ndarray:
    """Hertz -> mels on the ``"htk"``, ``"kaldi"`` or ``"slaney"`` scale (``audio_utils.hertz_to_mel``)."""
    if mel_scale == "htk":
        return 2595.0 * np.log10(1.0 + (freq / 700.0))
    if mel_scale == "kaldi":
        return 1127.0 * np.log(1.0 + (freq / 700.0))
    if mel_scale != "slaney":
        raise ValueError(f'mel_scale should be one of "htk", "slaney" or "kaldi", got {mel_scale!r}')
    logstep = 27.0 / np.log(6.4)
    mels = 3.0 * np.asarray(freq, dtype=np.float64) / 200.0
    log_region = np.asarray(freq) >= 1000.0
    mels = np.where(log_region, 15.0 + np.log(np.maximum(freq, 1e-30) / 1000.0) * logstep, mels)
    return mels if isinstance(freq, np.ndarray) else float(mels)


def mel_to_hertz(mels: float | np.ndarray, mel_scale: str = "htk") -> float | np.ndarray:
    """Mels -> hertz (``audio_utils.mel_to_hertz``)."""
    if mel_scale == "htk":
        return 700.0 * (np.power(10, mels / 2595.0) - 1.0)
    if mel_scale == "kaldi":
        return 700.0 * (np.exp(mels / 1127.0) - 1.0)
    if mel_scale != "slaney":
        raise ValueError(f'mel_scale should be one of "htk", "slaney" or "kaldi", got {mel_scale!r}')
    logstep = np.log(6.4) / 27.0
    freq = 200.0 * np.asarray(mels, dtype=np.float64) / 3.0
    freq = np.where(np.asarray(mels) >= 15.0, 1000.0 * np.exp(logstep * (np.asarray(mels) - 15.0)), freq)
    return freq if isinstance(mels, np.ndarray) else float(freq)


def mel_filter_bank(num_frequency_bins: int, num_mel_filters: int, min_frequency: float, max_frequency: float,
                    sampling_rate: int, norm: str | None = None, mel_scale: str = "htk",
                    triangularize_in_mel_space: bool = False) -> np.ndarray:
    """The ``(num_frequency_bins, num_mel_filters)`` triangular filters of ``audio_utils.mel_filter_bank``
    (librosa's with ``norm="slaney", mel_scale="slaney"``; Kaldi's with ``mel_scale="kaldi"`` and
    ``triangularize_in_mel_space``)."""
    if norm not in (None, "slaney"):
        raise ValueError(f'norm must be None or "slaney", got {norm!r}')
    mel_min = hertz_to_mel(min_frequency, mel_scale)
    mel_max = hertz_to_mel(max_frequency, mel_scale)
    mel_freqs = np.linspace(mel_min, mel_max, num_mel_filters + 2)
    filter_freqs = mel_to_hertz(mel_freqs, mel_scale)
    if triangularize_in_mel_space:
        bin_width = sampling_rate / ((num_frequency_bins - 1) * 2)
        fft_freqs = hertz_to_mel(bin_width * np.arange(num_frequency_bins), mel_scale)
        filter_freqs = mel_freqs
    else:
        fft_freqs = np.linspace(0, sampling_rate // 2, num_frequency_bins)
    diff = np.diff(filter_freqs)
    slopes = filter_freqs[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    filters = np.maximum(np.zeros(1), np.minimum(down, up))
    if norm == "slaney":
        filters *= (2.0 / (filter_freqs[2:num_mel_filters + 2] - filter_freqs[:num_mel_filters]))[None, :]
    return filters


def window_function(window_length: int, name: str = "hann", periodic: bool = True) -> np.ndarray:
    """``audio_utils.window_function``: a ``"hann"``, ``"hamming"``, ``"povey"`` or ``"boxcar"`` window."""
    length = window_length + 1 if periodic else window_length
    if name == "boxcar":
        window = np.ones(length)
    elif name in ("hamming", "hamming_window"):
        window = np.hamming(length)
    elif name in ("hann", "hann_window"):
        window = np.hanning(length)
    elif name == "povey":
        window = np.power(np.hanning(length), 0.85)
    else:
        raise ValueError(f"unknown window function {name!r}")
    return window[:-1] if periodic else window


def _frame_indices(start: int, count: int, hop: int, frame_length: int, n: int, pad: int,
                   pad_mode: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The sample indices of frames ``start .. start + count`` of a waveform of ``n`` samples centre-padded
    by ``pad`` on each side, and the mask of the indices that fall in constant (zero) padding."""
    index = (start + np.arange(count))[:, None] * hop + np.arange(frame_length)[None, :] - pad
    if pad == 0:
        return index, None
    if pad_mode == "reflect":
        index = np.abs(index)  # x[-i] = x[i]
        index = np.where(index >= n, 2 * (n - 1) - index, index)  # x[n - 1 + i] = x[n - 1 - i]
        return index, None
    if pad_mode == "constant":
        outside = (index < 0) | (index >= n)
        return np.clip(index, 0, n - 1), outside
    raise ValueError(f"pad_mode {pad_mode!r} is not supported (reflect, constant)")


def spectrogram(waveform: np.ndarray, window: np.ndarray, frame_length: int, hop_length: int,
                fft_length: int | None = None, power: float = 1.0, center: bool = True, pad_mode: str = "reflect",
                preemphasis: float | None = None, mel_filters: np.ndarray | None = None,
                mel_floor: float = 1e-10, log_mel: str | None = None, reference: float = 1.0,
                min_value: float = 1e-10, db_range: float | None = None, remove_dc_offset: bool = False,
                dtype: type = np.float32) -> np.ndarray:
    """``audio_utils.spectrogram`` (without dither): ``(frequency bins or mel filters, frames)``."""
    fft_length = fft_length or frame_length
    if len(window) != frame_length:
        raise ValueError(f"the window has {len(window)} samples, the frame {frame_length}")
    if waveform.ndim != 1:
        raise ValueError(f"a waveform has one dimension, got shape {waveform.shape}")
    n = waveform.shape[0]
    pad = frame_length // 2 if center else 0
    if pad and pad_mode == "reflect" and n <= pad:
        raise ValueError(f"{n} samples are too few for a reflect-padded frame of {frame_length}")
    num_frames = 1 + (n + 2 * pad - frame_length) // hop_length
    if num_frames < 1:
        raise ValueError(f"{n} samples are fewer than one frame of {frame_length}")
    if log_mel not in (None, "log", "log10", "dB"):
        raise ValueError(f"unknown log_mel {log_mel!r}")
    if log_mel == "dB" and power not in (1.0, 2.0):
        raise ValueError(f"log_mel 'dB' needs power 1 or 2, got {power}")
    window = window.astype(np.float64)
    out_rows = mel_filters.shape[1] if mel_filters is not None else fft_length // 2 + 1
    # a log spectrogram is stored in ``dtype`` block by block: a long recording's float64 copy never exists
    result = np.empty((out_rows, num_frames), np.float64 if log_mel is None else dtype)
    for start in range(0, num_frames, _BLOCK):
        count = min(_BLOCK, num_frames - start)
        index, outside = _frame_indices(start, count, hop_length, frame_length, n, pad, pad_mode)
        frames = waveform[index].astype(np.float64)
        if outside is not None:
            frames[outside] = 0.0
        if remove_dc_offset:
            frames -= frames.mean(axis=1, keepdims=True)
        if preemphasis is not None:
            frames[:, 1:] -= preemphasis * frames[:, :-1]
            frames[:, 0] *= 1 - preemphasis
        frames *= window
        spec = np.fft.rfft(frames, n=fft_length, axis=1)
        # transformers keeps the complex spectrum as complex64 before taking its magnitude
        spec = np.abs(spec.astype(np.complex64), dtype=np.float64) ** power
        if mel_filters is not None:
            spec = np.maximum(mel_floor, spec @ mel_filters)
        if log_mel == "log":
            spec = np.log(spec)
        elif log_mel == "log10":
            spec = np.log10(spec)
        elif log_mel == "dB":
            spec = power_to_db(spec, reference, min_value, None, factor=10.0 if power == 2.0 else 20.0)
        result[:, start:start + count] = spec.T
    if log_mel == "dB" and db_range is not None:  # the range below the whole spectrogram's maximum
        np.maximum(result, result.max() - db_range, out=result)
    return result


def power_to_db(spectrogram: np.ndarray, reference: float = 1.0, min_value: float = 1e-10,
                db_range: float | None = None, factor: float = 10.0) -> np.ndarray:
    """``audio_utils.power_to_db`` (``factor=20``: ``amplitude_to_db``)."""
    reference = max(min_value, reference)
    spectrogram = np.clip(spectrogram, a_min=min_value, a_max=None)
    spectrogram = factor * (np.log10(spectrogram) - np.log10(reference))
    if db_range is not None:
        spectrogram = np.clip(spectrogram, a_min=spectrogram.max() - db_range, a_max=None)
    return spectrogram
