"""Signal processing: DFT (17, 20), STFT, the Hann/Hamming/Blackman windows and MelWeightMatrix.

Complex values are a trailing axis of 2 (real, imaginary), as ONNX stores them. A DFT is a
matmul with a cos/sin matrix built on the host: exact, device-friendly, and needs no complex
dtype on any backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from .registry import register


def _dft_matrices(n_in: int, n: int, bins: int, onesided_inverse: bool) -> tuple:
    """cos and sin of 2 pi k t / n as (n_in, bins) matrices; inputs past ``n`` are dropped (zero rows)."""
    t = np.arange(n_in)[:, None]  # input samples (or frequencies, inverse)
    k = np.arange(bins)[None, :]  # output frequencies (or samples, inverse)
    angle = 2 * np.pi * ((t * k) % n) / n
    cos, sin = np.cos(angle), np.sin(angle)
    if onesided_inverse:  # Hermitian half: bins 1..ceil(n/2)-1 stand for themselves and their mirror
        w = np.full((n_in, 1), 2.0)
        w[0] = 1
        if n % 2 == 0 and n // 2 < n_in:
            w[n // 2] = 1
        cos, sin = cos * w, sin * w
    keep = np.arange(n_in)[:, None] < (n // 2 + 1 if onesided_inverse else n)
    return cos * keep, sin * keep


def dft(B: Any, x: Any, axis: int, length: int | None, *, inverse: bool, onesided: bool) -> Any:
    """The DFT of ``x`` (..., 1|2) along ``axis``: forward, inverse (normalised by 1/n), one-sided."""
    shape = B.shape(x)
    rank = len(shape)
    axis %= rank
    dtype = B.dtype(x)
    n_in = shape[axis]
    n = length or (2 * (n_in - 1) if inverse and onesided else n_in)
    perm = [i for i in range(rank - 1) if i != axis] + [axis, rank - 1]
    x = B.transpose(x, perm)  # (..., n_in, 1|2)
    lead = B.shape(x)[:-2]
    parts = B.split(x, [1, 1], -1) if shape[-1] == 2 else [x, None]
    re, im = (None if p is None else B.reshape(p, (*lead, n_in)) for p in parts)
    if inverse and onesided:
        cos, sin = _dft_matrices(n_in, n, n, True)
        c, s = B.asarray((cos / n).astype(dtype)), B.asarray((sin / n).astype(dtype))
        out = B.matmul(re, c) if im is None else B.subtract(B.matmul(re, c), B.matmul(im, s))
        outs = [out]
    else:
        bins = n // 2 + 1 if onesided and not inverse else n
        cos, sin = _dft_matrices(n_in, n, bins, False)
        scale = 1 / n if inverse else 1.0
        c, s = B.asarray((cos * scale).astype(dtype)), B.asarray((sin * scale).astype(dtype))
        sign = 1 if inverse else -1  # e^{sign i angle}: (re + i im)(cos + sign i sin)
        out_re, out_im = B.matmul(re, c), B.multiply(B.matmul(re, s), B.full((), sign, dtype))
        if im is not None:
            out_re = B.subtract(out_re, B.multiply(B.matmul(im, s), B.full((), sign, dtype)))
            out_im = B.add(out_im, B.matmul(im, c))
        outs = [out_re, out_im]
    y = B.stack(outs, -1)  # (..., bins, 1|2)
    inv = [0] * rank
    for i, p in enumerate(perm):
        inv[p] = i
    return B.transpose(y, inv)


@register("DFT", 17, static_inputs=(1,))
def dft_17(
    B: Any, input: Any, dft_length: Any = None, *, axis: int = 1, inverse: int = 0, onesided: int = 0
) -> Any:
    length = None if dft_length is None else int(dft_length)
    return dft(B, input, axis, length, inverse=bool(inverse), onesided=bool(onesided))


@register("DFT", 20, static_inputs=(1, 2))
def dft_20(
    B: Any, input: Any, dft_length: Any = None, axis: Any = None, *, inverse: int = 0, onesided: int = 0
) -> Any:
    """``axis`` became an input (default -2)."""
    length = None if dft_length is None else int(dft_length)
    return dft(
        B, input, -2 if axis is None else int(axis), length, inverse=bool(inverse), onesided=bool(onesided)
    )


@register("STFT", 17, static_inputs=(1, 3))
def stft_17(B: Any, signal: Any, frame_step: Any, window: Any = None, frame_length: Any = None, *,
            onesided: int = 1) -> Any:  # fmt: skip
    """Frames of (batch, length, 1|2) every ``frame_step`` samples, windowed, then DFT'd."""
    step = int(frame_step)
    size = int(frame_length) if frame_length is not None else B.shape(window)[0]
    frames = 1 + (B.shape(signal)[1] - size) // step
    index = np.arange(frames)[:, None] * step + np.arange(size)[None, :]
    x = B.take(signal, B.asarray(index.astype(np.int64)), 1)  # (batch, frames, size, 1|2)
    if window is not None:
        x = B.multiply(x, B.reshape(B.astype(window, B.dtype(signal)), (size, 1)))
    return dft(B, x, 2, size, inverse=False, onesided=bool(onesided))


