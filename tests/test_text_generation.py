"""The text-generation pipeline against transformers' ``pipeline("text-generation")`` and ``generate`` on the
fixtures' PyTorch weights (GPT-2 and Llama, plain text and chat), on mlx and torch: greedy text alone and in
a batch of 4 prompts of different lengths, seeded sampling, streaming (also through Serving), and bad input.
"""

from __future__ import annotations

import functools
import json
import shutil

import pytest

import transmuter_mlx as tm
from tests.fixtures.generation_models import build

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

NEW = 16
PROMPTS = ["Hello world, this is", "The", "a cat sat on the mat and looked at the dog for a long time", "One two"]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there, who are you?"}]


@functools.cache
def _model(name: str, backend: str):
    return tm.load(str(build(name) / "onnx" / "model.onnx"), backend=backend, compile=False)


def _pipe(name: str, backend: str = "mlx", **options):
    options = {"max_new_tokens": NEW, **options}
    return tm.text.generation(str(build(name)), model=_model(name, backend), **options)


@functools.cache
def _reference(name: str):
    return transformers.pipeline("text-generation", model=str(build(name)), device="cpu")


def _theirs(name: str, x, **options) -> str:
    options = {"do_sample": False, "max_new_tokens": NEW, "return_full_text": False, **options}
    out = _reference(name)(x, **options)
    return out[0]["generated_text"]


def _their_ids(name: str, text: str, chat: bool = False) -> list[int]:
    ref = _reference(name)
    if chat:
        ids = ref.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, return_tensors="pt")
    else:
        ids = ref.tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        out = ref.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW)
    return out[0, ids.shape[1]:].tolist()


def _texts(result) -> list[str]:
    return [r["text"] for r in result["results"]]


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_text_matches_transformers(name, backend):
    alone = _pipe(name, backend)
    batched = _pipe(name, backend, compile={"batch_size": 4})
    theirs = [_theirs(name, p) for p in PROMPTS]
    assert [alone(p)["results"][0]["text"] for p in PROMPTS] == theirs
    results = batched(PROMPTS)
    assert [r["results"][0]["text"] for r in results] == theirs
    ids = _their_ids(name, PROMPTS[0])
    assert results[0]["results"][0]["text"] == alone.decode(ids)
    n0 = len(alone.tokenizer.encode([PROMPTS[0]], truncation=False).input_ids[0])
    assert results[0]["results"][0]["token_summary"]["output"] == len(ids)
    assert alone(PROMPTS[0])["results"][0]["token_summary"] == {"input": n0, "output": len(ids), "padding": 0}
    # a partial batch (3 of 4 rows) gives the same texts
    assert [r["results"][0]["text"] for r in batched(PROMPTS[1:])] == theirs[1:]


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_chat_matches_transformers(backend):
    pipe = _pipe("llama", backend)
    ours = pipe({"messages": CHAT})
    theirs = _reference("llama")(CHAT, do_sample=False, max_new_tokens=NEW)[0]["generated_text"][-1]["content"]
    assert _texts(ours) == [theirs]
    ids = _their_ids("llama", "", chat=True)
    assert ours["results"][0]["text"] == pipe.decode(ids)
    prompt = _reference("llama").tokenizer.apply_chat_template(CHAT, add_generation_prompt=True)
    assert ours["results"][0]["token_summary"]["input"] == len(prompt)  # bos from the template, not added twice
    assert pipe(CHAT) == ours  # transformers' spelling: a list of messages
    # template options reach the template; a chat ending with the assistant is continued
    thinking = pipe({"messages": CHAT}, template_options={"enable_thinking": False})
    assert thinking["results"][0]["token_summary"]["input"] > len(prompt)
    prefill = [*CHAT, {"role": "assistant", "content": "I am"}]
    their_prefill = _reference("llama")(prefill, do_sample=False, max_new_tokens=NEW)[0]["generated_text"][-1]
    assert "I am" + pipe({"messages": prefill})["results"][0]["text"] == their_prefill["content"]


def test_chat_batch_and_mixed_inputs():
    pipe = _pipe("llama", compile={"batch_size": 4})
    items = [{"messages": CHAT}, "The", {"text": "One two"}, {"messages": CHAT[1:]}]
    alone = [_pipe("llama")(x)["results"][0] for x in items]
    batch = [r["results"][0] for r in pipe(items)]
    assert [r["text"] for r in batch] == [r["text"] for r in alone]
    longest = max(r["token_summary"]["input"] for r in alone)
    assert [r["token_summary"] for r in batch] == [
        {**r["token_summary"], "padding": longest - r["token_summary"]["input"]} for r in alone]


def test_beam_search_matches_transformers():
    pipe = _pipe("llama")
    options = dict(num_beams=3, num_return_sequences=2, length_penalty=0.8, early_stopping=True)
    ours = pipe(PROMPTS[0], **options)
    theirs = _reference("llama")(PROMPTS[0], do_sample=False, max_new_tokens=NEW, return_full_text=False,
                                 **options)
    assert _texts(ours) == [t["generated_text"] for t in theirs]


def test_generation_config_and_options():
    pipe = _pipe("gpt2")
    assert pipe.generation.max_new_tokens == 16  # generation_config.json of the fixture
    short = pipe(PROMPTS[0], max_new_tokens=4)["results"][0]
    assert short["token_summary"]["output"] == 4
    assert short["text"] == _theirs("gpt2", PROMPTS[0], max_new_tokens=4)
    probe = dict(repetition_penalty=1.3, no_repeat_ngram_size=2)
    assert _texts(pipe(PROMPTS[2], **probe)) == [_theirs("gpt2", PROMPTS[2], **probe)]
    full = pipe(PROMPTS[0], return_full_text=True)["results"][0]["text"]
    assert full == PROMPTS[0] + _theirs("gpt2", PROMPTS[0])
    built = _pipe("gpt2", repetition_penalty=1.3, no_repeat_ngram_size=2)
    assert built(PROMPTS[2]) == pipe(PROMPTS[2], **probe)


