"""Reliability rows: limits. What a request past a limit gets:

- a decoder's context (``generation/context.py``): past a table of absolute positions (GPT-2; Marian,
  M2M100, NLLB decoders) a ``ValueError`` before decoding; rotary (Llama, Qwen2) and relative (T5)
  positions cap the row at the context, with a warning, and give transformers' tokens up to there; the KV
  buffer is never larger than the context, whatever ``max_new_tokens`` says;
- question answering: at most ``max_windows`` (256) windows per context, else a ``ValueError`` before the
  model runs; ``max_windows=None`` (or more) runs them all and gives transformers' answer.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any

import transmuter_mlx as tm
from tests.reliability import Exits, Raises, Returns, case  # noqa: F401
from tests.reliability.files import patched

PROMPT = "Hello world, this is"
POSITIONS = 256  # max_position_embeddings / n_positions of the generation fixtures


def _folder(name: str) -> str:
    from tests.fixtures.generation_models import build

    return str(build(name))


@functools.cache
def _generation(name: str, backend: str) -> Any:
    return tm.text.generation(_folder(name), backend=backend, variant="fp32")


@functools.cache
def _text_to_text(name: str, backend: str) -> Any:
    return tm.text.text_to_text(_folder(name), backend=backend)


@functools.cache
def _by_length(backend: str) -> Any:
    """GPT-2 whose generation_config.json sets no max_new_tokens (which would win over max_length)."""
    folder = patched("gpt2", "generation_config.json", max_new_tokens=None)
    return tm.text.generation(str(folder), backend=backend)


# ---------------------------------------------------------------------- absolute positions: an error
case("limits", "gpt2: prompt + max_new_tokens past its 256 absolute positions",
     Raises(ValueError, r"text-generation: input 0: max_new_tokens=300 after a prompt of \d+ tokens needs \d+ "
                        r"positions, more than the 256 absolute positions of the model \(n_positions of config.json\);"
                        r" pass max_new_tokens=\d+ or less"))(
    lambda b: _generation("gpt2", b)(PROMPT, max_new_tokens=300, eos_token_id=[]))
case("limits", "gpt2: max_new_tokens=10**9 fails at once (no 2**30-position KV buffer)",
     Raises(ValueError, r"max_new_tokens=1000000000 .* more than the 256 absolute positions"))(
    lambda b: _generation("gpt2", b)(PROMPT, max_new_tokens=10**9))
case("limits", "gpt2: max_length past its positions",
     Raises(ValueError, r"input 0: max_length=1000 .* more than the 256 absolute positions.*pass max_length=256 or less"))(
    lambda b: _by_length(b)(PROMPT, max_length=1000))
case("limits", "gpt2: max_length shorter than the prompt (transformers raises)",
     Raises(ValueError, r"input 0: the prompt has \d+ tokens and max_length is 3: no room for a new token"))(
    lambda b: _by_length(b)(PROMPT, max_length=3))
case("limits", "marian: a decoder past its 256 positions",
     Raises(ValueError, r"text2text-generation: the decoder: max_new_tokens=300 after a prompt of 1 token needs 301 "
                        r"positions, more than the 256 absolute positions"))(
    lambda b: _text_to_text("marian", b)("Hello", max_new_tokens=300, num_beams=1))
case("limits", "nllb: max_new_tokens=10**9",
     Raises(ValueError, r"the decoder: max_new_tokens=1000000000 .* 256 absolute positions"))(
    lambda b: _text_to_text("nllb", b)("Hello", max_new_tokens=10**9))


# ---------------------------------------------------------------------- rotary and relative positions: a cap
def _capped(pipe_ids: list[int], theirs: list[int], warned: list[str], positions: int, prompt: int) -> None:
    assert prompt + len(pipe_ids) == positions, (prompt, len(pipe_ids), positions)
    assert pipe_ids == theirs
    assert any("stopped at the end of the" in w for w in warned), warned


def _check_capped(result: tuple, backend: str) -> None:
    _capped(*result)


def _recorded(run: Any) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = run()
    return out, [str(w.message) for w in caught]


@functools.cache
def _their_decoder_tokens(name: str, new: int) -> tuple[list[int], int]:
    """transformers' greedy tokens after PROMPT, ``new`` of them, eos never stopping."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(_folder(name))
    ids = transformers.AutoTokenizer.from_pretrained(_folder(name))(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new - ids.shape[1],
                             eos_token_id=None, pad_token_id=0)
    return out[0, ids.shape[1]:].tolist(), ids.shape[1]