def _window(B: Any, size: Any, periodic: int, output_datatype: int, coefficients: tuple[float, ...]) -> Any:
    """sum_k (-1)^k a_k cos(2 pi k n / N): N is the size when periodic, else size - 1."""
    size = int(size)
    n = np.arange(size, dtype=np.float64)
    denom = size if periodic else size - 1
    w = sum((-1) ** k * a * np.cos(2 * np.pi * k * n / denom) for k, a in enumerate(coefficients))
    return B.asarray(np.asarray(w).astype(helper.tensor_dtype_to_np_dtype(output_datatype)))


@register("HannWindow", 17, static_inputs=(0,))
def hann_window_17(B: Any, size: Any, *, output_datatype: int = 1, periodic: int = 1) -> Any:
    return _window(B, size, periodic, output_datatype, (0.5, 0.5))


@register("HammingWindow", 17, static_inputs=(0,))
def hamming_window_17(B: Any, size: Any, *, output_datatype: int = 1, periodic: int = 1) -> Any:
    return _window(B, size, periodic, output_datatype, (25 / 46, 21 / 46))


@register("BlackmanWindow", 17, static_inputs=(0,))
def blackman_window_17(B: Any, size: Any, *, output_datatype: int = 1, periodic: int = 1) -> Any:
    return _window(B, size, periodic, output_datatype, (0.42, 0.5, 0.08))


@register("MelWeightMatrix", 17, static_inputs=(0, 1, 2, 3, 4))
def mel_weight_matrix_17(B: Any, num_mel_bins: Any, dft_length: Any, sample_rate: Any, lower_edge_hertz: Any,
                         upper_edge_hertz: Any, *, output_datatype: int = 1) -> Any:  # fmt: skip
    """Triangular filters evenly spaced on the mel scale, as (dft_length // 2 + 1, num_mel_bins)."""
    mels, n_fft, rate = int(num_mel_bins), int(dft_length), int(sample_rate)

    def to_mel(hz: Any) -> Any:
        return 2595 * np.log1p(hz / 700) / np.log(10)

    low, high = to_mel(float(lower_edge_hertz)), to_mel(float(upper_edge_hertz))
    points = np.arange(mels + 2) * ((high - low) / (mels + 2)) + low
    hz = 700 * np.expm1(points / 2595 * np.log(10))
    edges = (((n_fft + 1) * hz) // rate).astype(int)
    out = np.zeros((n_fft // 2 + 1, mels))
    for i in range(mels):
        lo, mid, hi = edges[i : i + 3]
        if mid == lo:
            out[mid, i] = 1
        else:
            out[lo : mid + 1, i] = (np.arange(lo, mid + 1) - lo) / (mid - lo)
        if hi > mid:
            out[mid:hi, i] = (hi - np.arange(mid, hi)) / (hi - mid)
    return B.asarray(out.astype(helper.tensor_dtype_to_np_dtype(output_datatype)))