def test_empty_prompt_starts_from_bos_as_transformers():
    assert _texts(_pipe("gpt2")("")) == [_theirs("gpt2", "")]


def test_seeded_sampling_is_reproducible():
    pipe = _pipe("llama", compile={"batch_size": 4})
    options = dict(do_sample=True, temperature=0.9, top_k=40, top_p=0.95)
    first = [_texts(r) for r in pipe(PROMPTS, seed=7, **options)]
    assert [_texts(r) for r in pipe(PROMPTS, seed=7, **options)] == first
    assert [_texts(_pipe("llama")(p, seed=7, **options)) for p in PROMPTS] == first
    assert _texts(pipe({"text": PROMPTS[0], "seed": 7}, **options)) == first[0]
    mixed = pipe([{"text": PROMPTS[0], "seed": 7}, {"text": PROMPTS[0], "seed": 8}], **options)
    assert _texts(mixed[0]) == first[0] and _texts(mixed[1]) == _texts(pipe(PROMPTS[0], seed=8, **options))
    assert first[0] != _texts(mixed[1])
    several = pipe(PROMPTS[0], seed=7, num_return_sequences=3, **options)["results"]
    assert len(several) == 3 and len({r["text"] for r in several}) > 1


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_streaming_joins_to_the_text(backend):
    pipe = _pipe("llama", backend)
    for x in [PROMPTS[0], {"messages": CHAT}]:
        whole = pipe(x)["results"][0]
        chunks = list(pipe(x, stream=True, stream_done=True))
        assert chunks[-1] == ("done", {"token_summary": whole["token_summary"]})
        assert all(isinstance(c, str) and c for c in chunks[:-1])
        assert "".join(chunks[:-1]) == whole["text"]
    assert "".join(pipe(PROMPTS[2], stream=True)) == pipe(PROMPTS[2])["results"][0]["text"]


def test_serving_streams_in_a_shared_batch():
    pipe = _pipe("gpt2", compile={"batch_size": 2})
    with tm.Serving(pipe, batch_timeout_ms=200) as serving:
        streams = [serving.run(p, stream=True, stream_done=True) for p in PROMPTS[:2]]
        got = [list(s) for s in streams]
        assert serving.stats.batches == 1
        assert [_texts(r) for r in serving.run(PROMPTS[:2])] == [_texts(pipe(p)) for p in PROMPTS[:2]]
        with pytest.raises(ValueError, match="does not stream"):
            list(serving.run(PROMPTS[0], stream=True, num_beams=2))
    for p, chunks in zip(PROMPTS, got):
        whole = pipe(p)["results"][0]
        summary = {**whole["token_summary"], "padding": 11 - whole["token_summary"]["input"]}  # shared batch
        assert "".join(chunks[:-1]) == whole["text"] and chunks[-1] == ("done", {"token_summary": summary})


def test_bad_input():
    pipe, chat = _pipe("gpt2"), _pipe("llama")
    with pytest.raises(ValueError, match=r"input 0 has 901 tokens, more than the 256 tokens"):
        pipe("word " * 300)
    with pytest.raises(ValueError, match="max_new_tokens must be greater than 0"):
        pipe("Hi", max_new_tokens=0)
    with pytest.raises(ValueError, match="max_new_tokens must be greater than 0"):
        _pipe("gpt2", max_new_tokens=0)
    with pytest.raises(ValueError, match="beam search .* does not stream"):
        pipe("Hi", stream=True, num_beams=2)
    with pytest.raises(ValueError, match="one input, not a list"):
        pipe(["a", "b"], stream=True)
    with pytest.raises(tm.chat_template.ChatTemplateError, match="no chat template"):
        pipe({"messages": CHAT})
    with pytest.raises(tm.chat_template.ChatTemplateError, match="Unknown role: robot"):
        chat({"messages": [{"role": "robot", "content": "beep"}]})
    with pytest.raises(TypeError, match="input 1: expected a str"):
        pipe(["a", 3])
    with pytest.raises(TypeError, match="'text' or 'messages'"):
        pipe({"prompt": "a"})
    with pytest.raises(TypeError, match="unknown call option"):
        pipe("a", temprature=0.5)


def test_malformed_template(tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(build("llama"), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m.content }"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    pipe = tm.text.generation(str(folder), model=_model("llama", "mlx"))
    with pytest.raises(tm.chat_template.ChatTemplateError, match="chat template"):
        pipe({"messages": CHAT})
    assert pipe("The", max_new_tokens=2)["results"][0]["token_summary"]["output"] == 2


def test_task_table_and_variant():
    pipe = tm.pipeline("text-generation", str(build("llama")), max_new_tokens=2)
    assert str(pipe.model.name).endswith("model_q4.onnx")  # the task default variant
    assert tm.pipeline("generation", str(build("llama")), variant="fp32").task == "text-generation"


def test_cli_streams_each_input_on_its_line(capsys):
    from transmuter_mlx.__main__ import main

    folder = str(build("llama"))
    texts = ["Once upon a time", "The cat"]
    expected = [_pipe("llama")(t, max_new_tokens=12)["results"][0]["text"] for t in texts]
    assert main(["text-generation", folder, *texts, "--stream", "--variant", "fp32", "--option", "max_new_tokens=12"]) == 0
    assert capsys.readouterr().out == "".join(t + "\n" for t in expected)
    assert main(["text-generation", folder, "x", "--stream", "--option", "num_beams=2"]) == 2
    assert "does not stream" in capsys.readouterr().err
