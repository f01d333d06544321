"""Whisper's token timestamps from cross attentions, for word timestamps: transformers 4.57.6
``WhisperGenerationMixin._extract_token_timestamps`` (with ``_median_filter`` and ``_dynamic_time_warping``)
in numpy.

The cross attentions of the alignment heads (``generation_config.alignment_heads``: [layer, head] pairs) are
normalised over the tokens, median-filtered over the audio frames, averaged over the heads, and aligned to the
frames by dynamic time warping: a token starts at the frame where the path first reaches it.

Signatures (what the Whisper recognizer calls)::

    token_timestamps(cross_attentions, alignment_heads, *, num_input_ids, num_frames=None, beam_indices=None,
                     median_filter_width=7, time_precision=0.02) -> np.ndarray
        cross_attentions: the decoding's cross attentions, either per step then per layer
            (``steps[s][layer]``: (batch, heads, tokens of that step, frames), the first step holding the
            ``num_input_ids`` prompt tokens: transformers' ``generate_outputs.cross_attentions``), or per layer
            already joined over the steps (``layers[layer]``: (batch, heads, tokens, frames)).
        num_input_ids: the length of the decoder prompt (<|startoftranscript|> ... ): those tokens get 0.0
        num_frames: the mel frames of the audio (the feature extractor's attention_mask.sum(-1)): an int, or
            one per batch row; the attentions are cut to num_frames // 2 encoder frames. None: all frames.
        beam_indices: (batch, steps) with -1 after the end, for beam search (as transformers' generate output)
        -> float32 (batch, tokens + 1): the start time in seconds of each token of the sequences (prompt
           included; the last token, whose cross attention is not computed, repeats the one before).
    token_timestamps_from_weights(weights, *, num_input_ids, num_frames=None, median_filter_width=7,
                                  time_precision=0.02) -> np.ndarray
        the same from the alignment heads' weights (batch, alignment heads, tokens, frames), selected already.
    median_filter(x, filter_width) -> np.ndarray ;  dynamic_time_warping(matrix) -> (text_indices, time_indices)

The result is the ``token_timestamps`` of a window that whisper_text.decode_asr needs for
``return_timestamps="word"``.

>>> attention = np.array([[1, 1, 0, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 1.0]])   # 3 tokens, 5 frames
>>> text, time = dynamic_time_warping(-attention)   # the path: (token, frame) steps
>>> text.tolist(), time.tolist()
([0, 0, 1, 1, 1, 2, 2], [0, 1, 1, 2, 3, 3, 4])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["dynamic_time_warping", "median_filter", "select_alignment_heads", "token_timestamps",
           "token_timestamps_from_weights"]


def median_filter(x: np.ndarray, filter_width: int) -> np.ndarray:
    """Median over windows of ``filter_width`` (odd) along the last axis, the edges reflected
    (transformers' ``_median_filter``); an axis not longer than half the width is returned as is."""
    if filter_width <= 0 or filter_width % 2 != 1:
        raise ValueError(f"filter_width should be an odd number, got {filter_width}")
    pad = filter_width // 2
    x = np.asarray(x)
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    # a sort, not np.median: NaN (a constant column's 0/0) is sorted last, as torch sorts it
    return np.sort(sliding_window_view(padded, filter_width, axis=-1), axis=-1)[..., pad]


def dynamic_time_warping(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through a (tokens, frames) cost matrix: its (text_indices, time_indices),
    as transformers' ``_dynamic_time_warping`` (float32 costs, its tie rules: diagonal, then up, else left).

    The costs are filled an anti-diagonal at a time (each cell needs only the two diagonals before it), with
    the same float64 sums rounded to float32 as the cell-by-cell loop.
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"matrix: expected (tokens, frames), got shape {matrix.shape}")
    n, m = matrix.shape
    cost = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    trace = np.full((n + 1, m + 1), -1.0, dtype=np.float32)
    cost[0, 0] = 0
    for d in range(2, n + m + 1):
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
        take0 = (c0 < c1) & (c0 < c2)
        take1 = ~take0 & (c1 < c0) & (c1 < c2)
        cost[i, j] = matrix[i - 1, j - 1] + np.where(take0, c0, np.where(take1, c1, c2))
        trace[i, j] = np.where(take0, 0, np.where(take1, 1, 2))

    i, j = n, m
    trace[0, :] = 2
    trace[:, 0] = 1
    text_indices, time_indices = [], []
    while i > 0 or j > 0:
        text_indices.append(i - 1)
        time_indices.append(j - 1)
        step = trace[i, j]
        if step == 0:
            i -= 1
            j -= 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    return np.array(text_indices)[::-1], np.array(time_indices)[::-1]


def select_alignment_heads(cross_attentions: Sequence[Any], alignment_heads: Sequence[Sequence[int]]) -> np.ndarray:
    """The alignment heads' cross attentions, joined over the steps: (batch, heads, tokens, frames).

    ``cross_attentions``: per step then per layer (``steps[s][layer]``), or per layer (4-D arrays).
    """
    if not len(cross_attentions):
        raise ValueError("cross_attentions: empty (no decoding step)")
    heads = [(int(layer), int(head)) for layer, head in alignment_heads]
    if not heads:
        raise ValueError("alignment_heads: empty")
    per_step = isinstance(cross_attentions[0], Sequence) and not isinstance(cross_attentions[0], np.ndarray)
    layers = sorted({layer for layer, _ in heads})
    joined = {}
    for layer in layers:
        try:
            parts = [np.asarray(step[layer]) for step in cross_attentions] if per_step else [
                np.asarray(cross_attentions[layer])]
        except IndexError:
            raise ValueError(f"alignment_heads: layer {layer} is not among the cross attentions' layers") from None
        for s, part in enumerate(parts):
            if part.ndim != 4:
                where = f"step {s}, layer {layer}" if per_step else f"layer {layer}"
                raise ValueError(f"cross_attentions ({where}): expected (batch, heads, tokens, frames), got "
                                 f"shape {part.shape}")
        joined[layer] = np.concatenate(parts, axis=2) if len(parts) > 1 else parts[0]
    for layer, head in heads:
        if not 0 <= head < joined[layer].shape[1]:
            raise ValueError(f"alignment_heads: head {head} of layer {layer} is out of its "
                             f"{joined[layer].shape[1]} heads")
    return np.stack([joined[layer][:, head] for layer, head in heads], axis=1)


def token_timestamps(
    cross_attentions: Sequence[Any],
    alignment_heads: Sequence[Sequence[int]],
    *,
    num_input_ids: int,
    num_frames: int | Sequence[int] | np.ndarray | None = None,
    beam_indices: np.ndarray | None = None,
    median_filter_width: int = 7,
    time_precision: float = 0.02,
) -> np.ndarray:
    """Start time of every token of the generated sequences, float32 (batch, tokens + 1) (see the module)."""
    weights = select_alignment_heads(cross_attentions, alignment_heads)
    if beam_indices is not None:
        weights = _follow_beams(weights, np.asarray(beam_indices), num_input_ids)
    return token_timestamps_from_weights(weights, num_input_ids=num_input_ids, num_frames=num_frames,
                                         median_filter_width=median_filter_width, time_precision=time_precision)


def _follow_beams(weights: np.ndarray, beam_indices: np.ndarray, num_input_ids: int) -> np.ndarray:
    """Each returned sequence's rows from the beam it came from at each step, up to the longest sequence
    (beam search may return one that ended earlier than the steps run)."""
    if beam_indices.ndim != 2:
        raise ValueError(f"beam_indices: expected (sequences, steps), got shape {beam_indices.shape}")
    weight_length = int((beam_indices != -1).sum(-1).max())
    beams = beam_indices[:, :weight_length]
    if num_input_ids > 1:  # the first step (prefill) holds num_input_ids tokens, all of the first beam's
        beams = np.concatenate([np.repeat(beams[:, :1], num_input_ids - 1, axis=1), beams], axis=1)
    beams = np.where(beams == -1, 0, beams)  # after a sequence's end: any row (its timestamps are cut)
    if beams.shape[1] > weights.shape[2] or (beams.size and beams.max() >= weights.shape[0]):
        raise ValueError(f"beam_indices {beam_indices.shape} do not fit cross attentions of {weights.shape[0]} "
                         f"beams and {weights.shape[2]} tokens")
    return np.stack([weights[beams[:, k], :, k, :] for k in range(beams.shape[1])], axis=2)


def token_timestamps_from_weights(
    weights: np.ndarray,
    *,
    num_input_ids: int,
    num_frames: int | Sequence[int] | np.ndarray | None = None,
    median_filter_width: int = 7,
    time_precision: float = 0.02,
) -> np.ndarray:
    """Token start times from the alignment heads' weights (batch, heads, tokens, frames): float32
    (batch, tokens + 1), the ``num_input_ids`` prompt tokens at 0.0 and the last token repeating the one before.
    """
    weights = np.asarray(weights)
    if weights.ndim != 4:
        raise ValueError(f"weights: expected (batch, heads, tokens, frames), got shape {weights.shape}")
    if not isinstance(num_input_ids, int | np.integer) or not 0 <= num_input_ids <= weights.shape[2]:
        raise ValueError(f"num_input_ids: expected an int in [0, {weights.shape[2]}], got {num_input_ids!r}")
    batch_size, _, length, _ = weights.shape
    timestamps = np.zeros((batch_size, length + 1), dtype=np.float32)
    frames = _frames_per_row(num_frames, batch_size)
    weights = weights[:, :, num_input_ids:, :]  # the prompt's tokens are not aligned (0.0, as OpenAI's)
    if weights.shape[2] == 0:
        return timestamps
    for row in range(batch_size):
        matrix = weights[row] if frames is None else weights[row, ..., : frames[row] // 2]
        # normalised over the tokens, per head and frame (torch.std unbiased=False), then smoothed over frames
        matrix = median_filter(_normalized(matrix), median_filter_width).mean(axis=0)
        text_indices, time_indices = dynamic_time_warping(-matrix.astype(np.float64))
        jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
        jump_times = time_indices[jumps] * time_precision
        # the last token has no cross attention (generation stops at it): it repeats the one before
        timestamps[row] = np.concatenate([np.zeros(num_input_ids), jump_times, jump_times[-1:]])
    return timestamps


def _normalized(matrix: np.ndarray) -> np.ndarray:
    """(x - mean) / std over the tokens (axis -2), per head and frame, in float32 as transformers (its
    torch.std works in float64: so does this; the mean is the float64 one rounded to float32). A frame
    where all tokens attend alike gives NaN (0 / 0), as there."""
    wide = matrix.astype(np.float64)
    mean = wide.mean(axis=-2, keepdims=True)
    std = np.sqrt(np.square(wide - mean).mean(axis=-2, keepdims=True)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (matrix.astype(np.float32) - mean.astype(np.float32)) / std


def _frames_per_row(num_frames: Any, batch_size: int) -> list[int] | None:
    """num_frames per batch row (one value for all, or one per input repeated over its returned sequences)."""
    if num_frames is None:
        return None
    if isinstance(num_frames, int | np.integer):
        return [int(num_frames)] * batch_size
    values = np.asarray(num_frames).reshape(-1)
    if values.size == 0 or not np.issubdtype(values.dtype, np.integer) or batch_size % values.size:
        raise ValueError(f"num_frames: expected an int or one int per input (batch {batch_size}), "
                         f"got {num_frames!r}")
    return np.repeat(values, batch_size // values.size).tolist()
