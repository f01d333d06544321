"""The command line: ``list``, and each task's INPUTs and flags as its row's ``command_line`` reads them.

A stand-in pipeline echoes the inputs it is given, so each task's input handling is checked without
a model; one run on a real fixture checks the whole way.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from typing import Any

import pytest

import transmuter_mlx.pipelines as pipelines
from transmuter_mlx import zoo
from transmuter_mlx.__main__ import families_by_module, main, task_flags
from transmuter_mlx.pipelines import ALIASES, TASKS

#: task -> (command-line arguments after TASK MODEL, the inputs the pipeline gets, the task options it gets)
CLI_CASES: dict[str, tuple[list[str], list[Any], dict[str, Any]]] = {
    "text-embedding": (["a", "b"], ["a", "b"], {}),
    "text-classification": (["a", "b", "--pair", "p"], [["a", "p"], ["b", "p"]], {}),
    "text-ranking": (["d0", "d1", "--query", "q"], [{"query": "q", "documents": ["d0", "d1"]}], {}),
    "zero-shot-classification": (["a", "--labels", "x, y,"], ["a"], {"labels": ["x", "y"]}),
    "token-classification": (["a"], ["a"], {}),
    "zero-shot-entity-recognition": (["a", "--labels", "person, city"], ["a"], {"labels": ["person", "city"]}),
    "fill-mask": (["a [MASK]"], ["a [MASK]"], {}),
    "question-answering": (
        ["c0", "c1", "--question", "q"],
        [{"question": "q", "context": "c0"}, {"question": "q", "context": "c1"}],
        {},
    ),
    "text-generation": (["p"], ["p"], {}),
    "text2text-generation": (["p"], ["p"], {}),
    "translation": (["p"], ["p"], {}),
    "summarization": (["p"], ["p"], {}),
    **{task: (["a.jpg", "b.png"], ["a.jpg", "b.png"], {}) for task in (
        "image-classification", "image-embedding", "object-detection", "depth-estimation", "image-segmentation",
        "background-removal", "image-to-image")},
    **{task: (["a.jpg", "--labels", "cat, dog"], ["a.jpg"], {"labels": ["cat", "dog"]}) for task in (
        "zero-shot-image-classification", "zero-shot-object-detection")},
    **{task: (["a.wav", "b.flac"], ["a.wav", "b.flac"], {}) for task in (
        "automatic-speech-recognition", "audio-classification")},
    "zero-shot-audio-classification": (["a.wav", "--labels", "rain, dog"], ["a.wav"], {"labels": ["rain", "dog"]}),
    "text-to-speech": (["Hello."], ["Hello."], {}),
}


class EchoPipeline:
    """Stands in for ``tm.pipeline(...)``: each result is its input; a stream yields the input's words."""

    built: list[tuple[str, Any, dict]] = []

    def __init__(self, task: str, model: Any = None, /, **options: Any) -> None:
        self.built.append((task, model, options))

    def __call__(self, inputs: Any, stream: bool = False) -> Any:
        if stream:
            return contextlib.nullcontext(iter(inputs.split()))
        return [{"input": x} for x in inputs]


@pytest.fixture
def echo(monkeypatch) -> type[EchoPipeline]:
    EchoPipeline.built = []
    monkeypatch.setattr(pipelines, "pipeline", EchoPipeline)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    return EchoPipeline


