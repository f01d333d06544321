"""The ONNX node conformance suite on the mlx (compiled) and torch backends.

Every case of ``onnx.backend.test.case.node`` runs against its own expected outputs at its own
rtol/atol; cases listed in ``tests/conformance_skips/`` are skipped with their reason.
"""

from __future__ import annotations

import pytest

from tests.conformance_skips import load_skips
from transmuter_mlx.conformance import collect_cases, run_case

CASES = collect_cases()
SKIPS = load_skips()


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case, backend):
    reason = SKIPS[backend].get(case.name)
    if reason:
        pytest.skip(reason)
    result = run_case(case, backend)
    assert result.status == "pass", f"{result.status}: {result.message}"
