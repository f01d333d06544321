"""The reliability matrix: bad files, bad feeds, bad options, native panics, bounds, limits and exits.

The rows live in ``tests/reliability/`` (one module per area, each row a ``Case``: what is called and
what must come of it); this runs each row on both backends. No row may crash the process, hang, or
return a silent wrong answer.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest

from tests.reliability import AREAS, CASES, Case, Exits, Raises, run_script

for _area in AREAS:
    importlib.import_module(f"tests.reliability.{_area}")


def _params() -> list[Any]:
    params = []
    for c in CASES:
        for backend in c.backends:
            marks = [pytest.mark.slow] if c.slow else []
            params.append(pytest.param(c, backend, id=f"{c.id} [{backend}]", marks=marks))
    return params


@pytest.mark.parametrize(("row", "backend"), _params())
def test_matrix(row: Case, backend: str) -> None:
    expect = row.expect
    if isinstance(expect, Exits):
        done = run_script(expect.script, backend)
        output = done.stdout + done.stderr
        assert done.returncode == expect.code, f"exit {done.returncode} (want {expect.code}):\n{output[-3000:]}"
        assert re.search(expect.pattern, output), f"no {expect.pattern!r} in:\n{output[-3000:]}"
    elif isinstance(expect, Raises):
        with pytest.raises(expect.error, match=expect.pattern):
            row.run(backend)
    else:
        expect.check(row.run(backend), backend)


def test_matrix_covers_every_area() -> None:
    """Row names are unique, and every area module adds rows."""
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert {c.area for c in CASES} == set(AREAS)
