"""text_to_text streaming, shape-stable partial batches and Serving (T5, Marian, M2M100, NLLB fixtures).

Streamed chunks must join to the non-streamed text of the same call, whose token ids are those of
transformers' ``generate`` (checked again here for the options streamed); a partial batch must give each
input its text alone and run through the compiled signatures of a full batch.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import transmuter_mlx as tm
from tests.fixtures.generation_models import build
from tests.test_text_to_text import BACKENDS, FAMILIES, PROBE, TEXTS, _reference, assert_same, pipe, reference

pytest.importorskip("torch")
pytest.importorskip("transformers")

GREEDY = {"num_beams": 1, "max_new_tokens": 24, **PROBE}  # Marian's generation_config.json asks for 4 beams


def _whole(result: dict) -> dict:
    (only,) = result["results"]
    return only


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_stream_joins_to_the_text(family, backend):
    p = pipe(family, backend)
    mine = [seqs for seqs, _ in p.generate_ids(TEXTS, GREEDY)]
    for ids, ref in zip(mine, reference(family, TEXTS, **GREEDY)):
        assert_same(family, ids, ref)  # the text streamed is that of transformers' tokens
    joined_any = False
    for text, ids in zip(TEXTS, mine):
        whole = _whole(p(text, **GREEDY))
        assert whole["text"] == p.decode(ids[0])
        chunks = list(p(text, stream=True, stream_done=True, **GREEDY))
        assert chunks[-1] == ("done", {"token_summary": whole["token_summary"]})
        assert all(isinstance(c, str) and c for c in chunks[:-1])
        assert "".join(chunks[:-1]) == whole["text"]
        assert "".join(p(text, stream=True, **GREEDY)) == whole["text"]  # without stream_done: text only
        joined_any |= len(chunks) > 2
    assert joined_any  # some text came in more than one chunk


def test_stream_chunks_follow_the_text_streamer_rule():
    """Each chunk but the last ends at a space (no newline or CJK in these texts)."""
    p = pipe("marian", "mlx")
    chunks = list(p(TEXTS[1], stream=True, **GREEDY))
    assert len(chunks) > 2 and all(c.endswith(" ") for c in chunks[:-1])


def test_seeded_sampling_streams_its_text():
    p = pipe("m2m100", "mlx")
    options = {"do_sample": True, "seed": 3, "top_k": 20, "max_new_tokens": 16, "num_beams": 1}
    whole = _whole(p(TEXTS[1], **options))
    chunks = list(p(TEXTS[1], stream=True, stream_done=True, **options))
    assert "".join(chunks[:-1]) == whole["text"] and chunks[-1][1]["token_summary"] == whole["token_summary"]


def test_a_call_while_a_stream_runs():
    """The stream's worker thread and the caller share the encoder-decoder session: one loop at a time."""
    p = pipe("marian", "mlx")
    wholes = [_whole(p(t, **GREEDY)) for t in TEXTS[:2]]
    streams = [p(t, stream=True, **GREEDY) for t in TEXTS[:2]]  # both workers start now
    assert _whole(p(TEXTS[2], **GREEDY)) == _whole(p(TEXTS[2], **GREEDY))
    assert ["".join(s) for s in streams] == [w["text"] for w in wholes]


