"""The parity specs (parity/tasks.py): every task has one or a reason, and the runner compares by them."""

from __future__ import annotations

import dataclasses
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
    usage = capsys.readouterr().err  # read once: a second read gives only what came after the first
    assert all(suite in usage for suite in suites())


def test_compare_allows_swaps_where_the_spec_does() -> None:
    got = [{"predictions": [{"label": "b", "score": 0.50001}, {"label": "a", "score": 0.5}]}]
    want = [{"predictions": [{"label": "a", "score": 0.50001}, {"label": "b", "score": 0.5}]}]
    assert compare("text-classification", got, want, 1e-4)[1]
    assert not compare("text-classification", got, want, 1e-6)[1]
    diff, agree, within, _ = compare("text-embedding", [{"embedding": np.ones(3)}], [{"embedding": np.zeros(3)}], 1e-4)
    assert (diff, agree, within) == (1.0, True, False)  # the same shape agrees; the values are the difference


def test_compare_takes_an_items_own_tolerance(monkeypatch) -> None:
    import parity.runner as runner

    spec = runner.PARITY["text-classification"]
    boxed = dataclasses.replace(spec, items=lambda r: [(("a",), r["score"]), (("box",), r["box"], 1e-3)])
    monkeypatch.setitem(runner.__dict__, "PARITY", {**runner.PARITY, "text-classification": boxed})
    want = [{"score": 0.5, "box": 10.0}]
    assert compare("text-classification", [{"score": 0.5, "box": 10.0009}], want, 1e-5)[2]   # box within 1e-3
    assert not compare("text-classification", [{"score": 0.5, "box": 10.002}], want, 1e-5)[2]
    assert not compare("text-classification", [{"score": 0.50002, "box": 10.0}], want, 1e-5)[2]  # score: 1e-5


def test_compare_matches_swapped_detections_whole(monkeypatch) -> None:
    """Items of several values (a score and a box) with a tolerance per element and per variant: a swap of two
    ranked items is matched whole, so the box is compared with its own detection's."""
    import parity.runner as runner

    spec = runner.PARITY["text-classification"]
    limits = {"fp32": np.array([1e-5, 1e-3, 1e-3]), "q8": np.array([1e-3, 0.05, 0.05])}
    boxed = dataclasses.replace(spec, items=lambda r: [((d["label"],), [d["score"], *d["box"]], limits) for d in r])
    monkeypatch.setitem(runner.__dict__, "PARITY", {**runner.PARITY, "text-classification": boxed})
    want = [[{"label": "a", "score": 0.500004, "box": (1.0, 2.0)}, {"label": "a", "score": 0.5, "box": (9.0, 9.0)}]]
    swapped = [want[0][::-1]]
    assert compare("text-classification", swapped, want, 0.0)[1:3] == (True, True)
    assert compare("text-classification", swapped, want, 0.0)[0] == 0.0  # each box against its own
    nudged = [[{**want[0][0], "box": (1.0, 2.01)}, want[0][1]]]
    assert not compare("text-classification", nudged, want, 0.0)[2]  # 0.01 px: beyond fp32's 1e-3
    assert compare("text-classification", nudged, want, 0.0, "q8")[2]  # within q8's 0.05
    apart = [[{**want[0][0], "score": 0.4}, want[0][1]]]
    assert compare("text-classification", [apart[0][::-1]], apart, 0.0)[1:3] == (True, False)  # not a tie
