"""The Pipeline base (any modality), and the encoder pipeline that the one-graph tasks share.

>>> import transmuter_mlx as tm
>>> pipe = tm.pipeline("text-classification", "Xenova/distilbert-base-uncased-finetuned-sst-2-english")
>>> isinstance(pipe, EncoderPipeline), pipe.family.__name__, pipe.processor.kind
(True, 'transmuter_mlx.zoo.bert', 'tokenizer')
>>> [p["label"] for p in pipe("I love this", top_k=None)["predictions"]] in (["NEGATIVE", "POSITIVE"],
...                                                                           ["POSITIVE", "NEGATIVE"])
True

A pipeline holds its components (the repository, its zoo family and ``ModelArgs``, the model files, a
processor) and runs a call as **preprocess -> forward -> postprocess**: ``preprocess`` turns each input
into features (token rows today; pixels and frames next), ``forward`` runs them through the model in
batches of compiled shapes (``batching.run_batched``), ``postprocess`` turns an input's outputs into its
result. ``pipe(x)`` gives one result, ``pipe([x, y])`` a list. A task's own options (``defaults``) may be
given when the pipeline is built or, to override them, at each call.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Iterable, Mapping
from types import MappingProxyType, ModuleType
from typing import Any, ClassVar

import numpy as np

from .. import zoo
from ..converters.model import Model, load
from ..hub import Repo, open_repo
from ..processors import Processor
from ..processors.text import TextProcessor
from ..tokenizer import Tokenizer
from .batching import run_batched
from .iterables import RUN_OPTIONS, is_iterable_input, iterate
from .options import Options, as_list, check_counts, positive_int

__all__ = ["EncoderPipeline", "Pipeline"]

SOURCE_TYPES = (str, os.PathLike, Repo, tuple)


class Pipeline:
    """The components of a task and the run of a call (see the module docstring).

    On build: the repository (``source``, else the task's default model), the options, and the zoo family of
    its config.json (``family``, with ``args = family.ModelArgs.from_dict(config)``), which must serve the task.
    """

    task: ClassVar[str] = ""
    defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    #: the task's integer options: name -> (least value, whether None is allowed), checked where options are
    #: given (when the pipeline is built, and at each call)
    count_options: ClassVar[Mapping[str, tuple[int, bool]]] = MappingProxyType({})
    single_types: ClassVar[tuple[type, ...]] = (str,)

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        if isinstance(options.get("model"), SOURCE_TYPES):  # transformers spelling: model="org/name"
            if source is not None:
                raise TypeError(f"{self.task}: the repository is given twice ({source!r} and model=)")
            source = options.pop("model")
        self.options = Options.parse(self.task, options, self.defaults)
        check_counts(self.task, self.options.extra, self.count_options)
        if source is None:
            from . import TASKS

            source = TASKS[self.task].default_model
        o = self.options
        self.repo = open_repo(source, revision=o.revision, cache_dir=o.cache_dir, offline=o.offline)
        self.config = self.repo.config
        self.family: ModuleType = zoo.family(self.config)
        if self.task not in self.family.TASKS:
            raise ValueError(f"{self.task}: {self.repo.name} is a model of the "
                             f"{self.family.__name__.rsplit('.', 1)[-1]} family, which does not serve this task; "
                             f"it serves {', '.join(sorted(self.family.TASKS))}")
        self.args = self.family.ModelArgs.from_dict(self.config)

    # ------------------------------------------------------------------ components
    def load_file(self, role: str) -> Model:
        """The ONNX file of ``role`` of the family's ``FILES`` (the first of its stems the repository has),
        loaded with the pipeline's backend, dtype, device and variant."""
        o = self.options
        stems = self.family.FILES[role]
        stem = next((s for s in stems if self.repo.onnx_variants(s)), stems[0])
        path = self.repo.onnx_path(stem, variant=o.variant, task_default=self.family.DEFAULT_VARIANT)
        return load(path, backend=o.backend, dtype=o.dtype, device=o.device)

    def has_file(self, role: str) -> bool:
        """Whether the repository has an ONNX file of ``role``."""
        return any(self.repo.onnx_variants(s) for s in self.family.FILES.get(role, ()))

    # ------------------------------------------------------------------ calls
    def __call__(self, inputs: Any, **options: Any) -> Any:
        batch_size, progress = options.pop("batch_size", None), options.pop("progress", False)
        opts = self.call_options(options)  # bad options raise here, also for an iterable's lazy results
        runner = self if batch_size is None else self.with_batch_size(batch_size)
        dataset, inputs = self.iterable_inputs(inputs)
        if dataset is not None:
            return iterate(runner, dataset, runner.options.compile.batch_size, options, progress)
        items, batched = as_list(inputs, self.single_types)
        if runner is not self or progress:
            results = list(iterate(runner, items, runner.options.compile.batch_size, options, progress))
        else:
            results = self.run(items, opts) if items else []
        return results if batched else results[0]

    def iterable_inputs(self, inputs: Any) -> tuple[Iterable[Any] | None, Any]:
        """``(dataset, inputs)``: the dataset is ``inputs`` when they are an iterable of inputs other than a list
        or tuple (a generator, a dataset), whose results are then given lazily (pipelines/iterables.py), else
        None; ``inputs`` is what to read in its place (a task that must look at the first item puts it back)."""
        return (inputs if is_iterable_input(inputs) else None), inputs

    def with_batch_size(self, batch_size: int) -> Pipeline:
        """This pipeline running ``batch_size`` inputs per model call (its model, files and caches shared)."""
        n = positive_int(f"{self.task}: batch_size", batch_size)
        if n == self.options.compile.batch_size:
            return self
        twin = copy.copy(self)
        twin.options = dataclasses.replace(self.options, compile=dataclasses.replace(self.options.compile,
                                                                                      batch_size=n))
        return twin

    def call_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The task options of one call: those given override those of the pipeline (``batch_size`` and
        ``progress``, how to run the call, are not task options)."""
        given = {k: v for k, v in given.items() if k not in RUN_OPTIONS}
        unknown = [k for k in given if k not in self.defaults]
        if unknown:
            raise TypeError(
                f"{self.task}: unknown call option(s) {unknown}; "
                f"options of a call are {sorted([*self.defaults, *RUN_OPTIONS])}"
            )
        check_counts(self.task, given, self.count_options)
        return {**self.options.extra, **given}

    def run(self, items: list[Any], options: dict[str, Any]) -> list[Any]:
        """preprocess each input, forward them together, postprocess each."""
        options = self.prepare_options(options)
        prepared = [self.preprocess(i, x, options) for i, x in enumerate(items)]
        outputs = self.forward(prepared, options)
        return [self.postprocess(p, out, options) for p, out in zip(prepared, outputs)]

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """A call's options, checked and completed once before its inputs (default: as given)."""
        return options

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Any:
        """Input ``index``, checked and turned into what ``forward`` takes; bad input raises naming ``index``."""
        raise NotImplementedError

    def forward(self, prepared: list[Any], options: Mapping[str, Any]) -> list[Any]:
        """The model's outputs for each prepared input."""
        raise NotImplementedError

    def postprocess(self, prepared: Any, outputs: Any, options: Mapping[str, Any]) -> Any:
        """The result of one input."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.repo!r}, backend={self.options.backend!r})"


class Prepared:
    """An input of an encoder task: its rows (features) and what its postprocessing needs (``data``)."""

    __slots__ = ("data", "rows")

    def __init__(self, rows: list[Any], data: Any = None) -> None:
        self.rows, self.data = rows, data


class EncoderPipeline(Pipeline):
    """A task on one encoder graph (the family's ``FILES["model"]``) and a processor (the tokenizer's today).

    ``preprocess`` gives a :class:`Prepared` (its rows: ``processor.rows``); ``forward`` runs every row of a
    call in compiled batches and gives each input the outputs of its rows (float32 numpy; per-position
    outputs cut to the row's own positions, unless the task's ``per_position`` is False).
    """

    per_position: ClassVar[bool] = True  # whether the task reads per-token outputs (else pooled logits)

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        o = self.options
        self.model: Model = o.model if o.model is not None else self.load_file("model")  # or any Model-like
        self.processor: Processor = self.build_processor()

    def build_processor(self) -> Processor:
        """The processor of the task's inputs: the repository's tokenizer for text (``self.tokenizer``), its
        rows capped by the tokenizer's and the family's maximum length; an image or audio task overrides it."""
        o = self.options
        self.tokenizer: Tokenizer = o.tokenizer or Tokenizer.from_repo(self.repo)
        names = self.family.feed_names(self.model.inputs)
        dtypes = {i.name: i.dtype for i in self.model.inputs}
        limits = [n for n in (self.tokenizer.model_max_length, self.args.max_length) if n]
        return TextProcessor(self.tokenizer, o.compile, min(limits) if limits else None,
                             {n: dtypes[n] for n in names}, self.task)

    @property
    def batch_size(self) -> int:
        """Rows per call of the model: ``compile.batch_size``."""
        return self.options.compile.batch_size

    def forward(self, prepared: list[Prepared], options: Mapping[str, Any]) -> list[list[dict[str, np.ndarray]]]:
        rows = [r for p in prepared for r in p.rows]
        outputs = run_batched(rows, self.processor, self.run_model, self.batch_size, self.per_position)
        per_input, start = [], 0
        for p in prepared:
            per_input.append(outputs[start:start + len(p.rows)])
            start += len(p.rows)
        return per_input

    def run_model(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model on one batch of feeds; outputs as numpy (floats as float32)."""
        B = self.model.backend
        out = {}
        for name, value in self.model(feeds).items():
            array = B.to_numpy(value) if B.is_array(value) else np.asarray(value)
            floating = array.dtype.kind == "f" or array.dtype.name == "bfloat16"
            out[name] = array.astype(np.float32) if floating else array
        return out

    def declared_feeds(self, feeds: Mapping[str, np.ndarray], source: str = "the processor") -> dict[str, np.ndarray]:
        """``feeds`` restricted to the graph's inputs, each cast to the dtype the graph declares (fp16 files take
        fp16); a ValueError when the graph takes an input that ``source`` does not give."""
        declared = {i.name: i.dtype for i in self.model.inputs}
        missing = [n for n in declared if n not in feeds]
        if missing:
            raise ValueError(
                f"{self.task}: the ONNX graph of {self.repo.name} takes {missing}, which {source} "
                f"does not give (it gives {sorted(feeds)})"
            )
        return {n: v.astype(declared[n], copy=False) if declared[n] is not None else v
                for n, v in feeds.items() if n in declared}

    def output(self, outputs: Mapping[str, np.ndarray], name: str) -> np.ndarray:
        """Output ``name`` of one row; a ValueError when the graph has no such output."""
        if name not in outputs:
            raise ValueError(
                f"{self.task}: the ONNX graph of {self.repo.name} has no output {name!r} "
                f"(its outputs: {list(outputs)}); is it exported for this task?"
            )
        return outputs[name]
