"""Serving: concurrent calls gathered into batches, results and errors routed to their callers, close."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import transmuter_mlx as tm
from transmuter_mlx.serving import ServingClosedError

WAIT = 10  # seconds: every wait of these tests has a timeout, so none can hang


class FakePipe:
    """Records the batches it is called with; ``"bad..."`` inputs raise, others give ``(input, 2 * input)``."""

    task = "fake"

    def __init__(self, delay: float = 0.02, batch_size: int = 4) -> None:
        self.delay = delay
        self.batches: list[list] = []
        self.options = type("O", (), {"compile": type("C", (), {"batch_size": batch_size})()})()
        self.lock = threading.Lock()

    def __call__(self, inputs, **options):
        assert isinstance(inputs, list)
        with self.lock:
            self.batches.append(list(inputs))
        time.sleep(self.delay)  # lets more calls gather while this batch runs
        bad = [x for x in inputs if isinstance(x, str) and x.startswith("bad")]
        if bad:
            raise ValueError(f"bad input {bad[0]!r}")
        scale = options.get("scale", 2)
        return [(x, scale * x) for x in inputs]


def test_concurrent_threads_batched_and_routed() -> None:
    pipe = FakePipe(batch_size=4)
    with tm.Serving(pipe, batch_timeout_ms=50) as serving:
        assert serving.batch_size == 4  # from the pipeline's compile options
        barrier = threading.Barrier(16)

        def call(i: int):
            barrier.wait(WAIT)
            return serving.run(i, timeout=WAIT)

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(call, range(16)))
    assert results == [(i, 2 * i) for i in range(16)]
    assert all(1 <= len(b) <= 4 for b in pipe.batches)
    assert sorted(x for b in pipe.batches for x in b) == list(range(16))
    assert len(pipe.batches) < 16  # calls were gathered
    stats = serving.stats
    assert (stats.batches, stats.inputs, stats.errors) == (len(pipe.batches), 16, 0)
    assert stats.mean_batch_size == 16 / len(pipe.batches) > 1


def test_list_input_counts_each_item() -> None:
    pipe = FakePipe(delay=0)
    with tm.Serving(pipe, batch_size=3, batch_timeout_ms=5) as serving:
        assert serving.run([1, 2, 3, 4, 5], timeout=WAIT) == [(i, 2 * i) for i in range(1, 6)]
        assert serving.run([], timeout=WAIT) == []
        assert serving.run((1, 2), timeout=WAIT) == ((1, 2), (1, 2, 1, 2))  # without single_types: one input
    assert [len(b) for b in pipe.batches] == [3, 2, 1]
    assert serving.stats.inputs == 6


def test_bad_input_gets_its_own_error() -> None:
    pipe = FakePipe(batch_size=8)
    with tm.Serving(pipe, batch_timeout_ms=50) as serving:
        inputs = [0, 1, "bad one", 3, 4, "bad two", 6, 7]
        barrier = threading.Barrier(len(inputs))

        def call(x):
            barrier.wait(WAIT)
            try:
                return serving.run(x, timeout=WAIT)
            except ValueError as error:
                return error

        with ThreadPoolExecutor(len(inputs)) as pool:
            results = list(pool.map(call, inputs))
    for x, result in zip(inputs, results):
        if isinstance(x, str):
            assert isinstance(result, ValueError) and repr(x) in str(result)
        else:
            assert result == (x, 2 * x)
    assert serving.stats.errors == 2
    assert serving.stats.retries >= 2


def test_list_with_a_bad_item_raises_to_its_caller_only() -> None:
    with tm.Serving(FakePipe(delay=0), batch_size=4, batch_timeout_ms=1) as serving:
        with pytest.raises(ValueError, match="bad x"):
            serving.run([1, "bad x", 3], timeout=WAIT)
        assert serving.run(5, timeout=WAIT) == (5, 10)


def test_asyncio_gather() -> None:
    pipe = FakePipe(batch_size=4)

    async def main(serving):
        return await asyncio.wait_for(asyncio.gather(*(serving.arun(i) for i in range(10))), WAIT)

    with tm.Serving(pipe, batch_timeout_ms=30) as serving:
        results = asyncio.run(main(serving))
    assert results == [(i, 2 * i) for i in range(10)]
    assert all(len(b) <= 4 for b in pipe.batches) and len(pipe.batches) <= 5


def test_asyncio_error_and_list() -> None:
    async def main(serving):
        with pytest.raises(ValueError, match="bad"):
            await asyncio.wait_for(serving.arun("bad"), WAIT)
        return await asyncio.wait_for(serving.arun([1, 2]), WAIT)

    with tm.Serving(FakePipe(delay=0), batch_size=4, batch_timeout_ms=1) as serving:
        assert asyncio.run(main(serving)) == [(1, 2), (2, 4)]


def test_options_never_share_a_batch() -> None:
    pipe = FakePipe(batch_size=8)
    with tm.Serving(pipe, batch_timeout_ms=50) as serving:
        barrier = threading.Barrier(8)

        def call(i):
            barrier.wait(WAIT)
            return serving.run(i, timeout=WAIT, **({"scale": 3} if i % 2 else {}))

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(call, range(8)))
    assert results == [(i, 3 * i if i % 2 else 2 * i) for i in range(8)]
    assert all(len({x % 2 for x in b}) == 1 for b in pipe.batches)


def test_lone_call_waits_for_the_timeout_only() -> None:
    pipe = FakePipe(delay=0, batch_size=8)
    with tm.Serving(pipe, batch_timeout_ms=100) as serving:
        start = time.monotonic()
        assert serving.run(1, timeout=WAIT) == (1, 2)
        elapsed = time.monotonic() - start
    assert 0.09 <= elapsed < 2.0, elapsed
    assert pipe.batches == [[1]]


def test_full_batch_runs_without_waiting_for_the_timeout() -> None:
    pipe = FakePipe(delay=0, batch_size=4)
    with tm.Serving(pipe, batch_timeout_ms=5000) as serving:
        start = time.monotonic()
        assert serving.run([1, 2, 3, 4], timeout=WAIT) == [(i, 2 * i) for i in (1, 2, 3, 4)]
        assert time.monotonic() - start < 2.0


def test_close_semantics() -> None:
    pipe = FakePipe(delay=0.05)
    serving = tm.Serving(pipe, batch_size=2, batch_timeout_ms=1000)
    worker = serving._worker
    assert worker.daemon
    # a call queued before close still runs (close does not wait for the timeout)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(serving.run, 7, timeout=WAIT)
        time.sleep(0.05)
        start = time.monotonic()
        serving.close()
        assert time.monotonic() - start < 2.0
        assert pending.result(WAIT) == (7, 14)
    assert serving.closed and not worker.is_alive()
    with pytest.raises(ServingClosedError, match="closed"):
        serving.run(1)
    with pytest.raises(ServingClosedError):
        asyncio.run(serving.arun(1))
    serving.close()  # twice is fine
    assert "closed" in repr(serving)


def test_run_timeout_raises() -> None:
    with tm.Serving(FakePipe(delay=0.5), batch_size=1, batch_timeout_ms=0) as serving:
        with pytest.raises(TimeoutError):
            serving.run(1, timeout=0.05)


def test_wrong_result_count_is_an_error() -> None:
    with tm.Serving(lambda xs: xs + xs, batch_size=4, batch_timeout_ms=20) as serving:
        with pytest.raises(RuntimeError, match="gave 2 results for a list of 1"):
            serving.run(1, timeout=WAIT)
    with tm.Serving(lambda xs: xs[:1], batch_size=4, batch_timeout_ms=20) as serving:
        assert serving.run([1, 2], timeout=WAIT) == [1, 2]  # the batch failed; alone, each input works


def test_stream_not_implemented_and_bad_arguments() -> None:
    with tm.Serving(FakePipe(), batch_size=2) as serving:
        with pytest.raises(NotImplementedError, match="streaming"):
            serving.run("x", stream=True)
    with pytest.raises(ValueError, match="batch_size"):
        tm.Serving(FakePipe(), batch_size=0)
    with pytest.raises(ValueError, match="batch_timeout_ms"):
        tm.Serving(FakePipe(), batch_timeout_ms=-1)
    assert tm.Serving(lambda xs: xs).batch_size == 1


def test_real_embedding_pipeline_matches_direct_calls() -> None:
    pytest.importorskip("transformers")  # the fixture builder exports with optimum/transformers
    from tests.fixtures.text_models import build

    folder = build("bert-embed-mean")
    pipe = tm.pipeline("feature-extraction", str(folder), compile={"batch_size": 4, "sequence_length": [16]})
    texts = ["hello", "the cat sat on the mat", "Café au lait", "a b c d", "x", "end of the list", "z"]
    direct = pipe(texts)
    with tm.Serving(pipe, batch_timeout_ms=30) as serving:
        barrier = threading.Barrier(len(texts))

        def call(text):
            barrier.wait(WAIT)
            return serving.run(text, timeout=60)

        with ThreadPoolExecutor(len(texts)) as pool:
            served = list(pool.map(call, texts))
        assert serving.stats.batches < len(texts)
    for a, b in zip(direct, served):
        np.testing.assert_allclose(np.array(a["embedding"]), np.array(b["embedding"]), atol=1e-6)


# ---------------------------------------------------------------------- native panics, reruns, abandoned streams
class FakePanic(BaseException):
    """What pyo3 raises for a Rust panic (``pyo3_runtime.PanicException``): a BaseException, not an Exception."""


def test_a_native_panic_fails_its_caller_only_and_the_worker_serves_on() -> None:
    def pipe(xs):
        if "panic" in xs:
            raise FakePanic("index out of bounds")
        return [2 * x for x in xs]

    with tm.Serving(pipe, batch_size=4, batch_timeout_ms=1) as serving:
        with pytest.raises(RuntimeError, match=r"a native library panicked \(FakePanic: index out of bounds\)"):
            serving.run("panic", timeout=WAIT)
        assert serving.run(21, timeout=WAIT) == 42  # the worker is alive
        assert serving.stats.errors == 1


def _queued_at_once(serving: tm.Serving, inputs: list) -> list:
    """Each input's result or error, the inputs queued together (so that they share batches in order)."""
    futures, _ = serving._submit(inputs, {})
    return [f.exception(WAIT) or f.result(WAIT) for f in futures]


