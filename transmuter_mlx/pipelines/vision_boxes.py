"""Box and score math of the detection tasks, in float32 as transformers' post-processing computes it.

>>> corners(np.array([[0.5, 0.5, 0.2, 0.4]], np.float32)).astype(float).round(3).tolist()
[[0.4, 0.3, 0.6, 0.7]]
>>> scores, labels, queries = query_softmax(np.array([[2.0, 0.0, 1.0]], np.float32))
>>> labels.tolist(), queries.tolist()        # the last class ("no object") never wins
([0], [0])

Boxes come out of the models as ``(center_x, center_y, width, height)`` relative to an extent (the image,
or the square OWLv2 pads it to); ``corners`` and ``scale`` give corners in pixels with the same float32
operations as ``center_to_corners_format`` and the ``_scale_boxes`` of transformers, so the results agree
with its ``post_process_object_detection`` to float32 rounding. A scorer gives, for one image's logits,
the candidate detections before the threshold: their scores, class ids and query (box) indices.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from numbers import Real
from types import MappingProxyType
from typing import Any

import numpy as np

__all__ = ["SCORERS", "box_dict", "check_threshold", "corners", "query_softmax", "scale", "sigmoid", "sigmoid_top_k"]

Candidates = tuple[np.ndarray, np.ndarray, np.ndarray]  # scores, class ids, query indices


def corners(boxes: np.ndarray) -> np.ndarray:
    """``(..., 4)`` center boxes ``(cx, cy, w, h)`` as corners ``(x0, y0, x1, y1)`` (float32)."""
    cx, cy, w, h = np.moveaxis(np.asarray(boxes, np.float32), -1, 0)
    half = np.float32(0.5)
    return np.stack([cx - half * w, cy - half * h, cx + half * w, cy + half * h], axis=-1)


def scale(boxes: np.ndarray, extent: tuple[int, int]) -> np.ndarray:
    """Relative corner boxes in pixels of ``extent`` ``(width, height)``."""
    width, height = extent
    return boxes * np.array([width, height, width, height], np.float32)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """The logistic function in float32 (the logits of padding, -inf, give 0)."""
    logits = np.asarray(logits, np.float32)
    with np.errstate(over="ignore"):
        return (np.float32(1) / (np.float32(1) + np.exp(-logits))).astype(np.float32)


def query_softmax(logits: np.ndarray, top_k: int | None = None) -> Candidates:
    """DETR's scores: per query, the best class of a softmax over the classes, the last ("no object")
    left out; one candidate per query, in query order. ``top_k`` does not apply (a ValueError)."""
    if top_k is not None:
        raise ValueError("top_k applies to models that score each query and class pair (RT-DETR); this model "
                         "scores each query once, so every query above the threshold is a detection")
    logits = np.asarray(logits, np.float32)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs = (shifted / shifted.sum(axis=-1, keepdims=True))[:, :-1]
    labels = probs.argmax(axis=-1)
    return probs[np.arange(len(probs)), labels], labels, np.arange(len(probs))


def sigmoid_top_k(logits: np.ndarray, top_k: int | None = None) -> Candidates:
    """RT-DETR's scores: a sigmoid of each (query, class) pair, the ``top_k`` best pairs (default: as many as
    there are queries), best first (ties: the first pair first)."""
    logits = np.asarray(logits, np.float32)
    queries, classes = logits.shape
    flat = sigmoid(logits).reshape(-1)
    best = np.argsort(-flat, kind="stable")[: queries if top_k is None else top_k]
    return flat[best], best % classes, best // classes


#: a family's ``DETECTION_SCORES`` -> its scorer
SCORERS: Mapping[str, Callable[..., Candidates]] = MappingProxyType(
    {"softmax": query_softmax, "sigmoid_top_k": sigmoid_top_k}
)


def box_dict(box: np.ndarray) -> dict[str, float]:
    """A corner box as the result's ``{"xmin", "ymin", "xmax", "ymax"}`` (floats, not truncated)."""
    xmin, ymin, xmax, ymax = (float(v) for v in box)
    return {"xmin": xmin, "ymin": ymin, "xmax": xmax, "ymax": ymax}


def check_threshold(task: str, value: Any) -> float:
    """``threshold`` as a float in [0, 1]; a ValueError naming the task otherwise."""
    if not isinstance(value, Real) or isinstance(value, bool) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{task}: threshold must be a number from 0 to 1, got {value!r}")
    return float(value)
