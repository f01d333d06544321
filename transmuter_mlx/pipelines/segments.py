"""Segmentation post-processing of transformers' image processors, in numpy: a class per pixel (semantic),
or segments of mask queries (the panoptic post-processing of DETR and Mask2Former, DETR's instance one).

>>> logits = np.array([[[2.0, 0.0]], [[0.0, 1.0]]], np.float32)          # 2 labels over a 1x2 map
>>> semantic_map(logits, (1, 4)).tolist()
[[0, 0, 1, 1]]

Each function is its transformers 4.57.6 counterpart on one image's outputs (no batch axis), resized to
the image with PyTorch's bilinear interpolation (``resize.py``), in float32 as torch computes it.
"""

from __future__ import annotations

import numpy as np

from .resize import interpolate

__all__ = ["mask_segments", "semantic_map"]


def semantic_map(logits: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``post_process_semantic_segmentation`` of SegFormer, DPT, BEiT, MobileViT: the label id of each pixel,
    ``logits`` (labels, h, w) resized to ``size`` (height, width), argmax (ties: the lowest id, as torch)."""
    return interpolate(logits, size, "bilinear").argmax(axis=0)


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
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs = shifted / shifted.sum(axis=-1, keepdims=True)
    scores, labels = probs.max(axis=-1), probs.argmax(axis=-1)
    keep = (labels != logits.shape[-1] - 1) & (scores > threshold)
    if not keep.any():
        return np.full(size, -1, np.int32), []
    masks = np.asarray(pred_masks, np.float32)[keep]
    if mask_logits_size is not None:
        masks = interpolate(masks, mask_logits_size, "bilinear")
    masks = 1 / (1 + np.exp(-masks))
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