def test_one_bad_input_reruns_halves_of_its_batch_not_each_input() -> None:
    pipe = FakePipe(delay=0, batch_size=16)
    inputs = [*range(9), "bad", *range(10, 16)]
    with tm.Serving(pipe, batch_timeout_ms=50) as serving:
        results = _queued_at_once(serving, inputs)
    assert isinstance(results[9], ValueError) and all(r == (x, 2 * x) for x, r in zip(inputs, results) if x != "bad")
    assert pipe.batches[0] == inputs
    assert len(pipe.batches) == 1 + 2 * 4  # halves of 16, 8, 4 and 2 inputs (each input alone: 1 + 16)
    assert sorted(len(b) for b in pipe.batches[1:]) == [1, 1, 2, 2, 4, 4, 8, 8]


def test_input_errors_fail_bad_inputs_before_one_rerun() -> None:
    class CheckedPipe(FakePipe):
        def input_errors(self, items, **options):
            return [ValueError(f"bad input {x!r}") if isinstance(x, str) else None for x in items]

    pipe = CheckedPipe(delay=0, batch_size=8)
    inputs = [0, 1, "bad one", 3, 4, "bad two", 6, 7]
    with tm.Serving(pipe, batch_timeout_ms=50) as serving:
        results = _queued_at_once(serving, inputs)
        assert (serving.stats.errors, serving.stats.retries) == (2, 6)
    assert pipe.batches == [inputs, [0, 1, 3, 4, 6, 7]]
    assert [str(r) for r in results if isinstance(r, ValueError)] == ["bad input 'bad one'", "bad input 'bad two'"]


