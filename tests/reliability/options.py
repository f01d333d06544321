"""Reliability rows: options. A bad option value is a ``ValueError`` naming the task, the option, the value
and what is allowed, raised where the options are parsed (``GenerationConfig``, ``Compile.parse``, the
task's count options), before any model runs; a wrong structure (``compile=8``) is a ``TypeError``. The
generation checks are those of transformers 4.57 (``GenerationConfig.validate``, the logits processors)."""

from __future__ import annotations

import functools
from typing import Any

import transmuter_mlx as tm
from tests.reliability import Exits, Raises, Returns, case  # noqa: F401

PROMPT = "Hello world, this is"


@functools.cache
def _model(name: str, backend: str) -> tm.Model:
    from tests.fixtures.generation_models import build

    return tm.load(str(build(name) / "onnx" / "model.onnx"), backend=backend, compile=False)


def _generation(backend: str, **options: Any) -> Any:
    """The GPT-2 fixture's text-generation pipeline (built with ``options``)."""
    from tests.fixtures.generation_models import build

    return tm.text.generation(str(build("gpt2")), model=_model("gpt2", backend), max_new_tokens=8, **options)


@functools.cache
def _gpt2(backend: str) -> Any:
    return _generation(backend)


def _generate(backend: str, **options: Any) -> Any:
    return _gpt2(backend)(PROMPT, **options)


@functools.cache
def _t5(backend: str) -> Any:
    from tests.fixtures.generation_models import build

    return tm.text.text_to_text(str(build("t5")), backend=backend)


# ---------------------------------------------------------------------- generation (transformers' checks)
case("options", "generation: top_p > 1", Raises(ValueError, r"text-generation: top_p must be in \[0, 1\], got 1\.5"))(
    lambda b: _generate(b, do_sample=True, top_p=1.5))
case("options", "generation: min_p < 0", Raises(ValueError, r"min_p must be in \[0, 1\], got -0\.1"))(
    lambda b: _generate(b, do_sample=True, min_p=-0.1))
case("options", "generation: repetition_penalty <= 0",
     Raises(ValueError, r"repetition_penalty must be a finite number greater than 0, got 0\.0"))(
    lambda b: _generate(b, repetition_penalty=0))
case("options", "generation: num_return_sequences < 1",
     Raises(ValueError, r"num_return_sequences must be greater than 0, got 0"))(
    lambda b: _generate(b, do_sample=True, num_return_sequences=0))
case("options", "generation: top_k not an int (1.5)",
     Raises(ValueError, r"top_k must be an int >= 0 or None, got 1\.5 \(float\)"))(
    lambda b: _generate(b, do_sample=True, top_k=1.5))
case("options", "generation: max_new_tokens not an int (2.5)",
     Raises(ValueError, r"max_new_tokens must be an int >= 1 or None, got 2\.5 \(float\)"))(
    lambda b: _generate(b, max_new_tokens=2.5))
case("options", "generation: num_beams a bool", Raises(ValueError, r"num_beams must be an int >= 1, got True"))(
    lambda b: _generate(b, num_beams=True))
case("options", "generation: do_sample not a bool",
     Raises(ValueError, r"do_sample must be True or False, got 'yes' \(str\)"))(
    lambda b: _generate(b, do_sample="yes"))
case("options", "generation: temperature not a number",
     Raises(ValueError, r"temperature must be a number, got 'hot' \(str\)"))(
    lambda b: _generate(b, do_sample=True, temperature="hot"))
case("options", "generation: seed < 0", Raises(ValueError, r"seed must be at least 0, got -1"))(
    lambda b: _generate(b, do_sample=True, seed=-1))
case("options", "generation: eos_token_id not token ids",
     Raises(ValueError, r"eos_token_id must be a token id \(an int\) or a list of them, got \['x'\]"))(
    lambda b: _generate(b, eos_token_id=["x"]))
