"""Every vision task against its reference: the numbers of ``python -m parity vision`` (parity/vision.py).

fp32 against transformers 4.57.6 (onnxruntime with the reference post-processing where the spec says),
q8 against our post-processing of onnxruntime's outputs of the same file, on both backends, within the
tolerances of the tasks' rows in parity/tasks.py (the spec's; tests of the tasks check them).
"""

from __future__ import annotations

import pytest

from parity.vision import CASES, run_case

pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("variant", ["fp32", "q8"])
@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("task", sorted({c.task for c in CASES}))
def test_parity(task: str, backend: str, variant: str) -> None:
    failed = []
    for case in (c for c in CASES if c.task == task):
        outcome = run_case(case, backend, variant)
        if not outcome.passed:
            failed.append(f"{case.id}: diff {outcome.max_abs_diff:.2e}, agree {outcome.agree} {outcome.detail}")
    assert not failed, failed
