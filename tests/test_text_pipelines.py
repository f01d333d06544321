"""Text pipelines: parity with transformers / sentence-transformers (fp32, 1e-4), batching and bad input.

The parity numbers are those of ``python -m parity text`` (parity/text.py), per task and backend.
"""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

import transmuter_mlx as tm
from parity.text import CASES, run_case
from tests.fixtures.text_models import build
from transmuter_mlx.hub import RepoFileNotFoundError
from transmuter_mlx.pipelines import UnknownTaskError
from transmuter_mlx.pipelines.sentence_config import UnsupportedModuleError

pytest.importorskip("transformers")
TASKS = sorted({c.task for c in CASES})
BACKENDS = ["mlx", "torch"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("task", TASKS)
def test_parity_fp32(task: str, backend: str) -> None:
    failed = []
    for case in (c for c in CASES if c.task == task):
        outcome = run_case(case, backend, "fp32")
        assert outcome.tolerance == 1e-4
        if not outcome.passed:
            failed.append(
                f"{case.id}: diff {outcome.max_abs_diff:.2e}, agree {outcome.agree} {outcome.detail}"
            )
    assert not failed, failed


_PIPES: dict = {}


def pipe(task: str, fixture: str, **options):
    key = (task, fixture, json.dumps(options, sort_keys=True))
    if key not in _PIPES:
        _PIPES[key] = tm.pipeline(task, str(build(fixture)), **options)
    return _PIPES[key]


def test_batches_match_single_rows_and_compile_few_shapes() -> None:
    texts = ["a", "hello world", "Café au lait in Zürich", "x " * 40, "", "the end"]
    single = pipe("text-classification", "bert-sst3", top_k=None)
    batched = pipe(
        "text-classification", "bert-sst3", top_k=None, compile={"batch_size": 4, "sequence_length": [8, 64]}
    )
    for a, b in zip(single(texts), batched(texts)):
        assert [p["label"] for p in a["predictions"]] == [p["label"] for p in b["predictions"]]
        np.testing.assert_allclose(
            [p["score"] for p in a["predictions"]], [p["score"] for p in b["predictions"]], atol=1e-5
        )
    shapes = {tuple(dict(k)["input_ids"][0]) for k in batched.model.signatures()}
    assert shapes == {(4, 8), (4, 64)}  # 3 texts in each bucket: a partial batch at the next power of two rows


def test_qa_windows_batch_like_single_rows_and_model_loaded_by_hand() -> None:
    from parity.text import QA

    folder = str(build("bert-qa"))
    single = pipe("question-answering", "bert-qa")(QA, top_k=3)
    model = tm.load(f"{folder}/onnx/model.onnx", backend="torch")
    batched = tm.pipeline(
        "question-answering", folder, model=model, compile={"batch_size": 4, "sequence_length": [16, 64, 128]}
    )
    for a, b in zip(single, batched(QA, top_k=3)):
        assert [(r["text"], r["start"], r["end"]) for r in a["results"]] == [
            (r["text"], r["start"], r["end"]) for r in b["results"]
        ]
        np.testing.assert_allclose(
            [r["score"] for r in a["results"]], [r["score"] for r in b["results"]], atol=1e-5
        )
    assert {dict(k)["input_ids"][0] for k in model.signatures()} == {(2, 64), (2, 128), (4, 128)}


def test_single_input_gives_one_result_and_list_gives_list() -> None:
    p = pipe("text-embedding", "bert-embed-cls")
    one, many = p("hello"), p(["hello", "world"])
    assert isinstance(one, dict) and isinstance(many, list) and len(many) == 2
    np.testing.assert_allclose(np.asarray(one["embedding"]), np.asarray(many[0]["embedding"]), atol=1e-6)
    assert abs(np.linalg.norm(np.asarray(one["embedding"])) - 1) < 1e-5  # Normalize module
    assert p([]) == []


def test_entity_offsets_are_bytes() -> None:
    text = "Café au lait in Zürich, 東京 too!"
    data = text.encode()
    for e in pipe("token-classification", "bert-ner", aggregation_strategy="simple", ignore_labels=[])(text)[
        "entities"
    ]:
        assert data[e["start"] : e["end"]].decode() == e["phrase"]


def test_call_options_override() -> None:
    p = pipe("text-classification", "bert-sst3")
    assert len(p("hi")["predictions"]) == 1
    assert len(p("hi", top_k=None)["predictions"]) == 3


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("text", ["", "   \t "])
def test_empty_and_whitespace_text_give_results(text: str) -> None:
    got = pipe("text-classification", "bert-sst3")(text)
    assert len(got["predictions"]) == 1
    assert pipe("text-embedding", "bert-embed-mean")(text)["embedding"].shape == (32,)


def test_long_text_is_truncated_with_a_warning() -> None:
    p = pipe("text-classification", "bert-sst3")
    with pytest.warns(UserWarning, match="truncated to 128"):
        got = p("word " * 20_000)
    assert got["predictions"][0]["score"] > 0


@pytest.mark.parametrize("bad", [42, None, b"bytes", ["ok", None]])
def test_non_string_input_is_a_type_error(bad) -> None:
    with pytest.raises(TypeError, match="input"):
        pipe("text-classification", "bert-sst3")(bad)


def test_unknown_task_lists_the_valid_tasks() -> None:
    with pytest.raises(UnknownTaskError, match="valid tasks: .*text-embedding"):
        tm.pipeline("summarise-my-email", "x")


def test_unknown_options_are_type_errors() -> None:
    with pytest.raises(TypeError, match="tok_k"):
        tm.pipeline("text-classification", str(build("bert-sst3")), tok_k=3)
    with pytest.raises(TypeError, match="aggregation"):
        pipe("text-classification", "bert-sst3")("hi", aggregation_strategy="simple")


def test_zero_shot_without_labels_is_an_error() -> None:
    p = pipe("zero-shot-classification", "bert-nli")
    with pytest.raises(ValueError, match="no candidate labels"):
        p("hello")
    got = p({"text": "hello", "labels": ["a", "b"]})
    assert sum(x["score"] for x in got["predictions"]) == pytest.approx(1, abs=1e-5)


def test_qa_context_shorter_than_question() -> None:
    context = "Paris."
    got = pipe("question-answering", "bert-qa")(
        {"question": "Which city is the capital of France?", "context": context}
    )
    answer = got["results"][0]
    assert 0 <= answer["start"] <= answer["end"] <= len(context.encode())
    assert context.encode()[answer["start"] : answer["end"]].decode() == answer["text"]


def test_qa_bad_input() -> None:
    with pytest.raises(TypeError, match="question"):
        pipe("question-answering", "bert-qa")({"question": "q"})


def test_fill_mask_without_mask_is_an_error() -> None:
    with pytest.raises(ValueError, match="no mask token"):
        pipe("fill-mask", "bert-mlm")("no mask here")


@pytest.mark.parametrize("missing", ["tokenizer.json", "config.json"])
def test_folder_without_tokenizer_or_config(tmp_path, missing: str) -> None:
    folder = tmp_path / "repo"
    shutil.copytree(build("bert-sst3"), folder)
    (folder / missing).unlink()
    with pytest.raises(RepoFileNotFoundError, match=missing):
        tm.pipeline("text-classification", str(folder))


def test_unsupported_sentence_module_is_named(tmp_path) -> None:
    folder = tmp_path / "repo"
    shutil.copytree(build("bert-embed-mean"), folder)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(UnsupportedModuleError, match="Dense"):
        tm.text.text_embedding(str(folder))
    p = tm.text.text_embedding(str(folder), output_pool="mean", embedding_processor=None)
    assert p("hi")["embedding"].shape == (32,)


def test_cli_list_and_run(capsys) -> None:
    from transmuter_mlx.__main__ import main

    assert main(["list"]) == 0
    assert "question-answering" in capsys.readouterr().out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            main(["sentiment-analysis", str(build("bert-sst3")), "hi", "there", "--option", "top_k=2"]) == 0
        )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and len(json.loads(lines[0])["predictions"]) == 2
    assert main(["no-such-task", "x", "y"]) == 2
