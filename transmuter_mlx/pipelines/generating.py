"""The shared run, batching and streaming of the generation pipelines (text_generation, text_to_text).

>>> import transmuter_mlx as tm
>>> translate = tm.text.text_to_text("Xenova/opus-mt-en-de", num_beams=1)
>>> chunks = list(translate("The house is wonderful.", stream=True))         # text as it is generated
>>> "".join(chunks) == translate("The house is wonderful.")["results"][0]["text"]
True

:class:`GeneratingPipeline` owns everything between the inputs and the decoding loop that the
generation tasks share:

- ``pipe(x, stream=True)``: one input, an iterator of text chunks (a worker thread runs the loop),
  ending with ``("done", {"token_summary": ...})`` under ``stream_done=True``;
- ``stream_many(items, sinks)``: the batched run that ``tm.Serving`` streams through; a plain call is
  ``stream_many`` without sinks;
- batches of ``compile.batch_size`` inputs (inputs with different ``seed``s in different loops), a
  partial batch filled with copies of its first input so that every loop runs the compiled shapes, and
  the copies' outputs dropped;
- the tokens of each streamed row going through a :class:`TextStream` to its sink;
- the checks of a call's :class:`GenerationConfig` (each option's type and range, what cannot stream)
  and of each row's length against the model's context (:class:`ContextLimit`: an error past absolute
  positions, a cap with a warning otherwise).

A call runs as preprocess -> forward -> postprocess: ``preprocess`` (one input, checked and tokenized),
``generate_outputs`` (the decoding loops, with the streams' sinks) and ``postprocess`` (the texts). A task
fills in the hooks: ``preprocess``, ``generate_batch`` (one decoding loop over a full batch), ``decode``
(new tokens to text), and optionally ``configure``, ``normalize_input`` and ``text_prefix``.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .._tokenize import check_unicode_in
from ..generation.chunks import StreamAbandoned, all_abandoned, run_streamed
from ..generation.config import GenerationConfig
from ..generation.context import ContextLimit
from ..generation.loop import Generated
from ..generation.streaming import TextStream
from .base import Pipeline
from .batching import chunks, fill

__all__ = ["GENERATION_OPTIONS", "STREAM_OPTIONS", "GeneratingPipeline", "RowInput", "Sink"]

GENERATION_OPTIONS = GenerationConfig.fields()
STREAM_OPTIONS = MappingProxyType({"stream": False, "stream_done": False})

Sink = Callable[[str], None]


@dataclass(frozen=True)
class RowInput:
    """A request's row as it joins a continuous batch (``GeneratingPipeline.row_input``)."""

    prompt: list[int]  # the decoder's prompt
    source: Any = None  # the encoder's feeds (text-to-text), or None
    input_tokens: int = 0  # the token summary's "input"
    padding: int = 0  # ... and "padding"
Output = tuple[list[list[int]], dict[str, int]]  # an input's returned sequences and its token summary


