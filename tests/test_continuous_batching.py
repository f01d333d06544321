"""Continuous batching (``generation/continuous.py`` over ``generation/slots.py``): requests that arrive while
a batch decodes join it at the next step and leave it as they end, and each gets the tokens of its own
sequential run (the pipeline alone on that input) in every KV-cache mode, on mlx and torch."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import transmuter_mlx as tm
from transmuter_mlx.generation.continuous import ContinuousBatcher

PROMPTS = ["Hello there", "A", "The quick brown fox jumps over", "x y z", "Once upon a time there was"]
LENGTHS = [12, 3, 24, 7, 9]  # mixed lengths: rows end at different steps and new ones take their slots


@pytest.fixture(scope="module", params=[("gpt2", "mlx"), ("gpt2-merged", "mlx"), ("qwen2-genai", "mlx"),
                                        ("qwen2", "torch"), ("gpt2-merged", "torch")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def pipe(request):
    from tests.fixtures.generation_models import build

    name, backend = request.param
    return tm.text.generation(str(build(name)), backend=backend, compile={"batch_size": 3})


def _staggered(batcher: ContinuousBatcher, calls: list[dict]) -> list:
    """Each call in its own thread, 30 ms after the one before; each step takes at least as long, so on a
    machine of any load the calls join a running batch rather than each finding it idle."""
    out: list = [None] * len(calls)
    step = batcher.cache.step
    batcher.cache.step = lambda tokens: (time.sleep(0.03), step(tokens))[1]

    def go(i: int) -> None:
        time.sleep(0.03 * i)
        out[i] = batcher.run(**calls[i])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def test_rows_joining_a_running_batch_get_their_sequential_tokens(pipe):
    greedy = [{"inputs": p, "max_new_tokens": n} for p, n in zip(PROMPTS, LENGTHS)]
    sampled = [{"inputs": p, "max_new_tokens": n, "do_sample": True, "temperature": 0.9, "top_k": 20, "seed": i}
               for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS))]
    copies = [{"inputs": PROMPTS[0], "max_new_tokens": 6, "do_sample": True, "seed": 5, "num_return_sequences": 2}]
    calls = greedy + sampled + copies
    want = [pipe(c["inputs"], **{k: v for k, v in c.items() if k != "inputs"}) for c in calls]
    with ContinuousBatcher(pipe) as batcher:
        got = _staggered(batcher, calls)
        stats = batcher.stats
    assert got == want
    assert stats.mean_batch_size > 1.5  # rows did share steps (3 slots)


def test_streams_stop_strings_and_a_consumer_that_leaves(pipe):
    with ContinuousBatcher(pipe) as batcher:
        text = pipe(PROMPTS[2], max_new_tokens=24)["results"][0]["text"]
        assert "".join(batcher.run(PROMPTS[2], max_new_tokens=24, stream=True)) == text
        stop = text.split()[1] if len(text.split()) > 1 else text[:2]
        want = pipe(PROMPTS[2], max_new_tokens=24, stop_strings=[stop])
        assert batcher.run(PROMPTS[2], max_new_tokens=24, stop_strings=[stop]) == want
        chunks = batcher.run(PROMPTS[4], max_new_tokens=200, stream=True)
        next(iter(chunks))
        chunks.close()  # the consumer leaves: its row frees its slot at the next step
        deadline = time.monotonic() + 30
        while batcher.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert batcher.running == 0
        assert batcher.run(PROMPTS[1], max_new_tokens=3) == pipe(PROMPTS[1], max_new_tokens=3)


def test_a_cancelled_async_caller_frees_its_row(pipe):
    async def main() -> None:
        with ContinuousBatcher(pipe, slots=1) as batcher:
            step = batcher.cache.step
            batcher.cache.step = lambda tokens: (time.sleep(0.02), step(tokens))[1]  # time to cancel mid-row
            long = asyncio.ensure_future(batcher.arun(PROMPTS[0], max_new_tokens=60, min_new_tokens=60))
            while batcher.stats.batches < 2:
                await asyncio.sleep(0.005)
            long.cancel()
            with pytest.raises(asyncio.CancelledError):
                await long
            # the one slot is free again at the next step: the next call runs long before 60 steps
            assert await batcher.arun(PROMPTS[3], max_new_tokens=4) == pipe(PROMPTS[3], max_new_tokens=4)
            assert batcher.stats.batches < 30

    asyncio.run(main())


def test_bad_requests_fail_alone(pipe):
    with ContinuousBatcher(pipe) as batcher:
        with pytest.raises(ValueError, match="max_new_tokens"):
            batcher.run(PROMPTS[0], max_new_tokens=-1)
        with pytest.raises(ValueError, match="rows of the running batch"):
            batcher.run(PROMPTS[0], max_new_tokens=2, do_sample=True, num_return_sequences=4)
        assert batcher.run(PROMPTS[0], max_new_tokens=2) == pipe(PROMPTS[0], max_new_tokens=2)
        beams = batcher.run(PROMPTS[0], max_new_tokens=4, num_beams=2)  # runs alone, between steps
        assert beams == pipe(PROMPTS[0], max_new_tokens=4, num_beams=2)


@pytest.mark.parametrize(("name", "task", "backend", "extra"), [
    ("t5", "text2text-generation", "mlx", {}),
    ("marian", "translation", "torch", {"num_beams": 1}),
    ("nllb", "translation", "mlx", {"num_beams": 1, "source_language_token": "eng_Latn",
                                    "target_language_token": "fra_Latn"}),
])
def test_text_to_text_rows_join_a_running_batch(name, task, backend, extra):
    """Encoder-decoder rows: each encodes its text as it joins; results (texts and token summaries) equal the
    pipeline's on each input alone."""
    from tests.fixtures.generation_models import build

    pipe = tm.pipeline(task, str(build(name)), backend=backend, compile={"batch_size": 3})
    calls = [{"inputs": p, "max_new_tokens": n, **extra} for p, n in zip(PROMPTS, LENGTHS)]
    calls += [{"inputs": p, "max_new_tokens": n, "do_sample": True, "seed": i, **extra}
              for i, (p, n) in enumerate(zip(PROMPTS, LENGTHS))]
    want = [pipe(c["inputs"], **{k: v for k, v in c.items() if k != "inputs"}) for c in calls]
    with ContinuousBatcher(pipe) as batcher:
        assert _staggered(batcher, calls) == want
        assert "".join(batcher.run(PROMPTS[2], stream=True, max_new_tokens=20, **extra)) == \
            pipe(PROMPTS[2], max_new_tokens=20, **extra)["results"][0]["text"]
