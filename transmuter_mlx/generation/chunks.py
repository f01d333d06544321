"""The two ends of a text stream: the decoding thread's :class:`ChunkSink` and the consumer's :class:`TextChunks`.

>>> sink, outcome = ChunkSink(), Future()
>>> sink("Hello "), sink("world"), outcome.set_result({"results": [{"token_summary": {}}]}), sink.end()
(None, None, None, None)
>>> list(TextChunks(sink, outcome, done=False))
['Hello ', 'world']

A consumer may leave a stream early: ``break`` out of its loop, an exception, a closed pipe, or just
dropping the iterator. :meth:`TextChunks.close` (called by ``del``, garbage collection, ``with`` and, for
the streams still open, at interpreter exit) marks the sink abandoned, so that the decoding loop stops at
its next step (:class:`StreamAbandoned`, which no consumer sees), and waits up to :data:`ABANDON_WAIT_S`
for the stream's decoding thread to end. That thread releases its MLX state as it ends: MLX aborts a
process that exits while a thread still runs on its streams ("terminate called without an active
exception").
"""

from __future__ import annotations

import asyncio
import atexit
import queue
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

__all__ = ["ABANDON_WAIT_S", "ChunkSink", "StreamAbandoned", "TextChunks", "all_abandoned", "run_streamed"]

ABANDON_WAIT_S = 30.0  # the most a consumer that leaves a stream waits for its decoding to stop (one step)
_END = object()  # the end mark of a sink's queue
_open_streams: weakref.WeakSet[TextChunks] = weakref.WeakSet()


class StreamAbandoned(Exception):
    """Stops a decoding loop whose streams were all left by their consumers (no consumer sees it)."""


class ChunkSink:
    """Where a decoding thread puts one stream's text chunks, until the consumer abandons it.

    ``sent`` says whether a chunk went out (such a stream cannot be rerun without repeating it).
    """

    def __init__(self) -> None:
        self.chunks: queue.Queue = queue.Queue()
        self.abandoned = threading.Event()
        self.sent = False
        self.on_put: Callable[[], Any] | None = None  # told after each put (an asyncio consumer's wake-up)

    def __call__(self, chunk: Any) -> None:
        if not self.abandoned.is_set():
            self.sent = True
            self._put(chunk)

    def end(self) -> None:
        """Puts the end mark: the run's outcome is set."""
        self._put(_END)

    def _put(self, item: Any) -> None:
        self.chunks.put(item)
        if self.on_put is not None:
            self.on_put()


def all_abandoned(sinks: Sequence[Any]) -> bool:
    """Whether every row of a loop streams to a sink that its consumer left (a row without a sink wants
    its result, so the loop goes on for it)."""
    return bool(sinks) and all(isinstance(s, ChunkSink) and s.abandoned.is_set() for s in sinks)


class TextChunks(Iterator[Any]):
    """The consumer's end of a stream: the chunks of ``sink`` until its end mark, then the outcome's error
    raised, or with ``done`` a final ``("done", {"token_summary": ...})``.

    ``close()`` abandons an unfinished stream: ``on_close`` is called (a Serving drops a call not yet
    started) and the decoding thread ``worker``, when there is one, is waited for.
    """

    def __init__(self, sink: ChunkSink, outcome: Future, done: bool, *, worker: threading.Thread | None = None,
                 on_close: Callable[[], Any] | None = None) -> None:
        self._sink, self._outcome, self._done = sink, outcome, done
        self._worker, self._on_close = worker, on_close
        self._open = True
        self._wakeup: asyncio.Event | None = None
        _open_streams.add(self)

    def __iter__(self) -> TextChunks:
        return self

    def __next__(self) -> Any:
        if not self._open:
            raise StopIteration
        return self._take(self._sink.chunks.get(), StopIteration)

    def __aiter__(self) -> TextChunks:
        return self

    async def __anext__(self) -> Any:
        """The next chunk for an asyncio consumer, awaited without holding a thread (a server streams to
        many clients at once)."""
        if not self._open:
            raise StopAsyncIteration
        if self._wakeup is None:
            loop, event = asyncio.get_running_loop(), asyncio.Event()
            self._wakeup = event

            def wake() -> None:
                try:
                    loop.call_soon_threadsafe(event.set)
                except RuntimeError:  # the consumer's loop is closed: nobody waits any more
                    pass

            self._sink.on_put = wake
        while True:
            try:
                item = self._sink.chunks.get_nowait()
            except queue.Empty:
                await self._wakeup.wait()
                self._wakeup.clear()  # a put after the wake-up is found by the next get_nowait
                continue
            return self._take(item, StopAsyncIteration)

    def _take(self, item: Any, stop: type[Exception]) -> Any:
        if item is not _END:
            return item
        self._open = False
        result = self._outcome.result()  # the run's error is raised here (the outcome is set before the end)
        if self._done:
            return ("done", {"token_summary": result["results"][0]["token_summary"]})
        raise stop

    def close(self, timeout: float = ABANDON_WAIT_S) -> None:
        """Leaves the stream: its decoding stops at the next step; waits up to ``timeout`` s for its thread."""
        if not self._open:
            return
        self._open = False
        self._sink.abandoned.set()
        if self._on_close is not None:
            self._on_close()
        self.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        """Waits (up to ``timeout`` s) for the stream's decoding thread, if any, to end."""
        if self._worker is not None and self._worker is not threading.current_thread():
            self._worker.join(timeout)

    def __enter__(self) -> TextChunks:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter teardown the modules it uses may be gone
            pass


def run_streamed(task: str, run: Callable[[ChunkSink], Any], done: bool = False) -> TextChunks:
    """The consumer's end of a stream whose chunks ``run(sink)`` sends from a worker thread; its return
    value is the outcome (what ``done`` reports), its error is raised to the consumer."""
    from .._native import as_exception
    from ..converters.backends.threads import release_openmp_pool, release_thread

    sink, outcome = ChunkSink(), Future()

    def work() -> None:
        try:
            outcome.set_result(run(sink))
        except BaseException as error:  # handed to the consumer (a native panic as an Exception)
            outcome.set_exception(as_exception(error, task))
        finally:
            try:
                release_thread()  # before the end mark: the consumer may end the process right after it
            finally:
                sink.end()

    worker = threading.Thread(target=work, name=f"{task}-stream", daemon=True)
    release_openmp_pool()  # the consumer waits on chunks: its idle torch team would slow the worker's ops 3-4x
    worker.start()
    return TextChunks(sink, outcome, done, worker=worker)


@atexit.register
def _close_open_streams() -> None:
    """Streams still open at exit (an iterator kept in a global, never finished) stop their decoding."""
    for stream in list(_open_streams):
        stream.close()
