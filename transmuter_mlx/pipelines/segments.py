"""Segmentation post-processing of transformers' image processors, in numpy: a class per pixel (semantic),
or segments of mask queries (panoptic, instance).

>>> logits = np.array([[[2.0, 0.0]], [[0.0, 1.0]]], np.float32)          # 2 labels over a 1x2 map
>>> semantic_map(logits, (1, 4)).tolist()
[[0, 0, 1, 1]]

Each function is its transformers 4.57.6 counterpart on one image's outputs (no batch axis), resized to
the image with PyTorch's interpolation (``resize.py``), in float32 as torch computes it:

- :func:`semantic_map`: SegFormer's, DPT's ``post_process_semantic_segmentation`` (a logit map per label);
- :func:`query_semantic_map`: DETR's and (Mask2)MaskFormer's, from a class and a mask per query;
- :func:`mask_segments`: the panoptic post-processing of DETR and (Mask2)MaskFormer, and DETR's instance one;
- :func:`ranked_segments`: (Mask2)MaskFormer's instance post-processing.

A family whose mask logits are resized before the sigmoid (Mask2Former: to 384x384) passes that size
as ``mask_logits_size``.
"""

from __future__ import annotations

import numpy as np

from .resize import interpolate, nearest
from .torch_topk import topk_unsorted

__all__ = ["mask_segments", "query_semantic_map", "ranked_segments", "semantic_map"]

_BUDGET = 1 << 24  # float32 values (64 MB) of resized label maps held at once


