"""The rows of the reliability matrix (``tests/test_reliability.py``): every bad file, feed, option and
input, every limit and every exit the library has been probed with, one row each, on both backends.

A row is a :class:`Case`: a name, a call ``run(backend)`` and what must come of it:

- ``Raises(error_type, pattern)``: the call raises ``error_type`` and its message matches ``pattern``
  (the message names the file, node, input or option at fault);
- ``Returns(check)``: the call returns a value that ``check`` accepts (``check`` asserts against a real
  reference: onnxruntime, transformers, or the same pipeline on good input);
- ``Exits(script, code, pattern)``: ``script`` runs in a fresh Python process and exits with ``code``
  (0 by default: no crash, no abort at exit), its output matching ``pattern``.

Each module of this package adds the rows of one area (``AREAS``); a later modality adds a module
or rows. Rows that build a fixture share it through ``functools.cache``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# the area modules, each adding its rows to ``CASES`` when imported
AREAS = ("files", "feeds", "bounds", "options", "inputs", "serving", "streams", "limits")
BACKENDS = ("mlx", "torch")
EXIT_TIMEOUT = 240  # seconds for a subprocess row: a hang fails the row, it never stalls the suite


@dataclass(frozen=True)
class Raises:
    error: type[BaseException] | tuple[type[BaseException], ...]
    pattern: str


@dataclass(frozen=True)
class Returns:
    check: Callable[[Any, str], None]  # (result, backend) -> None, asserting


@dataclass(frozen=True)
class Exits:
    script: str  # Python source; ``BACKEND`` is the backend's name
    code: int = 0
    pattern: str = ""


@dataclass(frozen=True)
class Case:
    area: str
    name: str
    expect: Raises | Returns | Exits
    run: Callable[[str], Any] | None = None  # not used by Exits rows
    backends: tuple[str, ...] = BACKENDS
    slow: bool = False

    @property
    def id(self) -> str:
        return f"{self.area}: {self.name}"


CASES: list[Case] = []


def case(area: str, name: str, expect: Raises | Returns | Exits, backends: tuple[str, ...] = BACKENDS,
         slow: bool = False) -> Callable[[Callable[[str], Any] | None], Any]:
    """Adds the decorated ``run(backend)`` to ``CASES`` as one row (use ``case(...)(None)`` for Exits rows)."""

    def add(run: Callable[[str], Any] | None) -> Any:
        CASES.append(Case(area, name, expect, run, backends, slow))
        return run

    return add


def run_script(script: str, backend: str, timeout: float = EXIT_TIMEOUT) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter at the checkout root (``BACKEND`` set), output captured."""
    source = f"BACKEND = {backend!r}\n" + textwrap.dedent(script)
    return subprocess.run([sys.executable, "-c", source], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