@functools.cache
def _qa(backend: str = "mlx"):
    from tests.fixtures.text_models import build

    return tm.pipeline("question-answering", str(build("bert-qa")), backend=backend)


LONG_QUESTION = " ".join(["what is the name of the cat that sat on the mat"] * 6)  # ~60 words
CONTEXT = "The cat sat on the mat. Its name is Tom, and it likes the sun. " * 4


def test_real_qa_tokenizer_panic_is_a_value_error_naming_the_input() -> None:
    """tokenizers panics (PanicException) when the question leaves no more room than the stride in a window."""
    qa = _qa()
    good = {"question": "What is the name of the cat?", "context": CONTEXT}
    for inputs, options in [([good, {"question": LONG_QUESTION, "context": CONTEXT}], {}),
                            ([{"question": "a", "context": CONTEXT}], {"max_seq_len": 5})]:
        with pytest.raises(ValueError, match=rf"input {len(inputs) - 1}: the question is too long for windows of "
                                             r"max_seq_len=\d+ tokens with doc_stride=\d+; shorten the question, lower "
                                             r"doc_stride or raise max_seq_len \(the first text of the pair is not "
                                             r"truncated"):
            qa(inputs, **options)
    with tm.Serving(qa, batch_size=4, batch_timeout_ms=30) as serving:
        with pytest.raises(ValueError, match=r"input 0: the question is too long"):
            serving.run({"question": LONG_QUESTION, "context": CONTEXT}, timeout=60)
        assert serving.run(good, timeout=60) == qa(good)  # the worker serves on


def test_leaving_serving_streams() -> None:
    """A stream left early drops its chunks while its batch-mates stream on; when every stream of a loop is
    left, the loop stops at its next step, and the Serving serves the next call."""
    from tests.fixtures.generation_models import build

    pipe = tm.text.generation(str(build("gpt2")), max_new_tokens=200, compile={"batch_size": 2})
    loops: list[str] = []
    started = threading.Semaphore(0)
    generate_batch = pipe.generate_batch

    def traced(*args, **kwargs):
        started.release()
        try:
            out = generate_batch(*args, **kwargs)
        except BaseException as error:
            loops.append(type(error).__name__)
            raise
        loops.append("done")
        return out

    pipe.generate_batch = traced
    returned = [r["results"][0]["text"] for r in pipe(["hello", "world"])]
    started.acquire()
    with tm.Serving(pipe, batch_timeout_ms=100) as serving:
        left, kept = serving.run("hello", stream=True), serving.run("world", stream=True)
        assert started.acquire(timeout=WAIT)  # the loop runs
        left.close()
        assert "".join(kept) == returned[1]
        both = [serving.run(p, stream=True) for p in ("hello", "world")]
        assert started.acquire(timeout=WAIT)
        for stream in both:
            stream.close()
        assert serving.run("hello", timeout=60)["results"][0]["text"] == pipe("hello")["results"][0]["text"]
        assert serving.stats.errors == 0  # a stream left is not an error of its input
    assert loops[1:4] == ["done", "StreamAbandoned", "done"]
