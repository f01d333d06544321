"""Source-tree layout: ``converters/`` and ``zoo/`` sit beside ``transmuter_mlx/``.

A built wheel places them inside the package (``transmuter_mlx.converters``, ``transmuter_mlx.zoo``,
see ``[tool.setuptools.package-dir]``). In a source checkout, or an editable install imported
from the checkout's root, Python finds ``transmuter_mlx/`` by path and the mapping is not seen;
this mounts the sibling folders under the same names so both layouts import alike.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SIBLINGS = ("converters", "zoo")


def mount_sibling_packages(package: str, init_file: str) -> None:
    here = Path(init_file).resolve().parent
    for name in SIBLINGS:
        full = f"{package}.{name}"
        folder = here.parent / name
        if full in sys.modules or (here / name).is_dir() or not (folder / "__init__.py").is_file():
            continue
        if importlib.util.find_spec(full) is not None:
            continue  # an installed mapping (editable finder) already serves it
        spec = importlib.util.spec_from_file_location(
            full, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
