"""Comparing a classification pipeline's ranked predictions with transformers' list of {label, score}."""

from __future__ import annotations


def check_same(got: dict, want: list[dict], tolerance: float) -> float:
    """The labels in the same order and every score within ``tolerance``; returns the largest score diff."""
    assert [p["label"] for p in got["predictions"]] == [p["label"] for p in want]
    diff = max(abs(g["score"] - w["score"]) for g, w in zip(got["predictions"], want, strict=True))
    assert diff < tolerance, diff
    return diff
