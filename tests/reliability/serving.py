"""Reliability rows: serving. No input stops a ``tm.Serving``: each caller gets its own result or its own
error, a native library's panic included (tokenizers' ``PanicException`` is a BaseException; the tokenizer
turns it into a ValueError naming the input, and the worker survives any error but KeyboardInterrupt and
SystemExit). A bad input in a batch costs a few reruns, not one run per input of its batch."""

from __future__ import annotations

import functools
import re
from typing import Any

import transmuter_mlx as tm
from tests.reliability import Exits, Raises, Returns, case  # noqa: F401

GOOD = {"question": "What is the name of the cat?", "context": "The cat sat on the mat. Its name is Tom. " * 4}
# ~60 words: with the special tokens the question takes more of a 128-token window than the 64 of the stride
LONG = {"question": " ".join(["what is the name of the cat that sat on the mat"] * 6), "context": GOOD["context"]}


@functools.cache
def _qa(backend: str) -> Any:
    from tests.fixtures.text_models import build

    return tm.pipeline("question-answering", str(build("bert-qa")), backend=backend, compile={"batch_size": 2})


def _panic_fails_its_caller_only(outcome: tuple[Exception, Any, Any], backend: str) -> None:
    error, served, direct = outcome
    assert isinstance(error, ValueError), repr(error)
    assert re.search(r"input 0: the question is too long for windows of max_seq_len=\d+ tokens with doc_stride=\d+; "
                     r"shorten the question, lower doc_stride or raise max_seq_len", str(error)), str(error)
    assert served == direct


@case("serving", "QA question longer than its windows (a tokenizers panic): its caller's ValueError, the worker "
      "serves on", Returns(_panic_fails_its_caller_only))
def _qa_panic_through_serving(backend: str) -> tuple[Exception, Any, Any]:
    qa = _qa(backend)
    with tm.Serving(qa, batch_timeout_ms=20) as serving:
        try:
            serving.run(LONG, timeout=120)
        except Exception as error:  # a PanicException (BaseException) would end the test here
            caught = error
        return caught, serving.run(GOOD, timeout=120), qa(GOOD)


PANIC_THEN_SERVE = """
import transmuter_mlx as tm
from tests.fixtures.text_models import build
qa = tm.pipeline("question-answering", str(build("bert-qa")), backend=BACKEND)
serving = tm.Serving(qa, batch_timeout_ms=20)
try:
    serving.run({"question": "a", "context": "The cat sat on the mat. " * 8}, max_seq_len=5, timeout=120)
except ValueError as error:
    print("caller:", str(error)[:80])
print("then:", serving.run({"question": "Who sat?", "context": "The cat sat on the mat."}, timeout=120)["results"][0]["text"])
"""
case("serving", "QA max_seq_len=5 (a tokenizers panic) through an open Serving: the next call served, exit 0",
     Exits(PANIC_THEN_SERVE, 0, r"caller: question-answering: .*input 0: (.|\n)*then: \S"))(None)


def _one_more_loop(outcome: tuple[list, list, list[str]], backend: str) -> None:
    served, direct, loops = outcome
    assert isinstance(served[5], TypeError) and "input 0: expected a str" in str(served[5])
    assert served[:5] + served[6:] == direct
    assert loops == ["TypeError", "done"]  # the batch failed before decoding; the 7 good inputs ran once


@case("serving", "one bad input among 8 queued at once: one more decoding loop, not one per input",
      Returns(_one_more_loop))
def _bad_input_in_a_generation_batch(backend: str) -> tuple[list, list, list[str]]:
    from tests.fixtures.generation_models import build

    pipe = tm.text.generation(str(build("gpt2")), backend=backend, max_new_tokens=8, compile={"batch_size": 8})
    prompts = ["Hello world", "The", "a cat sat", "One two", "x", 3, "the mat", "and then"]
    direct = pipe([p for p in prompts if isinstance(p, str)])
    loops: list[str] = []
    stream_many = pipe.stream_many

    def traced(*args: Any, **kwargs: Any) -> Any:
        try:
            out = stream_many(*args, **kwargs)
        except Exception as error:
            loops.append(type(error).__name__)
            raise
        loops.append("done")
        return out

    pipe.stream_many = traced
    with tm.Serving(pipe, batch_timeout_ms=50) as serving:
        futures, _ = serving._submit(prompts, {})  # queued together: one batch, in this order
        return [f.exception(120) or f.result(120) for f in futures], direct, loops
