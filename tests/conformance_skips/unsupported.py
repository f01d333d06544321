"""Ops outside the product's scope: training-only and classical-ML ops."""

SKIPS: dict[str, dict[str, str]] = {"all": {}}
