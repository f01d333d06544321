"""``ContinuousBatcher``: generation where requests join a running decoding batch and leave it as they end.

>>> import transmuter_mlx as tm
>>> from tests.fixtures.generation_models import build
>>> pipe = tm.text.generation(str(build("gpt2")), compile={"batch_size": 4})
>>> with ContinuousBatcher(pipe) as batcher:
...     batcher.run("Hello", max_new_tokens=4) == pipe("Hello", max_new_tokens=4)
True

``tm.Serving`` runs a batch to its end before it starts the next: a request that arrives meanwhile waits,
and a short answer holds its row until the longest one is done. Here one worker thread owns a slot cache
(``slots.py``: ``compile.batch_size`` rows, the compiled shapes of a batch) and, between two decoding steps,

- prefills the requests that arrived (each alone) into free slots: they join at the next step;
- frees the slots of rows that ended (eos, length, a stop string), whose consumer left (a stream closed,
  ``arun`` cancelled), or whose request failed.

The pipeline says how its rows join (``open_slots``, ``row_input``): text generation prefills the prompt
into a slot of the decoder's cache; text-to-text (translation, summarization) encodes the row's text and
starts its decoder. Each row keeps its own logits processors, its own random key (its ``seed``) and its own
length bounds, so
its tokens are those of its sequential run: greedy rows, and sampled rows with the same seed. Requests with
``num_return_sequences=n`` take n slots. Beam search (whose beams reorder the cache together) runs as one
loop of its own between two steps. The interface is that of ``tm.Serving`` (``run``, ``arun``, ``run(...,
stream=True)``, ``stats``, ``close``), so a server uses either.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._native import as_exception
from .._tokenize import check_unicode_in
from ..converters.backends.threads import release_openmp_pool, release_thread
from ..serving import ServingClosedError, ServingStats
from .chunks import ChunkSink, StreamAbandoned, TextChunks
from .config import GenerationConfig
from .loop import _bounds, _stop
from .processors import Rows, apply, build_processors
from .sampling import RowKeys, host_tokens, pick
from .streaming import TextStream

__all__ = ["ContinuousBatcher"]


@dataclass
class _Request:
    item: Any
    options: dict[str, Any]
    future: Future
    sink: ChunkSink | None = None
    abandoned: threading.Event = field(default_factory=threading.Event)
    # set when admitted
    prepared: Any = None
    config: GenerationConfig | None = None
    row_input: Any = None  # the pipeline's RowInput
    rows: list[_Row] = field(default_factory=list)

    def left(self) -> bool:
        return self.abandoned.is_set() or (self.sink is not None and self.sink.abandoned.is_set())


@dataclass
class _Row:
    request: _Request
    slot: int
    prompt: list[int]
    tokens: list[int]
    chain: list[Any]
    keys: RowKeys | None
    max_length: int
    min_length: int
    stream: TextStream | None
    done: bool = False

    @property
    def new(self) -> list[int]:
        return self.tokens[len(self.prompt):]


class ContinuousBatcher:
    """Continuous batching over a text-generation pipeline's decoder (see the module docstring).

    ``slots`` defaults to the pipeline's ``compile.batch_size``.
    """

    def __init__(self, pipe: Any, slots: int | None = None) -> None:
        self.pipe = pipe
        self.task = getattr(pipe, "task", "text-generation")
        self.batch_size = self.slots = int(slots or pipe.options.compile.batch_size)
        if self.slots < 1:
            raise ValueError(f"ContinuousBatcher: slots must be >= 1, got {slots}")
        self.cache = pipe.open_slots(self.slots)  # the task's slot cache (generation/slots.py)
        self.pad = pipe.generation.pad_id if pipe.generation.pad_id is not None else 0
        self.single_types = getattr(pipe, "single_types", (str, dict))
        self._queue: deque[_Request] = deque()
        self._rows: list[_Row | None] = [None] * self.slots
        self._cond = threading.Condition()
        self._closed = False
        self._stats = ServingStats()
        self._worker = threading.Thread(target=self._loop, name=f"ContinuousBatcher({self.task})", daemon=True)
        release_openmp_pool()  # as Serving: the worker's torch ops run fastest when no other thread keeps a pool
        self._worker.start()

    # ------------------------------------------------------------------ calls
    def run(self, inputs: Any, *, stream: bool = False, timeout: float | None = None, **options: Any) -> Any:
        """The result of ``inputs`` (a list of results for a list); ``stream=True``: one input's text chunks
        (``stream_done=True`` ends them with ``("done", {"token_summary": ...})``)."""
        if stream:
            return self._stream(inputs, options)
        requests, batched = self._submit(inputs, options)
        results = [r.future.result(timeout) for r in requests]
        return results if batched else results[0]

    async def arun(self, inputs: Any, *, stream: bool = False, **options: Any) -> Any:
        """``run`` for asyncio; a cancelled caller frees its rows at the next step."""
        if stream:
            return self._stream(inputs, options)
        requests, batched = self._submit(inputs, options)
        try:
            results = [await asyncio.wrap_future(r.future) for r in requests]
        except asyncio.CancelledError:
            for r in requests:
                r.abandoned.set()
                r.future.cancel()
            raise
        return results if batched else results[0]

    def _stream(self, inputs: Any, options: Mapping[str, Any]) -> TextChunks:
        if isinstance(inputs, list):
            raise ValueError(f"{self.task}: stream=True takes one input, not a list")
        options = dict(options)
        done = bool(options.pop("stream_done", False))
        sink = ChunkSink()
        request = _Request(inputs, {**options, "stream": True}, Future(), sink)
        request.future.add_done_callback(lambda _: sink.end())
        self._enqueue([request])
        return TextChunks(sink, request.future, done, on_close=request.abandoned.set)

    def _submit(self, inputs: Any, options: Mapping[str, Any]) -> tuple[list[_Request], bool]:
        batched = isinstance(inputs, list)
        items = inputs if batched else [inputs]
        requests = [_Request(item, dict(options), Future()) for item in items]
        self._enqueue(requests)
        return requests, batched

    def _enqueue(self, requests: list[_Request]) -> None:
        with self._cond:
            if self._closed:
                raise ServingClosedError(f"ContinuousBatcher({self.task}) is closed")
            self._queue.extend(requests)
            self._cond.notify_all()

    # ------------------------------------------------------------------ lifecycle
    def close(self, timeout: float | None = 30.0) -> None:
        """Refuses new requests, finishes those queued and running, and stops the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._worker:
            self._worker.join(timeout)

    def __enter__(self) -> ContinuousBatcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def stats(self) -> ServingStats:
        """``batches``: decoding steps run; ``inputs``: the rows they held (``mean_batch_size``: rows per step)."""
        with self._cond:
            return self._stats

    @property
    def running(self) -> int:
        """Rows decoding now."""
        return sum(r is not None for r in self._rows)

    # ------------------------------------------------------------------ worker
    def _loop(self) -> None:
        self.cache.B.prepare_thread()  # the worker owns the model's arrays (MLX streams are per thread)
        try:
            while True:
                with self._cond:
                    while not self._queue and not any(self._rows):
                        if self._closed:
                            return
                        self._cond.wait()
                self._admit()
                if any(self._rows):
                    self._step()
        finally:
            with self._cond:
                self._closed = True
                left, self._queue = list(self._queue), deque()
            for request in left + [r.request for r in self._rows if r is not None]:
                if not request.future.done():
                    request.future.set_exception(ServingClosedError(f"ContinuousBatcher({self.task}) stopped"))
            release_thread()

    def _admit(self) -> None:
        """Requests that arrived go into free slots (or wait for them); beam searches run now, alone."""
        while True:
            with self._cond:
                if not self._queue:
                    return
                request = self._queue[0]
                if request.left() or request.future.cancelled():
                    self._queue.popleft()
                    continue
                free = [s for s, r in enumerate(self._rows) if r is None]
                try:
                    needed = self._prepare(request)
                except Exception as error:  # noqa: BLE001 - a bad request fails alone
                    self._queue.popleft()
                    self._finish(request, error=as_exception(error, self.task))
                    continue
                if needed > self.slots:
                    self._queue.popleft()
                    self._finish(request, error=ValueError(
                        f"{self.task}: num_return_sequences={needed} is more than the {self.slots} rows of the "
                        "running batch (compile.batch_size)"))
                    continue
                if needed > len(free) and request.config is not None and request.config.mode != "beam":
                    return  # waits for rows to end
                self._queue.popleft()
            if not request.future.set_running_or_notify_cancel():
                continue
            if request.config.mode == "beam":
                if any(self._rows):
                    with self._cond:
                        self._queue.appendleft(request)  # after the running rows end: beams need the model alone
                    return
                self._run_beams(request)
                continue
            try:
                self._join(request, free[:needed])
            except Exception as error:  # noqa: BLE001
                self._drop(request, as_exception(error, self.task))

    def _prepare(self, request: _Request) -> int:
        """Checks and tokenizes a request (once); the rows it needs."""
        if request.config is None:
            pipe = self.pipe
            opts = pipe.call_options(request.options)
            request.options = opts
            config = pipe.generation_for(opts)
            item = check_unicode_in(pipe.normalize_input(request.item), f"{self.task}: input 0")
            request.prepared = pipe.preprocess(0, item, opts, config)
            seed = getattr(request.prepared, "seed", None)
            request.config = config.update(seed=seed if seed is not None else config.seed)
        config = request.config
        return config.num_return_sequences if config.mode == "sample" else 1

    def _join(self, request: _Request, slots: list[int]) -> None:
        pipe, config = self.pipe, request.config
        request.row_input = pipe.row_input(request.prepared, config, request.options)
        prompt = list(request.row_input.prompt)
        copies = len(slots)
        max_length, min_length = _bounds([prompt], config, pipe.max_positions, pipe.context_limit.positions)[0]
        if request.sink is not None and (prefix := pipe.text_prefix(request.prepared, request.options)):
            request.sink(prefix)
        for j, slot in enumerate(slots):
            keys = RowKeys([config.seed], [(j, copies)]) if config.mode == "sample" else None
            stream = (TextStream(pipe.decode, skip_prompt=False, cleans_spaces=pipe.decode_cleans_spaces)
                      if request.sink is not None else None)
            row = _Row(request, slot, prompt, list(prompt), build_processors(config), keys, max_length, min_length,
                       stream)
            request.rows.append(row)
            self._rows[slot] = row
            if len(prompt) >= max_length:
                row.done = True
                continue
            logits = self.cache.join(slot, prompt, request.row_input.source)
            token = int(host_tokens(self.cache.B, self._pick(row, logits))[0])
            self._append(row, token)
        self._settle(request)

    def _pick(self, row: _Row, logits: Any) -> Any:
        B = self.cache.B
        rows = Rows([row.tokens], [len(row.prompt)], [row.max_length], [row.min_length])
        scores = apply(row.chain, B, B.astype(logits, np.float32), rows)
        return pick(B, scores, row.keys)

    def _append(self, row: _Row, token: int) -> None:
        row.tokens.append(token)
        config = row.request.config
        if row.stream is not None:
            for chunk in row.stream.push([token]):
                row.request.sink(chunk)
        if _stop(row.new, token, len(row.tokens), row.max_length, config, self.pipe.decode):
            row.done = True

    def _step(self) -> None:
        live = [r for r in self._rows if r is not None and not r.done]
        if live:
            B = self.cache.B
            tokens = np.full(self.slots, self.pad, np.int64)
            for row in live:
                tokens[row.slot] = row.tokens[-1]
            logits = self.cache.step(tokens)
            picks = [self._pick(row, B.slice(logits, [row.slot, 0], [row.slot + 1, B.shape(logits)[1]], [1, 1]))
                     for row in live]
            chosen = host_tokens(B, B.concatenate([B.reshape(p, (1,)) for p in picks], 0)).tolist()
            for row, token in zip(live, chosen):
                self._append(row, int(token))
            with self._cond:
                s = self._stats
                self._stats = ServingStats(s.batches + 1, s.inputs + len(live), s.retries, s.errors)
        for request in {id(r.request): r.request for r in self._rows if r is not None}.values():
            self._settle(request)

    def _settle(self, request: _Request) -> None:
        """Frees the rows of a request that ended or was left, and gives it its result."""
        if request.left():
            self._drop(request, StreamAbandoned(f"{self.task}: the consumer of this request left"))
            return
        if not all(r.done for r in request.rows):
            return
        for row in request.rows:
            self._free(row)
            if row.stream is not None:
                for chunk in row.stream.end():
                    request.sink(chunk)
        summary = {"input": request.row_input.input_tokens, "output": sum(len(r.new) for r in request.rows),
                   "padding": request.row_input.padding}
        try:
            result = self.pipe.postprocess(request.prepared, ([r.new for r in request.rows], summary),
                                           request.options)
        except Exception as error:  # noqa: BLE001
            self._finish(request, error=as_exception(error, self.task))
            return
        self._finish(request, result=result)

    def _drop(self, request: _Request, error: BaseException) -> None:
        for row in request.rows:
            self._free(row)
        self._finish(request, error=error)

    def _free(self, row: _Row) -> None:
        if self._rows[row.slot] is row:
            self._rows[row.slot] = None
            self.cache.leave(row.slot)

    def _finish(self, request: _Request, result: Any = None, error: BaseException | None = None) -> None:
        if request.future.done():
            return
        if error is not None:
            with self._cond:
                s = self._stats
                self._stats = ServingStats(s.batches, s.inputs, s.retries, s.errors + 1)
            request.future.set_exception(error)
        else:
            request.future.set_result(result)

    def _run_beams(self, request: _Request) -> None:
        try:
            sinks = [request.sink] if request.sink is not None else [None]
            result = self.pipe.stream_many([request.item], sinks, **request.options)[0]
        except Exception as error:  # noqa: BLE001
            self._finish(request, error=as_exception(error, self.task))
            return
        self._finish(request, result=result)

    def __repr__(self) -> str:
        return f"ContinuousBatcher({self.task}, slots={self.slots}, {'closed' if self._closed else 'open'})"


