"""Audio in: one input (an array, a ``{"raw"/"array", "sampling_rate"}`` dict, a path, a URL or encoded bytes)
-> a float32 mono waveform at the model's sampling rate.

>>> import numpy as np
>>> load_audio(np.zeros(4, np.float32), 16000).tolist()
[0.0, 0.0, 0.0, 0.0]
>>> load_audio({"array": np.ones(8000), "sampling_rate": 8000}, 16000).shape
(16000,)
>>> load_audio(np.array([0, 16384], np.int16), 16000).tolist()
[0.0, 0.5]
>>> load_audio(np.array([0.0, np.nan]), 16000, "automatic-speech-recognition", 3)
Traceback (most recent call last):
ValueError: automatic-speech-recognition: input 3: the audio has NaN or infinite samples (first at sample 1)

What transformers' audio pipelines accept, and how it differs here:

- an array is taken as sampled at the model's rate (``sampling_rate``), as transformers takes it. float32 and
  float64 are samples in [-1, 1]; int16 is divided by 32768 and int32 by 2**31 (transformers computes on the
  integers as they are, which no model was trained on); other dtypes are a TypeError;
- a dict ``{"raw" or "array": samples, "sampling_rate": sr}`` (the ``datasets`` form) is resampled to the
  model's rate with soxr (quality ``"HQ"``); transformers resamples with torchaudio's windowed-sinc
  ``functional.resample`` (and fails without torchaudio). Both are band-limited resamplers, not bit for bit
  the same: on speech from 48 to 16 kHz their spectra below 7 kHz agree within 0.4% and 99% of the samples
  within 5e-4; they differ most near the new Nyquist frequency, where their filters roll off differently
  (8e-3 at most on a clip peaking at 0.29; tests/test_audio_input.py measures it against a transcription
  of torchaudio's kernel). Other keys (``path``, the CTC pipeline's ``stride``) are left to the pipeline;
- a path, an http(s) URL or encoded bytes are decoded with libsndfile (soundfile: WAV, FLAC, OGG/Vorbis,
  Opus, MP3 with libsndfile >= 1.1), downmixed to mono (the mean of the channels, as ffmpeg's ``-ac 1``)
  and resampled with soxr; another format goes through ffmpeg when it is installed (``f32le`` mono at the
  model's rate, exactly transformers' ``ffmpeg_read``). transformers always decodes with ffmpeg;
- a 2-D array is several channels: as transformers, the mean of the channels is taken (transformers reads
  the first axis as the channels; here the shorter axis is, so ``(samples, channels)`` from soundfile works
  too; a square array takes the first axis, as transformers);
- empty audio, NaN or infinite samples, more than 2 dimensions, a dict without its keys, a corrupt file or a
  format that needs ffmpeg when ffmpeg is missing are a ValueError naming the task and the input index.

A stream (an iterator or generator of sample blocks) is returned as it is: :func:`iter_audio_blocks`
checks (and resamples) its blocks as a streaming pipeline reads them. A long recording is decoded once into
one float32 array (a file at another rate is resampled block by block into it).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

__all__ = ["AUDIO_TYPES", "iter_audio_blocks", "load_audio", "resample"]

#: the types of one audio input (a list of them is a batch)
AUDIO_TYPES: tuple[type, ...] = (np.ndarray, dict, str, os.PathLike, bytes, bytearray)

QUALITY = "HQ"  # soxr's quality: "VHQ" costs ~2x for differences far below the models' noise floor
_TIMEOUT = 30.0  # seconds to wait for an http(s) download
_BLOCK = 1 << 20  # frames per block when a file is resampled while it is read
_INT_SCALE = {np.dtype(np.int16): 32768.0, np.dtype(np.int32): 2147483648.0}


def _where(task: str, index: int) -> str:
    return f"{task}: input {index}" if task else f"input {index}"


def load_audio(item: Any, sampling_rate: int, task: str = "", index: int = 0) -> np.ndarray:
    """``item`` as a float32 mono 1-D waveform at ``sampling_rate`` (see the module docstring), or an error
    naming ``task`` and input ``index``: ``load_audio("talk.flac", 16000)``, ``load_audio(array, 16000)``.
    A stream (iterator of blocks) comes back unchanged: read it with :func:`iter_audio_blocks`."""
    where = _where(task, index)
    if isinstance(item, np.ndarray):
        return _check(_as_float(item, where), where)
    if isinstance(item, dict):
        samples, rate = _from_dict(item, where)
        return resample(_check(_as_float(samples, where), where), rate, sampling_rate)  # checked as given
    if isinstance(item, (bytes, bytearray, memoryview)):
        return _check(_decode(bytes(item), sampling_rate, where, "the encoded audio"), where)
    if isinstance(item, (str, os.PathLike)):
        return _check(_from_source(item, sampling_rate, where), where)
    if hasattr(item, "__array__") and not isinstance(item, (list, tuple)):  # a torch tensor, an mx.array...
        return _check(_as_float(np.asarray(item), where), where)
    if isinstance(item, Iterator) or (isinstance(item, Iterable) and not isinstance(item, (list, tuple))):
        return item  # a stream: iter_audio_blocks reads it block by block
    raise TypeError(
        f"{where}: audio must be a numpy array, a dict with 'raw' (or 'array') and 'sampling_rate', a path, "
        f"an http(s) URL or encoded bytes, got {type(item).__name__}"
    )


def resample(samples: np.ndarray, rate: int, sampling_rate: int) -> np.ndarray:
    """``samples`` (float32, 1-D) from ``rate`` to ``sampling_rate`` Hz with soxr (unchanged at one rate)."""
    if rate == sampling_rate or samples.shape[0] == 0:
        return samples
    import soxr

    return soxr.resample(samples, rate, sampling_rate, quality=QUALITY)


def iter_audio_blocks(stream: Iterable[Any], sampling_rate: int, task: str = "",
                      index: int = 0) -> Iterator[np.ndarray]:
    """The blocks of a stream, each checked as :func:`load_audio` checks an array and given as float32 mono at
    ``sampling_rate``; a block may be an array (at ``sampling_rate``) or a ``{"raw"/"array", "sampling_rate"}``
    dict (resampled continuously across blocks; the rate may not change within a stream). Empty blocks
    are skipped."""
    where = _where(task, index)
    resampler, stream_rate = None, None
    for number, block in enumerate(stream):
        here = f"{where}: block {number}"
        if isinstance(block, dict):
            samples, rate = _from_dict(block, here)
        elif isinstance(block, np.ndarray) or hasattr(block, "__array__"):
            samples, rate = np.asarray(block), sampling_rate
        else:
            raise TypeError(f"{here}: a block of a stream must be an array or a dict with 'raw' (or 'array') "
                            f"and 'sampling_rate', got {type(block).__name__}")
        if stream_rate is None:
            stream_rate = rate
        elif rate != stream_rate:
            raise ValueError(f"{here}: the sampling rate changed within the stream ({stream_rate} -> {rate} Hz)")
        samples = _as_float(samples, here)
        if samples.shape[0] == 0:
            continue
        _check(samples, here)
        if rate != sampling_rate:
            if resampler is None:
                import soxr

                resampler = soxr.ResampleStream(rate, sampling_rate, 1, dtype="float32", quality=QUALITY)
            samples = resampler.resample_chunk(samples)
        if samples.shape[0]:
            yield samples
    if resampler is not None:
        tail = resampler.resample_chunk(np.zeros(0, np.float32), last=True)
        if tail.shape[0]:
            yield tail


# ---------------------------------------------------------------------- arrays
def _as_float(samples: Any, where: str) -> np.ndarray:
    """An array of samples as float32 mono (integers scaled to [-1, 1), channels averaged)."""
    samples = np.asarray(samples)
    if samples.dtype in _INT_SCALE:
        samples = samples.astype(np.float32) / np.float32(_INT_SCALE[samples.dtype])
    elif samples.dtype.kind != "f":
        raise TypeError(f"{where}: audio samples must be float32, float64, int16 or int32, got {samples.dtype}")
    if samples.ndim == 2:
        axis = 1 if samples.shape[1] < samples.shape[0] else 0  # the channels: the shorter axis
        samples = samples.mean(axis=axis, dtype=np.float64 if samples.dtype == np.float64 else np.float32)
    elif samples.ndim != 1:
        raise ValueError(f"{where}: audio must be 1-D samples (or 2-D channels x samples), got shape "
                         f"{samples.shape}")
    return np.ascontiguousarray(samples, dtype=np.float32)


def _check(samples: np.ndarray, where: str) -> np.ndarray:
    if samples.shape[0] == 0:
        raise ValueError(f"{where}: the audio is empty (0 samples)")
    if not np.isfinite(samples).all():
        first = int(np.flatnonzero(~np.isfinite(samples))[0])
        raise ValueError(f"{where}: the audio has NaN or infinite samples (first at sample {first})")
    return samples


def _from_dict(item: dict, where: str) -> tuple[Any, int]:
    samples = item.get("raw", item.get("array"))
    rate = item.get("sampling_rate")
    if samples is None or rate is None:
        raise ValueError(f"{where}: an audio dict needs a 'raw' (or 'array') key with the samples and a "
                         f"'sampling_rate' key with their rate, got the keys {sorted(item)}")
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer, float)) or rate <= 0 or rate != int(rate):
        raise ValueError(f"{where}: 'sampling_rate' must be a positive whole number of Hz, got {rate!r}")
    return samples, int(rate)


# ---------------------------------------------------------------------- files
def _from_source(source: str | os.PathLike, sampling_rate: int, where: str) -> np.ndarray:
    if isinstance(source, str) and source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=_TIMEOUT) as response:
                data = response.read()
        except (OSError, ValueError) as error:
            raise OSError(f"{where}: could not download {source!r}: {error}") from error
        return _decode(data, sampling_rate, where, f"the audio at {source!r}")
    path = os.fspath(source)
    path = path.decode() if isinstance(path, bytes) else path
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{where}: no audio file {path!r}")
    return _decode(path, sampling_rate, where, f"the audio file {path!r}")


def _decode(source: str | bytes, sampling_rate: int, where: str, what: str) -> np.ndarray:
    """A file (path or bytes) through libsndfile, else ffmpeg; mono float32 at ``sampling_rate``."""
    import soundfile

    try:
        with soundfile.SoundFile(source if isinstance(source, str) else io.BytesIO(source)) as f:
            return _read_resampled(f, sampling_rate)
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as error:
        reason = str(error)
    if shutil.which("ffmpeg") is None:
        raise ValueError(f"{where}: {what} is corrupt or in a format libsndfile cannot read ({reason}), and "
                         "ffmpeg, which reads the other formats, is not installed")
    return _ffmpeg(source, sampling_rate, where, what)


def _read_resampled(f: Any, sampling_rate: int) -> np.ndarray:
    """A whole sound file as mono float32 at ``sampling_rate``: read (and resampled) block by block into one
    array, so that a long recording is in memory once."""
    if f.samplerate == sampling_rate:
        if f.channels == 1:
            return f.read(dtype="float32", always_2d=False)
        return f.read(dtype="float32", always_2d=True).mean(axis=1, dtype=np.float32)
    import soxr

    frames = f.frames
    out = np.empty(int(np.ceil(frames * sampling_rate / f.samplerate)) + 64, np.float32)
    stream = soxr.ResampleStream(f.samplerate, sampling_rate, 1, dtype="float32", quality=QUALITY)
    filled, done = 0, 0
    for block in f.blocks(blocksize=_BLOCK, dtype="float32", always_2d=True):
        done += block.shape[0]
        mono = block[:, 0] if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float32)
        piece = stream.resample_chunk(np.ascontiguousarray(mono), last=done >= frames)
        if filled + piece.shape[0] > out.shape[0]:
            out = np.concatenate([out[:filled], np.empty(piece.shape[0] + 64, np.float32)])
        out[filled:filled + piece.shape[0]] = piece
        filled += piece.shape[0]
    if done < frames or frames == 0:  # the flush, when the last block was not marked last
        piece = stream.resample_chunk(np.zeros(0, np.float32), last=True)
        out = np.concatenate([out[:filled], piece])
        filled += piece.shape[0]
    return out[:filled]


def _ffmpeg(source: str | bytes, sampling_rate: int, where: str, what: str) -> np.ndarray:
    """transformers' ``ffmpeg_read``: mono ``f32le`` at ``sampling_rate`` from ffmpeg."""
    command = ["ffmpeg", "-i", source if isinstance(source, str) else "pipe:0", "-ac", "1",
               "-ar", str(sampling_rate), "-f", "f32le", "-hide_banner", "-loglevel", "quiet", "pipe:1"]
    try:
        if isinstance(source, str):
            result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        else:
            result = subprocess.run(command, input=source, capture_output=True, check=False)
    except OSError as error:
        raise ValueError(f"{where}: could not run ffmpeg to decode {what}: {error}") from error
    audio = np.frombuffer(result.stdout, np.float32)
    if audio.shape[0] == 0:
        raise ValueError(f"{where}: {what} is corrupt or in a format neither libsndfile nor ffmpeg reads")
    return audio.copy()
