"""Classification losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12 on)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import IndexBound, register


def nll(B: Any, log_prob: Any, target: Any, weight: Any, *, ignore_index: int | None, reduction: str) -> Any:
    """-log_prob[n, target[n, ...], ...], weighted, with ``ignore_index`` targets contributing 0.

    ``mean`` divides by the summed weights of the counted targets (their count without weights).
    """
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"unknown reduction {reduction!r}")
    dtype = B.dtype(log_prob)
    target = B.astype(target, np.int64)
    keep = None
    if ignore_index is not None:
        keep = B.logical_not(B.equal(target, B.full((), ignore_index, np.int64)))
        target = B.where(keep, target, B.zeros((), np.int64))
    picked = B.squeeze(B.take_along_axis(log_prob, B.expand_dims(target, (1,)), 1), (1,))
    loss = B.negative(picked)
    w = None
    if weight is not None:
        w = B.take(weight, target, 0)
    if keep is not None:
        w = B.astype(keep, dtype) if w is None else B.where(keep, w, B.zeros((), dtype))
    if w is not None:
        loss = B.multiply(loss, w)
    if reduction == "none":
        return loss
    total = B.sum(loss, axis=None, keepdims=False)
    if reduction == "sum":
        return total
    if w is None:
        return B.mean(loss, axis=None, keepdims=False)
    return B.divide(total, B.sum(w, axis=None, keepdims=False))


def _class_bound(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
    """Targets pick one of the C classes of axis 1 (``ignore_index`` targets count for nothing)."""
    c = B.shape(args[0])[1]
    return [IndexBound(1, 0, c, f"the {c} classes of axis 1", attrs.get("ignore_index"))]


@register("NegativeLogLikelihoodLoss", 12, index_bounds=_class_bound)
def negative_log_likelihood_loss_12(B: Any, input: Any, target: Any, weight: Any = None, *,
                                    ignore_index: int | None = None, reduction: str = "mean") -> Any:  # fmt: skip
    return nll(B, input, target, weight, ignore_index=ignore_index, reduction=reduction)


@register("SoftmaxCrossEntropyLoss", 12, index_bounds=_class_bound)
def softmax_cross_entropy_loss_12(B: Any, scores: Any, labels: Any, weights: Any = None, *,
                                  ignore_index: int | None = None, reduction: str = "mean") -> tuple:  # fmt: skip
    """The NLL of log_softmax(scores) over axis 1; the second output is that log-probability."""
    log_prob = B.subtract(scores, B.logsumexp(scores, 1, True))
    return nll(B, log_prob, labels, weights, ignore_index=ignore_index, reduction=reduction), log_prob
