"""Detection and image-input ops with data-dependent outputs: they run on the host."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from .registry import register


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Boxes as [y1, x1, y2, x2] with y1 <= y2 and x1 <= x2."""
    b = boxes.astype(np.float64)
    if center_point_box:  # [x_center, y_center, width, height]
        xc, yc, w, h = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=1)
    return np.stack(
        [np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]), np.maximum(b[:, 0], b[:, 2]),
         np.maximum(b[:, 1], b[:, 3])], axis=1,
    )  # fmt: skip


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    h = np.clip(np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0]), 0, None)
    w = np.clip(np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1]), 0, None)
    inter = h * w
    union = area + areas - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / union
    return np.where((area > 0) & (areas > 0) & (union > 0), iou, 0.0)  # empty boxes suppress nothing


@register("NonMaxSuppression", 10, host=True)
def non_max_suppression_10(B: Any, boxes: np.ndarray, scores: np.ndarray, max_output_boxes_per_class: Any = None,
                           iou_threshold: Any = None, score_threshold: Any = None, *,
                           center_point_box: int = 0) -> np.ndarray:  # fmt: skip
    """Greedy NMS per (batch, class): rows [batch, class, box] in order of selection."""
    max_out = (
        0
        if max_output_boxes_per_class is None
        else int(np.asarray(max_output_boxes_per_class).reshape(-1)[0])
    )
    iou_max = 0.0 if iou_threshold is None else float(np.asarray(iou_threshold).reshape(-1)[0])
    selected = []
    for b in range(scores.shape[0]):
        corners = _corners(np.asarray(boxes[b]), center_point_box)
        for c in range(scores.shape[1]):
            s = np.asarray(scores[b, c])
            keep = np.arange(len(s))
            if score_threshold is not None:
                keep = keep[s > np.asarray(score_threshold).reshape(-1)[0]]
            order = keep[np.argsort(-s[keep], kind="stable")]
            picked: list[int] = []
            while len(order) and len(picked) < max_out:
                best, order = order[0], order[1:]
                picked.append(int(best))
                order = order[_iou(corners[best], corners[order]) <= iou_max]
            selected += [(b, c, i) for i in picked]
    return np.array(selected, dtype=np.int64).reshape(-1, 3)


@register("ImageDecoder", 20, host=True)
def image_decoder_20(B: Any, encoded_stream: np.ndarray, *, pixel_format: str = "RGB") -> np.ndarray:
    """Decode an encoded image (uint8 bytes) with Pillow to [H, W, 3] (RGB, BGR) or [H, W, 1]."""
    from PIL import Image

    img = Image.open(io.BytesIO(np.asarray(encoded_stream, np.uint8).tobytes()))
    if pixel_format == "Grayscale":
        return np.asarray(img.convert("L"), dtype=np.uint8)[:, :, None]
    rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    if pixel_format == "BGR":
        return np.ascontiguousarray(rgb[:, :, ::-1])
    if pixel_format != "RGB":
        raise ValueError(f"unknown pixel_format {pixel_format!r}: expected RGB, BGR or Grayscale")
    return rgb
