"""Model families, one module per family, found by the ``model_type`` of config.json.

>>> from transmuter_mlx import zoo
>>> zoo.family({"model_type": "distilbert"}).__name__
'transmuter_mlx.zoo.bert'

A family module exports ``ModelArgs`` (a dataclass of the config.json keys it reads, built with
``ModelArgs.from_dict(config)``), ``ONNX_STEM`` (the file under ``onnx/``), ``INPUT_NAMES`` (the
inputs it may feed) and ``TASKS`` (the tasks it serves). Families that share a module are listed
in ``REMAP``; a new family is one new module (and, if it shares one, one line here).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

if __name__ == "zoo":  # imported as a top-level module, from a checkout's root on sys.path
    raise ImportError(
        "`import zoo` would load a second copy of transmuter_mlx.zoo (the model families) that the package's own code never "
        "sees: import transmuter_mlx.zoo instead"
    )

__all__ = ["REMAP", "UnknownFamilyError", "families", "family"]

#: model_type -> module serving it (model types spelled with dashes need an entry too)
REMAP: dict[str, str] = {
    "distilbert": "bert",
    "roberta": "bert",
    "xlm-roberta": "bert",
    "camembert": "bert",
    "electra": "bert",
    "mpnet": "bert",
    "albert": "bert",
    "deberta": "bert",
    "deberta-v2": "bert",
    "modernbert": "bert",
}


class UnknownFamilyError(ValueError):
    """A config.json whose model_type no zoo module serves."""


def family(config: Mapping[str, Any] | str) -> ModuleType:
    """The module of a config's family: ``family(repo.config)`` or ``family("roberta")``."""
    model_type = config if isinstance(config, str) else config.get("model_type")
    if not model_type:
        raise UnknownFamilyError("config.json has no model_type, so no model family can be chosen")
    name = REMAP.get(model_type, model_type).replace("-", "_")
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise UnknownFamilyError(
            f"model_type {model_type!r} is not supported; supported families: {', '.join(families())}"
        ) from None


def families() -> list[str]:
    """Every model_type served, the remapped ones included: ``"bert" in families()``."""
    import pkgutil

    modules = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    return sorted(set(modules) | set(REMAP))
