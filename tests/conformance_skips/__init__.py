"""Conformance cases we do not pass, with the reason, one module per op group.

Each module defines ``SKIPS = {"mlx": {case_name: reason}, "torch": {...}, "all": {...}}``.
A case listed here is skipped with its reason; every other case must pass.
"""

from __future__ import annotations

import importlib
import pkgutil


def load_skips() -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {"mlx": {}, "torch": {}}
    for module in pkgutil.iter_modules(__path__):
        skips = importlib.import_module(f"{__name__}.{module.name}").SKIPS
        for backend, cases in skips.items():
            targets = merged if backend == "all" else {backend: merged[backend]}
            for table in targets.values():
                table.update(cases)
    return merged