class GeneratingPipeline(Pipeline):
    """A pipeline that runs a decoding loop: batching, streaming and the call's GenerationConfig.

    Subclasses set ``self.generation`` (the repository's :class:`GenerationConfig`), ``self.context_limit``
    (the decoder's :class:`ContextLimit`) and ``self.max_positions`` (``max_position_embeddings``, the cap of
    the default length of 20 new tokens, as transformers), and implement :meth:`preprocess`,
    :meth:`generate_batch` and :meth:`decode`. ``stream`` and ``stream_done`` must be in their ``defaults``
    (:data:`STREAM_OPTIONS`).
    """

    generation: GenerationConfig
    context_limit: ContextLimit
    max_positions: int | None = None
    # whether ``decode`` cleans up tokenization spaces (" ." -> "."): a stream then holds back the text
    # that a later token can change, so that its chunks join to the returned text
    decode_cleans_spaces: bool = False

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        # one decoding loop at a time: a stream's worker thread and a later call share the model
        self._loop_lock = threading.Lock()

    # ------------------------------------------------------------------ hooks
    def preprocess(self, index: int, item: Any, options: Mapping[str, Any], config: GenerationConfig) -> Any:
        """One input, checked and ready for :meth:`generate_batch` (a ``seed`` attribute, when it has
        one, puts it in a loop of that seed). Bad input raises here, naming ``index``."""
        raise NotImplementedError

    def generate_batch(self, batch: list[Any], config: GenerationConfig, options: Mapping[str, Any],
                       on_step: Callable[[list[list[int]]], None] | None) -> Generated:
        """One decoding loop over ``batch`` (``compile.batch_size`` prepared inputs, copies included);
        ``on_step`` goes to ``generate``. One token summary per input, input i's sequences at
        ``sequences[i * n:(i + 1) * n]``."""
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        """New token ids to text, as the task's transformers pipeline decodes them."""
        raise NotImplementedError

    def configure(self, config: GenerationConfig, options: Mapping[str, Any]) -> GenerationConfig:
        """The task's own checks and settings of a call's config (default: none)."""
        return config

    def normalize_input(self, inputs: Any) -> Any:
        """What a call's ``inputs`` mean before they are split into items (default: as given)."""
        return inputs

    def text_prefix(self, prepared: Any, options: Mapping[str, Any]) -> str:
        """Text put in front of each generated text of an input (default: none)."""
        return ""

    # continuous batching (generation/continuous.py): how a task's rows join a running batch
    def open_slots(self, slots: int) -> Any:
        """The slot cache of a running batch of ``slots`` rows (``generation/slots.py``)."""
        raise NotImplementedError(f"{self.task} has no continuous batching")

    def row_input(self, prepared: Any, config: GenerationConfig, options: Mapping[str, Any]) -> RowInput:
        """What a prepared input brings to its slot: the decoder prompt, the encoder's feeds (a seq2seq task)
        and its token summary's ``input`` and ``padding``."""
        raise NotImplementedError(f"{self.task} has no continuous batching")

    # ------------------------------------------------------------------ options
    def generation_for(self, options: Mapping[str, Any]) -> GenerationConfig:
        """The GenerationConfig of a call: generation_config.json, then the options given."""
        given = {k: v for k, v in options.items() if k in GENERATION_OPTIONS and v is not None}
        try:
            config = self.generation.update(**given)  # GenerationConfig checks each option's type and range
        except ValueError as error:
            raise ValueError(f"{self.task}: {error}") from error
        if options.get("stream") and config.mode == "beam":
            # Marian's generation_config.json asks for 4 beams: say where the beams came from
            origin = "" if "num_beams" in given else (
                f", the default of the generation_config.json of {self.repo.name}")
            raise ValueError(
                f"{self.task}: beam search (num_beams={config.num_beams}{origin}) does not stream: a later "
                "step can change the earlier tokens of the best beam; pass num_beams=1 to stream, or drop "
                "stream=True")
        if options.get("stream") and config.num_return_sequences > 1:
            raise ValueError(f"{self.task}: stream=True streams one sequence; num_return_sequences must be "
                             f"1, got {config.num_return_sequences}")
        return self.configure(config, options)

    def row_length(self, config: GenerationConfig, prompt_length: int, where: str = "") -> int:
        """The most tokens (prompt included) a row of ``prompt_length`` decoder tokens may reach under the
        model's context (:meth:`ContextLimit.max_length`); its errors name the task and ``where``."""
        try:
            return self.context_limit.max_length(config, prompt_length, self.max_positions)
        except ValueError as error:
            raise ValueError(f"{self.task}: {where}{error}") from error

    def warn_context_end(self, out: Generated, prompt_lengths: Sequence[int], config: GenerationConfig) -> None:
        """Warns when a row stopped at the end of the model's context (a cap: rotary or relative positions)
        before the length its options asked for; once per decoding loop."""
        limit, k = self.context_limit, max(len(out.sequences) // max(len(prompt_lengths), 1), 1)
        for i, n in enumerate(prompt_lengths):
            asked, _ = config.lengths(n, self.max_positions)
            ended = [s for s in out.sequences[i * k:(i + 1) * k] if n + len(s) >= limit.positions]
            if asked > limit.positions and ended:
                option = "max_new_tokens" if config.max_new_tokens is not None else "max_length"
                warnings.warn(f"{self.task}: a row stopped at the end of {limit.describe()}, after {n} prompt and "
                              f"{len(ended[0])} new tokens, before the {option}={getattr(config, option)} asked for",
                              stacklevel=2)
                return

    # ------------------------------------------------------------------ run
    def __call__(self, inputs: Any, **options: Any) -> Any:
        inputs = self.normalize_input(inputs)
        opts = self.call_options(options)
        if not opts.get("stream"):
            return super().__call__(inputs, **options)
        if isinstance(inputs, list | tuple):
            raise ValueError(f"{self.task}: stream=True takes one input, not a list")
        return self.stream(inputs, opts)

    def run(self, items: list[Any], options: dict[str, Any]) -> list[dict[str, Any]]:
        return self.stream_many(items, [None] * len(items), **options)

    def stream_many(self, items: Sequence[Any], sinks: Sequence[Sink | None],
                    **options: Any) -> list[dict[str, Any]]:
        """Generate for ``items`` (in batches of ``compile.batch_size``); each text chunk of input i goes
        to ``sinks[i]`` as it is ready (None: no streaming). Returns the results. Serving uses this."""
        opts = self.call_options(options)
        if any(sinks):  # a sink streams, so the call must be one that can
            opts["stream"] = True
        outputs = self.generate_outputs(items, sinks, opts)
        return [self.postprocess(prepared, out, opts) for prepared, out in outputs]

    def input_errors(self, items: Sequence[Any], **options: Any) -> list[Exception | None]:
        """The error each input would raise alone (None: it is good), found by preparing it, without
        decoding. ``tm.Serving`` uses it after a batch raised: the bad inputs fail alone and the others
        run again as one batch, so one bad input costs one more loop, not a loop per input."""
        try:
            opts = self.call_options(options)
            config = self.generation_for(opts)
        except Exception as error:  # the call's options: every input gets their error
            return [error] * len(items)
        errors: list[Exception | None] = []
        for item in items:
            try:
                self.preprocess(0, check_unicode_in(item, f"{self.task}: input 0"), opts, config)
                errors.append(None)
            except Exception as error:
                errors.append(error)
        return errors

    def generate_outputs(self, items: Sequence[Any], sinks: Sequence[Sink | None],
                         options: Mapping[str, Any]) -> list[tuple[Any, Output]]:
        """For each item: its prepared input, the new token ids of its returned sequences and its token
        summary. ``options`` are a call's checked options (``call_options``)."""
        config = self.generation_for(options)
        prepared = [self.preprocess(i, check_unicode_in(x, f"{self.task}: input {i}"), options, config)
                    for i, x in enumerate(items)]
        by_seed: dict[Any, list[int]] = {}
        for i, p in enumerate(prepared):  # the rows of one loop share a seed
            seed = getattr(p, "seed", None)
            by_seed.setdefault(seed if seed is not None else config.seed, []).append(i)
        outputs: list[Output] = [([], {}) for _ in items]
        for seed, indices in by_seed.items():
            for chunk in chunks(indices, self.options.compile.batch_size):
                outs = self._run_batch([prepared[i] for i in chunk], config.update(seed=seed), options,
                                       [sinks[i] for i in chunk])
                for i, out in zip(chunk, outs):
                    outputs[i] = out
        return list(zip(prepared, outputs))

    def _run_batch(self, batch: list[Any], config: GenerationConfig, options: Mapping[str, Any],
                   sinks: list[Sink | None]) -> list[Output]:
        """One decoding loop. A partial batch is filled with copies of its first input so that the loop
        runs the compiled shapes; the copies' outputs are dropped here."""
        filled = fill(batch, self.options.compile.batch_size)
        streams = [TextStream(self.decode, skip_prompt=False, cleans_spaces=self.decode_cleans_spaces)
                   if s else None for s in sinks]
        pushed = [0] * len(sinks)
        for prepared, sink in zip(batch, sinks):  # the returned text starts with the prefix, so does the stream
            if sink and (prefix := self.text_prefix(prepared, options)):
                sink(prefix)

        def on_step(new: list[list[int]]) -> None:  # rows are inputs: streaming is greedy or one sample
            if all_abandoned(sinks):
                raise StreamAbandoned(f"{self.task}: every consumer of this loop's streams left")
            for i, (stream, sink) in enumerate(zip(streams, sinks)):
                if stream is None:
                    continue
                for token in new[i][pushed[i]:]:
                    for chunk in stream.push([token]):
                        sink(chunk)
                pushed[i] = len(new[i])

        with self._loop_lock:
            if all_abandoned(sinks):  # left while this loop waited for the one before it
                raise StreamAbandoned(f"{self.task}: every consumer of this loop's streams left")
            out = self.generate_batch(filled, config, options, on_step if any(sinks) else None)
        for stream, sink in zip(streams, sinks):
            for chunk in stream.end() if stream else []:
                sink(chunk)
        k = config.num_return_sequences if config.mode != "greedy" else 1
        return [(out.sequences[i * k:(i + 1) * k], out.token_summaries[i]) for i in range(len(batch))]

    def postprocess(self, prepared: Any, out: Output, options: Mapping[str, Any]) -> dict[str, Any]:
        """``{"results": [{"text", "token_summary"}, ...]}``, one entry per returned sequence."""
        sequences, summary = out
        prefix = self.text_prefix(prepared, options)
        return {"results": [{"text": prefix + self.decode(s), "token_summary": {**summary, "output": len(s)}}
                            for s in sequences]}

    # ------------------------------------------------------------------ streaming
    def stream(self, item: Any, options: Mapping[str, Any]) -> Iterator[Any]:
        """The text chunks of one input as they are generated (a worker thread runs the loop).

        Leaving the iterator early (``break``, dropping it, ``close()``) stops the loop at its next step
        and waits for the worker thread to release its MLX state (``generation/chunks.py``).
        """
        opts = {**options, "stream": True}
        item = check_unicode_in(item, f"{self.task}: input 0")
        self.preprocess(0, item, opts, self.generation_for(opts))  # bad input fails here, not in the iterator
        return run_streamed(self.task, lambda sink: self.stream_many([item], [sink], **opts)[0],
                            bool(opts.get("stream_done")))