def _rotary_cap(name: str, backend: str) -> tuple:
    pipe = _generation(name, backend)
    theirs, prompt = _their_decoder_tokens(name, POSITIONS)
    (out,), warned = _recorded(lambda: pipe.generate_outputs(
        [PROMPT], [None], pipe.call_options({"max_new_tokens": 10**9, "eos_token_id": []})))
    return out[1][0][0], theirs, warned, POSITIONS, prompt


case("limits", "llama (rotary): max_new_tokens=10**9 stops at max_position_embeddings, transformers' tokens",
     Returns(_check_capped))(lambda b: _rotary_cap("llama", b))
case("limits", "qwen2-genai (rotary, GQA): max_new_tokens=10**9 stops at max_position_embeddings",
     Returns(_check_capped))(lambda b: _rotary_cap("qwen2-genai", b))


def _buffer_is_the_context(sizes: list[int], backend: str) -> None:
    assert sizes and max(sizes) <= POSITIONS, sizes


@case("limits", "rotary: the KV buffer of max_new_tokens=10**9 is the context, not 2**30 positions",
      Returns(_buffer_is_the_context))
def _buffer_sizes(backend: str) -> list[int]:
    from unittest import mock

    from transmuter_mlx.pipelines import text_generation

    class Prefilled(Exception):
        """Raised by the first step: the buffer is reserved by then, the rest of the run is not needed."""

    sessions = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        session = open_session(*args, **kwargs)
        session.step = mock.Mock(side_effect=Prefilled)
        sessions.append(session)
        return session

    open_session = text_generation.open_session
    for name in ("llama", "qwen2-genai"):  # BufferSession, GQASession
        with mock.patch.object(text_generation, "open_session", spy), contextlib.suppress(Prefilled):
            _generation(name, backend)(["Hi", PROMPT], max_new_tokens=10**9, eos_token_id=[])
    return [s.B.shape(next(iter(s.cache.values())))[2] for s in sessions]


def _seq2seq_cap(backend: str) -> tuple:
    """T5 (relative positions) declaring a context of 64 (``n_positions``, as the real T5 repositories):
    capped there, with transformers' tokens (it has no cap) up to it."""
    import torch
    import transformers

    folder = str(patched("t5", "config.json", n_positions=64))
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder)
    enc = transformers.AutoTokenizer.from_pretrained(folder)(["Hello world"], return_tensors="pt")
    with torch.no_grad():
        theirs = model.generate(**enc, do_sample=False, num_beams=1, max_new_tokens=63, eos_token_id=None)[0, 1:]
    pipe = tm.text.text_to_text(folder, backend=backend)
    (out,), warned = _recorded(lambda: pipe.generate_ids(
        ["Hello world"], {"max_new_tokens": 10**9, "eos_token_id": [], "num_beams": 1}))
    return out[0][0], theirs.tolist(), warned, 64, 1


case("limits", "t5 (relative): max_new_tokens=10**9 stops at the declared context, transformers' tokens",
     Returns(_check_capped))(_seq2seq_cap)


# ---------------------------------------------------------------------- question answering: windows
LONG_CONTEXT = " ".join(["Paris is the capital of France and the Eiffel Tower is in Paris."] * 40)


@functools.cache
def _qa(backend: str) -> Any:
    from tests.fixtures.text_models import build

    return tm.pipeline("question-answering", str(build("bert-qa")), backend=backend)


case("limits", "question-answering: a context over max_windows",
     Raises(ValueError, r"question-answering: input 0: the context needs \d+ windows of 128 tokens \(doc_stride 64\), "
                        r"more than max_windows=4; pass max_windows=\d+ \(or None: no cap\)"))(
    lambda b: _qa(b)({"question": "What is the capital?", "context": LONG_CONTEXT}, max_windows=4))
case("limits", "question-answering: a 100,000-word context over the default cap of 256 windows",
     Raises(ValueError, r"input 0: the context needs \d{4,} windows .* more than max_windows=256"))(
    lambda b: _qa(b)({"question": "What is the capital?", "context": "word " * 100_000}))


def _same_answers(result: tuple, backend: str) -> None:
    ours, theirs = result
    assert [(a["text"], a["start"], a["end"]) for a in ours] == [(a["answer"], a["start"], a["end"]) for a in theirs]
    for a, b in zip(ours, theirs):
        assert abs(a["score"] - b["score"]) < 1e-4, (a, b)


@case("limits", "question-answering: max_windows=None runs every window, transformers' answers",
      Returns(_same_answers))
def _all_windows(backend: str) -> tuple:
    import transformers

    from tests.fixtures.text_models import build

    question = {"question": "What is the capital?", "context": LONG_CONTEXT}  # ASCII: byte = char offsets
    ours = _qa(backend)(question, max_windows=None, top_k=3)["results"]
    reference = transformers.pipeline("question-answering", model=str(build("bert-qa")), device="cpu")
    return ours, reference(**question, top_k=3)