def _printed(capsys) -> list[Any]:
    return [json.loads(line)["input"] for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("task", list(TASKS))
def test_each_task_reads_its_inputs(task: str, echo, capsys) -> None:
    assert task in CLI_CASES, f"add {task}'s command line to CLI_CASES"
    args, inputs, task_options = CLI_CASES[task]
    assert main([task, "org/repo", *args, "--option", "top_k=2"]) == 0
    assert _printed(capsys) == inputs
    [(built_task, model, options)] = echo.built
    assert (built_task, model) == (task, "org/repo")
    assert options == {"top_k": 2, "backend": "mlx", **task_options}


def test_stdin_lines_when_no_input(echo, capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("one\ntwo\n"))
    assert main(["ner", "org/repo"]) == 0
    assert _printed(capsys) == ["one", "two"]


def test_question_and_context_read_no_stdin(echo, capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", None)  # reading it would fail
    assert main(["question-answering", "org/repo", "--question", "q", "--context", "c"]) == 0
    assert _printed(capsys) == [{"question": "q", "context": "c"}]


@pytest.mark.parametrize(
    "task, line",
    [
        ("question-answering", {"question": "q", "context": "c"}),
        ("text-ranking", {"query": "q", "documents": ["d0", "d1"]}),
    ],
)
def test_json_object_lines(task: str, line: dict, echo, capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(line) + "\n" + json.dumps(line) + "\n"))
    assert main([task, "org/repo"]) == 0
    assert _printed(capsys) == [line, line]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["question-answering", "m", "not json"], "question-answering: INPUT 0 is not a JSON object"),
        (["question-answering", "m", "c", "--context", "c"], "--context needs --question"),
        (["text-ranking", "m", "[1]"], "or give --query"),
        (["question-answering", "m", "c", "--question", "q", "--pair", "p"], "--pair is for text-classification"),
        (["fill-mask", "m", "a", "--labels", "x"], "--labels is for zero-shot-classification"),
        (["fill-mask", "m", "a", "--stream"], "fill-mask: --stream is for the generation tasks (text-generation"),
        (["fill-mask", "m", "a", "--option", "stream=true"], "--stream is for the generation tasks"),
    ],
)
def test_bad_inputs_and_flags_exit_2(argv: list[str], message: str, echo, capsys) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not echo.built  # nothing is loaded


def test_a_task_flag_beats_its_option(echo, capsys) -> None:
    assert main(["zero-shot-classification", "m", "a", "--option", 'labels=["z"]', "--labels", "x"]) == 0
    assert echo.built[0][2]["labels"] == ["x"]


def test_stream_prints_each_input_on_its_line(echo, capsys) -> None:
    assert main(["translation", "m", "a b", "c", "--stream"]) == 0
    assert capsys.readouterr().out == "ab\nc\n"


def test_flags_have_one_meaning() -> None:
    names = [flag.name for flag in task_flags()]
    assert len(names) == len(set(names)), "two tasks give one flag name two meanings"
    common = {"json", "pretty", "backend", "device", "variant", "offline", "batch_size", "stream", "option"}
    assert not set(names) & common


def test_list_prints_the_table_and_the_families(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    for name, row in TASKS.items():
        line = lines[name]
        assert row.modality in line and row.processor in line and f"tm.{row.function}" in line
        assert row.default_model in line
        assert all(alias in line for alias, task in ALIASES.items() if task == name)
    families = out.split("model families", 1)[1]
    assert all(model_type in families for model_type in zoo.families())


def test_families_by_module() -> None:
    remap = {"albert": "bert", "xlm-roberta": "bert", "deberta-v2": "deberta-v2"}
    grouped = families_by_module(["albert", "bert", "deberta-v2", "gpt2", "xlm-roberta"], remap)
    assert grouped == {"bert": ["albert", "bert", "xlm-roberta"], "deberta_v2": ["deberta-v2"], "gpt2": ["gpt2"]}


def test_question_answering_on_a_fixture(capsys) -> None:
    from tests.fixtures.text_models import build

    folder = str(build("bert-qa"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["question-answering", folder, "--question", "Where is the tower?", "--context", "The tower is in Paris."])
    assert code == 0
    [line] = capsys.readouterr().out.splitlines()
    [answer] = json.loads(line)["results"]
    assert set(answer) == {"text", "start", "end", "score"}


def test_speech_in_results_is_written_as_wav(tmp_path) -> None:
    """A text-to-speech result ({"audio", "sampling_rate"}) becomes a float WAV at its rate, read back exactly."""
    import numpy as np
    import soundfile

    from transmuter_mlx.__main__ import media_to_files

    samples = np.sin(np.linspace(0, 50, 1600)).astype(np.float32)
    written = media_to_files([{"audio": samples, "sampling_rate": 16000}], str(tmp_path), "0")
    assert written == [{"audio": str(tmp_path / "0-0.wav"), "sampling_rate": 16000}]
    read, rate = soundfile.read(written[0]["audio"], dtype="float32")
    assert rate == 16000 and np.array_equal(read, samples)
    with pytest.raises(ValueError, match="hold audio: give --output DIR"):
        media_to_files({"audio": samples, "sampling_rate": 16000}, None, "0")
