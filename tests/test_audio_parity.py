"""Every audio task against transformers: the numbers of ``python -m parity audio`` (parity/audio.py).

fp32 against transformers 4.57.6 pipelines on the fixtures' PyTorch weights, on both backends, within the
tolerances of the tasks' rows in parity/tasks.py. Speech recognition runs the real Whisper tiny.en on
~57 s of speech (several minutes): it is marked slow; the task tests check the tiny fixtures by default.
"""

from __future__ import annotations

import pytest

from parity.audio import CASES, run_case

pytest.importorskip("transformers")
pytest.importorskip("torch")

TASKS = [pytest.param(t, marks=pytest.mark.slow) if t == "automatic-speech-recognition" else t
         for t in sorted({c.task for c in CASES})]


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("task", TASKS)
def test_parity(task: str, backend: str) -> None:
    failed = []
    for case in (c for c in CASES if c.task == task):
        outcome = run_case(case, backend, "fp32")
        if not outcome.passed:
            failed.append(f"{case.id}: diff {outcome.max_abs_diff:.2e}, agree {outcome.agree} {outcome.detail}")
    assert not failed, failed