def semantic_map(logits: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``post_process_semantic_segmentation`` of SegFormer, DPT, BEiT, MobileViT: the label id of each pixel,
    ``logits`` (labels, h, w) resized to ``size`` (height, width), argmax (ties: the lowest id, as torch)."""
    return _resized_argmax(np.asarray(logits, np.float32), size)


def query_semantic_map(logits: np.ndarray, mask_logits: np.ndarray, size: tuple[int, int],
                       mask_logits_size: tuple[int, int] | None = None) -> np.ndarray:
    """``post_process_semantic_segmentation`` of DETR and (Mask2)MaskFormer: each label's map is the sum over
    the queries of the query's probability of that label (softmax, "no object" left out) times its mask
    (sigmoid of ``mask_logits`` (queries, h, w), first resized to ``mask_logits_size``), resized to
    ``size``; each pixel takes the label of the largest."""
    probs = _softmax(logits)[:, :-1]
    masks = _sigmoid(_mask_logits(mask_logits, mask_logits_size))
    maps = np.tensordot(probs.T, masks, axes=1)  # einsum("qc, qhw -> chw")
    return _resized_argmax(maps.astype(np.float32, copy=False), size)


def _resized_argmax(maps: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``interpolate(maps, size, "bilinear").argmax(0)``, resizing a block of labels at a time (a large image
    by many labels would hold gigabytes); a tie keeps the lower label, as one argmax does."""
    step = max(1, _BUDGET // max(1, int(size[0]) * int(size[1])))
    best = label = None
    for start in range(0, len(maps), step):
        resized = interpolate(maps[start:start + step], size, "bilinear")
        top, arg = resized.max(axis=0), resized.argmax(axis=0) + start
        if best is None:
            best, label = top, arg
        else:
            better = top > best
            best, label = np.where(better, top, best), np.where(better, arg, label)
    if label is None:
        raise ValueError("segmentation: the model gave no label maps")
    return label


def _softmax(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, np.float32)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _mask_logits(mask_logits: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    masks = np.asarray(mask_logits, np.float32)
    return masks if size is None else interpolate(masks, size, "bilinear")


def mask_segments(logits: np.ndarray, pred_masks: np.ndarray, size: tuple[int, int], threshold: float,
                  mask_threshold: float, overlap_mask_area_threshold: float,
                  mask_logits_size: tuple[int, int] | None = None) -> tuple[np.ndarray, list[dict]]:
    """``post_process_panoptic_segmentation`` of DETR (and DETR's instance twin: without labels to fuse, as
    the pipeline calls them, they agree) and of Mask2Former, which first resizes the mask logits to
    ``mask_logits_size`` (384x384), of one image: ``(segmentation, segments_info)``.

    ``logits`` (queries, labels + 1: the last is "no object"), ``pred_masks`` (queries, h, w). A query is
    kept when its best class (softmax) is an object scoring over ``threshold``; its mask probabilities
    (sigmoid, resized to ``size``) weighted by that score vote for each pixel; a query's segment is
    the pixels it wins, kept when there are some, when some of its weighted probabilities reach
    ``mask_threshold`` and when the pixels won are over ``overlap_mask_area_threshold`` of those.
    Segments are numbered from 1 in query order; ``segmentation`` is 0 elsewhere (-1 everywhere when no
    query is kept); ``segments_info`` items are ``{"id", "label_id", "score"}`` (score rounded to 6 places).
    """
    logits = np.asarray(logits, np.float32)
    probs = _softmax(logits)
    scores, labels = probs.max(axis=-1), probs.argmax(axis=-1)
    keep = (labels != logits.shape[-1] - 1) & (scores > threshold)
    if not keep.any():
        return np.full(size, -1, np.int32), []
    masks = _sigmoid(_mask_logits(np.asarray(pred_masks, np.float32)[keep], mask_logits_size))
    weighted = interpolate(masks, size, "bilinear") * scores[keep][:, None, None]
    winner = weighted.argmax(axis=0)
    segmentation = np.zeros(size, np.int32)
    segments: list[dict] = []
    for k, (label, score) in enumerate(zip(labels[keep], scores[keep], strict=True)):
        won = winner == k
        area, original = int(won.sum()), int((weighted[k] >= mask_threshold).sum())
        if area == 0 or original == 0 or not np.float32(area) / np.float32(original) > overlap_mask_area_threshold:
            continue
        segmentation[won] = len(segments) + 1
        segments.append({"id": len(segments) + 1, "label_id": int(label), "score": round(float(score), 6)})
    return segmentation, segments


def ranked_segments(logits: np.ndarray, mask_logits: np.ndarray, size: tuple[int, int], threshold: float,
                    mask_logits_size: tuple[int, int] | None = None) -> tuple[np.ndarray, list[dict]]:
    """``post_process_instance_segmentation`` of (Mask2)MaskFormer, of one image: ``(segmentation,
    segments_info)``.

    ``logits`` (queries, labels + 1: the last is "no object"), ``mask_logits`` (queries, h, w), first
    resized to ``mask_logits_size``. The (query, label) pairs of the ``queries`` highest probabilities
    (softmax without "no object"; a query may come twice, with two labels) in the order of
    ``torch.topk(sorted=False)`` (:mod:`.torch_topk`); a pair's mask is where its query's mask logits are
    over 0, its score the label's probability times the mean mask probability (sigmoid) over that mask.
    In that order, a pair scoring at least ``threshold`` whose mask, resized to ``size`` (nearest), has
    pixels paints them with its id (from 0; a later segment paints over an earlier one), -1 elsewhere.
    ``segments_info`` items are ``{"id", "label_id", "score"}`` (score rounded to 6 places). transformers
    takes ``mask_threshold`` and ``overlap_mask_area_threshold`` here and ignores them.
    """
    probs = _softmax(logits)[:, :-1]
    queries, labels = probs.shape
    top = topk_unsorted(probs.reshape(-1), queries)
    masks = _mask_logits(mask_logits, mask_logits_size)
    binary = masks > 0
    area = binary.reshape(queries, -1).sum(axis=1, dtype=np.float32)
    covered = (_sigmoid(masks) * binary).reshape(queries, -1).sum(axis=1, dtype=np.float32)
    mask_scores = covered / (area + np.float32(1e-6))
    segmentation = np.full(size, -1, np.int32)
    segments: list[dict] = []
    for pair in top.tolist():
        query, label = divmod(pair, labels)
        score = float(probs[query, label] * mask_scores[query])
        if score < threshold:
            continue
        mask = nearest(binary[query], size)
        if not mask.any():
            continue
        segmentation[mask] = len(segments)
        segments.append({"id": len(segments), "label_id": label, "score": round(score, 6)})
    return segmentation, segments
