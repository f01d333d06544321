"""The wheel's package list names every package folder of the source tree."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_in_the_wheel():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    folders = {name: ROOT / path for name, path in config["package-dir"].items()}
    found = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found - listed == set(), f"package folders missing from [tool.setuptools] packages: {sorted(found - listed)}"


@pytest.mark.parametrize("name", ["converters", "zoo"])
def test_a_second_copy_at_import_is_an_error(name: str) -> None:
    """With the checkout's root on sys.path, ``import converters`` would make a second op registry and second
    error classes (an ``except tm.OpError`` would miss the copy's errors): it is an ImportError instead."""
    script = (
        "import sys, transmuter_mlx\n"
        f"try:\n    import {name}\nexcept ImportError as e:\n    print('refused:', e)\n"
        f"print('copies:', sorted(m for m in sys.modules if m.split('.')[0] == {name!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"refused: `import {name}` would load a second copy of transmuter_mlx.{name}" in done.stdout
    assert "copies: []" in done.stdout
