"""Tensor shape, index and creation ops: every case passes on mlx and torch, so nothing is skipped."""

SKIPS: dict[str, dict[str, str]] = {"all": {}}
