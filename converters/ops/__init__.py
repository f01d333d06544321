"""Converter ops, one module per op family. Importing this package registers them all."""

from __future__ import annotations

import importlib
import pkgutil

from .registry import OpSpec, register, registered_versions, resolve

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry" and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["OpSpec", "register", "registered_versions", "resolve"]