def test_stream_errors():
    marian, t5 = pipe("marian", "mlx"), pipe("t5", "mlx")
    with pytest.raises(ValueError) as error:  # the 4 beams of Marian's generation_config.json
        marian(TEXTS[0], stream=True)
    message = str(error.value)
    assert "beam search (num_beams=4" in message and "generation_config.json" in message
    assert "does not stream" in message and "num_beams=1" in message
    with pytest.raises(ValueError, match=r"beam search \(num_beams=3\) does not stream.*num_beams=1"):
        t5(TEXTS[0], stream=True, num_beams=3)
    with pytest.raises(ValueError, match="stream=True takes one input, not a list"):
        t5(TEXTS[:2], stream=True, num_beams=1)
    with pytest.raises(ValueError, match="num_return_sequences must be 1, got 2"):
        t5(TEXTS[0], stream=True, do_sample=True, num_return_sequences=2, num_beams=1)
    with pytest.raises(TypeError, match="input 0: the text must be a str"):
        t5(3, stream=True, num_beams=1)  # raised by the call, not by the iterator
    with pytest.raises(ValueError, match="max_new_tokens must be greater than 0"):
        t5(TEXTS[0], stream=True, max_new_tokens=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_partial_batch_is_padded_to_the_compiled_shape(family, backend):
    short = [TEXTS[0], "good morning to you all", TEXTS[2]]  # one bucket (32) alone and together
    # min_new_tokens = max_new_tokens: every loop runs the same steps, so the signatures can be compared
    fixed = {"num_beams": 1, "max_new_tokens": 8, "min_new_tokens": 8, **PROBE}
    four = tm.text.text_to_text(str(build(family)), backend=backend, compile={"batch_size": 4})
    full = four([*short, "the dog ran"], **fixed)
    decoder, encoder = four.session.decoder, four.session.encoder
    seen = (set(decoder.signatures()), set(encoder.signatures()))
    partial = four(short, **fixed)
    assert (set(decoder.signatures()), set(encoder.signatures())) == seen  # no new shape compiled
    assert {dict(key)["input_ids"][0][0] for key in seen[0] | seen[1]} == {4}
    alone = [pipe(family, backend)(t, **fixed) for t in short]
    assert partial == alone == full[:3]  # texts and token summaries; the copies' rows are not counted
    assert [_whole(r)["token_summary"]["output"] for r in partial] == [8, 8, 8]
    beams = {"num_beams": 2, "num_return_sequences": 2, "max_new_tokens": 8}
    assert four(short, **beams) == [pipe(family, backend)(t, **beams) for t in short]


@pytest.mark.parametrize("family", ["marian", "nllb"])
def test_long_text_is_truncated_with_a_warning(family):
    """A text over the largest bucket is cut as transformers' tokenizer cuts it (its end token kept)."""
    p = tm.text.text_to_text(str(build(family)), compile={"sequence_length": [8, 16]}, num_beams=1,
                             max_new_tokens=4)
    tok, _ = _reference(family)
    length = len(tok(TEXTS[1])["input_ids"])  # 46 (Marian), 47 (NLLB: and its language token)
    with pytest.warns(UserWarning, match=rf"an input of {length} tokens was truncated to 16") as caught:
        ids, mask, lengths = p.encode([TEXTS[1], TEXTS[0]], None)
    assert len(caught) == 1  # the text of 13 (14) tokens is not cut
    theirs = tok([TEXTS[1], TEXTS[0]], truncation=True, max_length=16)["input_ids"]
    assert [row[:n].tolist() for row, n in zip(ids, lengths)] == theirs and ids.shape == (2, 16)
    with pytest.warns(UserWarning, match="truncated to 16"):
        whole = _whole(p(TEXTS[1]))
    assert whole["token_summary"]["input"] == 16 and whole["token_summary"]["padding"] == 0
    with pytest.warns(UserWarning, match="truncated to 16"):
        assert "".join(p(TEXTS[1], stream=True)) == whole["text"]


def test_serving_streams_concurrent_callers_in_shared_batches():
    p = pipe("marian", "mlx", 4)
    texts = [*TEXTS, "the dog ran", "good morning to you all", "one two three four"]
    wholes = [_whole(p(t, **GREEDY)) for t in texts]
    with tm.Serving(p, batch_timeout_ms=500) as serving:
        barrier = threading.Barrier(len(texts))

        def call(text: str) -> list:
            barrier.wait(60)
            return list(serving.run(text, stream=True, stream_done=True, **GREEDY))

        with ThreadPoolExecutor(len(texts)) as pool:
            streamed = list(pool.map(call, texts))
        assert serving.stats.inputs == 6 and 2 <= serving.stats.batches <= 3
        with pytest.raises(ValueError, match="does not stream"):
            list(serving.run(texts[0], stream=True))  # Marian's default beams
    for whole, chunks in zip(wholes, streamed):
        assert "".join(chunks[:-1]) == whole["text"]
        done, summary = chunks[-1][0], chunks[-1][1]["token_summary"]
        # the encoder padding is that of the shared batch: TEXTS[1] (46 tokens) pads its batch to 128
        assert done == "done" and {**summary, "padding": 0} == {**whole["token_summary"], "padding": 0}
        assert summary["input"] + summary["padding"] in (32, 128)
