"""Serving: gathers the concurrent calls of many threads or asyncio tasks into batches of one pipeline.

>>> import transmuter_mlx as tm
>>> double = lambda xs: [2 * x for x in xs]          # any callable that maps a list to a list
>>> with tm.Serving(double, batch_size=8) as serving:
...     serving.run(21), serving.run([1, 2, 3])
(42, [2, 4, 6])

With a pipeline (``compile.batch_size`` is the default batch size)::

    embed = tm.pipeline("feature-extraction", "Xenova/all-MiniLM-L6-v2", compile={"batch_size": 8})
    serving = tm.Serving(embed, batch_timeout_ms=10)
    serving.run("The cat sat on the mat.")          # from any thread
    await serving.arun("The cat sat on the mat.")   # from any asyncio task

One daemon worker thread owns the pipeline. When a call arrives it waits up to
``batch_timeout_ms`` for more calls, then calls ``pipe(list_of_inputs)`` once for up to
``batch_size`` inputs (the spec's ``Nx.Serving`` with ``batch_timeout``). Each caller gets its
own result or its own exception: when a batch raises, the inputs at fault are found (the pipeline's
``input_errors`` when it has one, else halves of the batch run again), so a bad input fails only its
caller and costs a few reruns, not one per input. No error of a call stops the worker, a native
library's panic included (only KeyboardInterrupt and SystemExit do). Calls with different options
(``run(x, top_k=3)``) never share a batch.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, replace
from typing import Any

from ._native import as_exception
from .converters.backends.threads import release_openmp_pool, release_thread
from .generation.chunks import ABANDON_WAIT_S, ChunkSink, TextChunks
from .pipelines.options import as_list

__all__ = ["Serving", "ServingClosedError", "ServingStats"]


class ServingClosedError(RuntimeError):
    """A call to a Serving after ``close()``."""


@dataclass(frozen=True)
class ServingStats:
    """What a Serving has run so far: ``batches`` (pipeline calls on gathered inputs) and the
    ``inputs`` they held; ``retries`` (inputs run again, in a part of their batch, after it raised) and
    ``errors`` (inputs whose caller got an exception)."""

    batches: int = 0
    inputs: int = 0
    retries: int = 0
    errors: int = 0

    @property
    def mean_batch_size(self) -> float:
        return self.inputs / self.batches if self.batches else 0.0


@dataclass
class _Request:
    item: Any
    options: Mapping[str, Any]
    future: Future
    arrived: float
    sink: ChunkSink | None = None  # a streamed call: where its text chunks go

    @property
    def streamed(self) -> bool:
        """Whether a chunk went out (such a call is not run again: it would repeat its chunks)."""
        return self.sink is not None and self.sink.sent

    @property
    def abandoned(self) -> bool:
        """Whether the consumer of a streamed call left it."""
        return self.sink is not None and self.sink.abandoned.is_set()


class Serving:
    """A thread-safe batching front of ``pipe`` (a Pipeline, or any callable mapping a list to a list).

    >>> import transmuter_mlx as tm
    >>> serving = tm.Serving(lambda xs: [x.upper() for x in xs], batch_size=4, batch_timeout_ms=5)
    >>> serving.run("a"), serving.run(["b", "c"])
    ('A', ['B', 'C'])
    >>> serving.stats.inputs
    3
    >>> serving.close()

    ``batch_size`` defaults to the pipeline's ``compile={"batch_size": n}`` (1 without one).
    ``run(x)`` blocks; ``await arun(x)`` does not block the event loop. A list (or a tuple that is
    not one input of the pipeline) is several inputs, each counted in the batch, and gives a list.
    """

    def __init__(self, pipe: Callable[..., Any], batch_size: int | None = None, batch_timeout_ms: float = 10):
        if batch_size is None:
            compile_options = getattr(getattr(pipe, "options", None), "compile", None)
            batch_size = getattr(compile_options, "batch_size", 1)
        if int(batch_size) < 1:
            raise ValueError(f"Serving: batch_size must be >= 1, got {batch_size}")
        if batch_timeout_ms < 0:
            raise ValueError(f"Serving: batch_timeout_ms must be >= 0, got {batch_timeout_ms}")
        self.pipe = pipe
        self.batch_size = int(batch_size)
        self.batch_timeout_ms = float(batch_timeout_ms)
        self._single_types: tuple[type, ...] = getattr(pipe, "single_types", (str, tuple))
        self._queue: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._stats = ServingStats()
        self._running: list[_Request] = []  # the batch the worker runs now
        self._worker = threading.Thread(target=self._loop, name=f"Serving({_name(pipe)})", daemon=True)
        release_openmp_pool()  # the pipeline runs on the worker now: this thread's idle pool would slow its torch ops
        self._worker.start()
        _open_servings.add(self)

    # ------------------------------------------------------------------ calls
    def run(self, inputs: Any, *, stream: bool = False, timeout: float | None = None, **options: Any) -> Any:
        """The result of ``inputs`` (a list of results for a list), computed in a shared batch.

        ``timeout`` (seconds) raises a TimeoutError if the result is not there in time; ``options``
        are the pipeline's call options. A ServingClosedError after ``close()``.
        """
        if stream:
            return self._stream(inputs, options)
        if threading.current_thread() is self._worker:
            raise RuntimeError("Serving.run called from its own worker thread (from inside the pipeline)")
        futures, batched = self._submit(inputs, options)
        deadline = None if timeout is None else time.monotonic() + timeout
        results = []
        for future in futures:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                results.append(future.result(left))
            except FutureTimeoutError:
                for f in futures:
                    f.cancel()
                raise TimeoutError(f"Serving.run: no result within {timeout} s") from None
        return results if batched else results[0]

    async def arun(self, inputs: Any, *, stream: bool = False, **options: Any) -> Any:
        """``run`` for asyncio: awaits the result without blocking the event loop.

        >>> import asyncio, transmuter_mlx as tm
        >>> with tm.Serving(lambda xs: [x + 1 for x in xs], batch_size=8) as serving:
        ...     asyncio.run(asyncio.wait_for(serving.arun([1, 2]), 5))
        [2, 3]
        """
        if stream:
            return self._stream(inputs, options)
        futures, batched = self._submit(inputs, options)
        try:
            results = [await asyncio.wrap_future(f) for f in futures]
        except asyncio.CancelledError:
            for f in futures:
                f.cancel()
            raise
        return results if batched else results[0]

    def _stream(self, inputs: Any, options: Mapping[str, Any]) -> Iterator[Any]:
        """The text chunks of one input, for a pipeline with ``stream_many`` (text generation).

        Streamed calls with the same options share a decoding loop; ``stream_done=True`` ends the
        iterator with ``("done", {"token_summary": ...})``. An error comes out of the iterator. Leaving
        the iterator early drops a call not started yet, and stops a loop whose streams were all left.
        """
        if not callable(getattr(self.pipe, "stream_many", None)):
            raise NotImplementedError(
                f"Serving: streaming is not implemented for {_name(self.pipe)}; "
                "call run(x) without stream=True for the whole result"
            )
        items, batched = as_list(inputs, self._single_types)
        if batched or len(items) != 1:
            raise ValueError("Serving: stream=True takes one input, not a list")
        options = dict(options)
        done = bool(options.pop("stream_done", False))
        sink = ChunkSink()
        request = _Request(items[0], {**options, "stream": True}, Future(), time.monotonic(), sink)
        request.future.add_done_callback(lambda _: sink.end())
        with self._cond:
            if self._closed:
                raise ServingClosedError(f"Serving({_name(self.pipe)}) is closed")
            self._queue.append(request)
            self._cond.notify_all()
        return TextChunks(sink, request.future, done, on_close=request.future.cancel)

    def _submit(self, inputs: Any, options: Mapping[str, Any]) -> tuple[list[Future], bool]:
        items, batched = as_list(inputs, self._single_types)
        now = time.monotonic()
        requests = [_Request(item, options, Future(), now) for item in items]
        with self._cond:
            if self._closed:
                raise ServingClosedError(f"Serving({_name(self.pipe)}) is closed")
            self._queue.extend(requests)
            self._cond.notify_all()
        return [r.future for r in requests], batched

    # ------------------------------------------------------------------ lifecycle
    def close(self, timeout: float | None = 10.0) -> None:
        """Refuses new calls, runs those already queued, and stops the worker (waiting up to ``timeout``)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._worker:
            self._worker.join(timeout)

    def _stop(self, timeout: float) -> None:
        """Stops at once: queued calls get ServingClosedError, the streams of the running batch are
        abandoned (its loop stops at its next step), and the worker is waited for up to ``timeout``."""
        with self._cond:
            self._closed = True
            left, self._queue = list(self._queue), deque()
            for request in self._running + left:
                if request.sink is not None:
                    request.sink.abandoned.set()
            self._cond.notify_all()
        for request in left:
            if request.future.set_running_or_notify_cancel():
                request.future.set_exception(ServingClosedError("Serving stopped at interpreter exit"))
        if threading.current_thread() is not self._worker:
            self._worker.join(timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Serving:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def stats(self) -> ServingStats:
        """Batches run, inputs, errors and ``mean_batch_size`` so far (a snapshot)."""
        with self._cond:
            return self._stats

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"Serving({_name(self.pipe)}, batch_size={self.batch_size}, "
            f"batch_timeout_ms={self.batch_timeout_ms:g}, {state})"
        )

    # ------------------------------------------------------------------ worker
    def _loop(self) -> None:
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    return
                self._execute(batch)
        finally:  # never leave a caller waiting, whatever stopped the worker
            with self._cond:
                self._closed = True
                left, self._queue = list(self._queue), deque()
            for r in left:
                if r.future.set_running_or_notify_cancel():
                    r.future.set_exception(ServingClosedError("Serving worker stopped"))
            release_thread()  # the pipeline ran on this thread

    def _next_batch(self) -> list[_Request] | None:
        """Waits for a call, then up to ``batch_timeout_ms`` after it for a full batch; None when closed."""
        with self._cond:
            while not self._queue:
                if self._closed:
                    return None
                self._cond.wait()
            first = self._queue[0]
            deadline = first.arrived + self.batch_timeout_ms / 1000
            while not self._closed and self._matching(first) < self.batch_size:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch, rest = [], deque()
            for r in self._queue:
                if len(batch) < self.batch_size and r.options == first.options:
                    batch.append(r)
                else:
                    rest.append(r)
            self._queue = rest
        return [r for r in batch if r.future.set_running_or_notify_cancel()]  # drops cancelled calls

    def _matching(self, first: _Request) -> int:
        return sum(1 for r in self._queue if r.options == first.options)

    def _execute(self, batch: list[_Request]) -> None:
        if not batch:
            return
        with self._cond:
            self._running = batch
        try:
            self._count(batches=1, inputs=len(batch))
            self._run_part(batch)
        except (KeyboardInterrupt, SystemExit) as error:  # release the callers, then stop
            for request in batch:
                if not request.future.done():
                    request.future.set_exception(ServingClosedError(f"Serving worker stopped: {error!r}"))
            raise
        finally:
            with self._cond:
                self._running = []

    def _run_part(self, part: list[_Request]) -> None:
        """Runs ``part`` of a batch as one pipeline call; when it raises, finds the inputs at fault."""
        try:
            results = self._call(part)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:  # an Exception, or a native library's panic: an error of the call
            self._isolate(part, as_exception(error, f"Serving({_name(self.pipe)})"))
            return
        for request, result in zip(part, results):
            request.future.set_result(result)

    def _isolate(self, part: list[_Request], error: Exception) -> None:
        """Gives ``error`` to the inputs at fault in ``part``, which raised it, and runs the others again.

        A lone input, a stream whose chunks are out (a rerun would repeat them) or that its consumer
        left, gets ``error``. Of the others, those that the pipeline's ``input_errors`` finds bad alone
        (without running the model) get their own error, and the rest run again as one batch; without
        that hook, or when it finds none, each half runs again. One bad input in n so costs about
        2 log2(n) reruns of parts of the batch, not n single-input runs.
        """
        if len(part) == 1:
            self._fail(part[0], error)
            return
        rest = []
        for request in part:
            if request.streamed or request.abandoned:
                self._fail(request, error)
            else:
                rest.append(request)
        good = self._without_bad_inputs(rest)
        if good is not None and len(good) < len(rest):
            parts = [good] if good else []
        else:
            half = (len(rest) + 1) // 2
            parts = [p for p in (rest[:half], rest[half:]) if p]
        for p in parts:
            self._count(retries=len(p))
            self._run_part(p)

    def _without_bad_inputs(self, part: list[_Request]) -> list[_Request] | None:
        """Fails the inputs that the pipeline's ``input_errors(items, **options)`` finds bad on their own;
        the others, or None for a pipeline without that hook (or when the hook itself fails)."""
        check = getattr(self.pipe, "input_errors", None)
        if not part or not callable(check):
            return None
        try:
            errors = check([r.item for r in part], **part[0].options)
        except Exception:
            return None
        good = []
        for request, own_error in zip(part, errors):
            if own_error is None:
                good.append(request)
            else:
                self._fail(request, own_error)
        return good

    def _count(self, **counts: int) -> None:
        with self._cond:
            s = self._stats
            self._stats = replace(s, **{k: getattr(s, k) + n for k, n in counts.items()})

    def _call(self, batch: list[_Request]) -> list[Any]:
        if batch[0].sink is not None:
            sinks = [r.sink for r in batch]
            results = self.pipe.stream_many([r.item for r in batch], sinks, **batch[0].options)
        else:
            results = self.pipe([r.item for r in batch], **batch[0].options)
        if not isinstance(results, list) or len(results) != len(batch):
            got = f"{len(results)} results" if isinstance(results, list) else type(results).__name__
            raise RuntimeError(f"Serving: {_name(self.pipe)} gave {got} for a list of {len(batch)} inputs")
        return results

    def _fail(self, request: _Request, error: BaseException) -> None:
        if not request.abandoned:  # a stream its consumer left is not an error of its input
            self._count(errors=1)
        request.future.set_exception(error)


_open_servings: weakref.WeakSet[Serving] = weakref.WeakSet()


@atexit.register
def _stop_open_servings() -> None:
    """Servings still open when the interpreter exits stop their workers: MLX aborts a process that
    exits while a thread still runs on its streams, and a worker releases them as it ends."""
    for serving in list(_open_servings):
        serving._stop(ABANDON_WAIT_S)


def _name(pipe: Any) -> str:
    return getattr(pipe, "task", "") or getattr(pipe, "__name__", "") or type(pipe).__name__