case("options", "generation: bad option given when the pipeline is built",
     Raises(ValueError, r"text-generation: top_p must be in \[0, 1\], got 2\.0"))(
    lambda b: _generation(b, top_p=2.0))
case("options", "generation: a seq2seq pipeline checks them too",
     Raises(ValueError, r"text2text-generation: no_repeat_ngram_size must be an int >= 0, got 2\.5"))(
    lambda b: _t5(b)("Hello", no_repeat_ngram_size=2.5))


def _stop_string_matches_transformers(result: tuple[str, str], backend: str) -> None:
    ours, theirs = result
    assert ours == theirs, (ours, theirs)


@case("options", "generation: stop_strings as one str is one stop string (not its characters)",
      Returns(_stop_string_matches_transformers))
def _stop_string(backend: str) -> tuple[str, str]:
    """Stops where transformers' ``stop_strings="..."`` stops (its StopStringCriteria takes a str as one)."""
    import transformers

    from tests.fixtures.generation_models import build

    folder = str(build("gpt2"))
    whole = _generate(backend, max_new_tokens=16)["results"][0]["text"]
    stop = whole[len(whole) // 2:][:3]  # three characters from the middle of the greedy text
    ours = _generate(backend, max_new_tokens=16, stop_strings=stop)["results"][0]["text"]
    reference = transformers.pipeline("text-generation", model=folder, device="cpu")
    theirs = reference(PROMPT, do_sample=False, max_new_tokens=16, return_full_text=False, stop_strings=stop,
                       tokenizer=reference.tokenizer)[0]["generated_text"]
    return ours, theirs


# ---------------------------------------------------------------------- compile
case("options", "compile: batch_size not an int (2.7)",
     Raises(ValueError, r"compile batch_size must be a positive int, got 2\.7 \(float\)"))(
    lambda b: _generation(b, compile={"batch_size": 2.7}))
case("options", "compile: not a dict (8)", Raises(TypeError, r"compile must be a dict .*got 8 \(int\)"))(
    lambda b: _generation(b, compile=8))
case("options", "compile: sequence_length not ints",
     Raises(ValueError, r"compile sequence_length must be a positive int or a non-empty list of them, got 'long'"))(
    lambda b: _generation(b, compile={"sequence_length": "long"}))
case("options", "compile: a sequence_length of 0",
     Raises(ValueError, r"each length of compile sequence_length \[0, 64\] must be a positive int, got 0"))(
    lambda b: _generation(b, compile={"sequence_length": [0, 64]}))


# ---------------------------------------------------------------------- the count options of other tasks
@functools.cache
def _qa(backend: str) -> Any:
    from tests.fixtures.text_models import build

    return tm.pipeline("question-answering", str(build("bert-qa")), backend=backend)


QUESTION = {"question": "Where is the tower?", "context": "The Eiffel Tower is in Paris."}
case("options", "question-answering: top_k not an int (1.5)",
     Raises(ValueError, r"question-answering: top_k must be an int >= 1, got 1\.5 \(float\)"))(
    lambda b: _qa(b)(QUESTION, top_k=1.5))
case("options", "question-answering: max_windows of 0",
     Raises(ValueError, r"question-answering: max_windows must be an int >= 1 or None, got 0"))(
    lambda b: _qa(b)(QUESTION, max_windows=0))
case("options", "question-answering: doc_stride not an int",
     Raises(ValueError, r"doc_stride must be an int >= 0 or None, got '64'"))(
    lambda b: _qa(b)(QUESTION, doc_stride="64"))


@functools.cache
def _classifier(backend: str) -> Any:
    from tests.fixtures.text_models import build

    return tm.pipeline("text-classification", str(build("bert-sst3")), backend=backend)


case("options", "text-classification: top_k not an int (1.5)",
     Raises(ValueError, r"text-classification: top_k must be an int >= 1 or None, got 1\.5 \(float\)"))(
    lambda b: _classifier(b)("I love this", top_k=1.5))
