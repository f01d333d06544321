"""The task table and the task functions: every row has its ``tm.<module>.<name>`` function, and back."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

import transmuter_mlx as tm
from transmuter_mlx.pipelines import ALIASES, TASKS, resolve_task
from transmuter_mlx.pipelines.tasks import Task

MODULES = ("text", "vision", "audio")  # the modules of task functions (tasks.md: tm.text, tm.vision, tm.audio)


def _function(row: Task) -> Any:
    return getattr(importlib.import_module(f"transmuter_mlx.{row.module}"), row.function_name, None)


@pytest.mark.parametrize("name", list(TASKS))
def test_row_fields(name: str) -> None:
    row = TASKS[name]
    assert row.cls.task == name
    assert row.modality in ("text", "image", "audio", "multimodal")
    assert not hasattr(row.cls, "modality")  # the row says it, once
    assert row.processor in ("tokenizer", "image", "audio")
    assert row.default_model.count("/") == 1, "a Hub repo id, org/name"
    assert row.module in MODULES, f"{name}: function {row.function!r} is not in tm.text / tm.vision / tm.audio"


@pytest.mark.parametrize("name", list(TASKS))
def test_row_has_its_function(name: str, monkeypatch) -> None:
    row = TASKS[name]
    module = getattr(tm, row.module)
    function = _function(row)
    assert callable(function), f"tm.{row.function} is missing: the table names it for {name}"
    assert row.function_name in module.__all__
    doc = inspect.getdoc(function) or ""
    assert ">>>" in doc and f"{row.function_name}(" in doc, f"tm.{row.function}: a docstring with an example"
    assert inspect.signature(function).return_annotation in (row.cls, row.cls.__name__)
    assert resolve_task(row.function_name) == name  # the function's name is an alias of its task

    calls = []
    monkeypatch.setattr(module, "pipeline", lambda task, model=None, /, **options: calls.append((task, model)))
    function("org/repo")
    assert [(resolve_task(task), model) for task, model in calls] == [(name, "org/repo")]


@pytest.mark.parametrize("module_name", MODULES)
def test_each_module_holds_the_functions_of_its_rows(module_name: str) -> None:
    module = getattr(tm, module_name)
    assert module is importlib.import_module(f"transmuter_mlx.{module_name}")
    rows = {row.function_name for row in TASKS.values() if row.module == module_name}
    assert set(module.__all__) == rows


def test_zero_shot_labels_stay_positional(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(tm.text, "pipeline", lambda task, model=None, /, **options: calls.append(options))
    tm.text.zero_shot_classification("org/repo", ["urgent", "phone"], hypothesis_template="It is {}.")
    assert calls == [{"labels": ["urgent", "phone"], "hypothesis_template": "It is {}."}]


def test_aliases() -> None:
    assert not set(ALIASES) & set(TASKS)
    assert all(task in TASKS for task in ALIASES.values())
    assert ALIASES["ner"] == "token-classification" and ALIASES["feature-extraction"] == "text-embedding"
    # the spec's snake_case names kept from before the table grew its function column
    kept = ("text_embedding", "text_classification", "text_ranking", "zero_shot_classification",
            "token_classification", "fill_mask", "question_answering", "text_to_text", "generation")
    assert all(name in ALIASES for name in kept)
