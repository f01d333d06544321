"""The parity specs (parity/tasks.py): every task has one or a reason, and the runner compares by them."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from parity.__main__ import main as parity_main
from parity.runner import compare
from parity.tasks import PARITY, WITHOUT_PARITY, suites
from transmuter_mlx.pipelines import TASKS


def test_every_task_has_a_spec_or_a_reason() -> None:
    assert not set(PARITY) & set(WITHOUT_PARITY)
    assert set(PARITY) | set(WITHOUT_PARITY) == set(TASKS)
    assert all(reason.strip() for reason in WITHOUT_PARITY.values())


@pytest.mark.parametrize("suite", suites())
def test_each_suite_has_cases_for_its_tasks(suite: str) -> None:
    module = importlib.import_module(f"parity.{suite}")
    assert callable(module.main) and callable(module.run_case)
    covered = {case.task for case in module.CASES}
    assert covered == {task for task, spec in PARITY.items() if spec.suite == suite}


def test_parity_names_its_suites(capsys) -> None:
    assert parity_main([]) == 2
    assert all(suite in capsys.readouterr().err for suite in suites())


def test_compare_allows_swaps_where_the_spec_does() -> None:
    got = [{"predictions": [{"label": "b", "score": 0.50001}, {"label": "a", "score": 0.5}]}]
    want = [{"predictions": [{"label": "a", "score": 0.50001}, {"label": "b", "score": 0.5}]}]
    assert compare("text-classification", got, want, 1e-4)[1]
    assert not compare("text-classification", got, want, 1e-6)[1]
    diff, agree, _ = compare("text-embedding", [{"embedding": np.ones(3)}], [{"embedding": np.zeros(3)}], 1e-4)
    assert (diff, agree) == (1.0, True)  # the same shape agrees; the values are the difference
