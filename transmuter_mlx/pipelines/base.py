"""The Pipeline base, and the row batching that the text encoder tasks share.

>>> import transmuter_mlx as tm
>>> pipe = tm.pipeline("fill-mask", "Xenova/bert-base-uncased")      # doctest: +SKIP
>>> pipe("Paris is the [MASK] of France.")["predictions"][0]["token_str"]  # doctest: +SKIP
'capital'

Each input of a text task becomes one or more *rows* (token sequences): one row per text, one
per candidate label in zero-shot classification, one per window of a long context in question
answering. Rows are packed into batches of ``compile.batch_size`` rows, padded to the smallest
``compile.sequence_length`` bucket that holds them; a partial batch is filled with copies of
its first row, so every call runs one of a few fixed, compiled shapes.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from .._tokenize import check_unicode
from ..converters.model import Model, load
from ..hub import Repo, open_repo
from ..tokenizer import Tokenizer
from .options import Options, as_list, check_counts, chunks

__all__ = ["Pipeline", "Row", "TextEncoderPipeline"]

SOURCE_TYPES = (str, os.PathLike, Repo, tuple)


class Pipeline:
    """Holds the components of a task (repository, model, tokenizer, options) and runs inputs.

    ``pipe(x)`` gives one result, ``pipe([x, y])`` a list. A task's own options (``defaults``)
    may be given when the pipeline is built or, to override them, at each call.
    """

    task: ClassVar[str] = ""
    modality: ClassVar[str] = "text"
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

    def __call__(self, inputs: Any, **options: Any) -> Any:
        opts = self.call_options(options)
        items, batched = as_list(inputs, self.single_types)
        results = self.run(items, opts) if items else []
        return results if batched else results[0]

    def call_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The task options of one call: those given override those of the pipeline."""
        unknown = [k for k in given if k not in self.defaults]
        if unknown:
            raise TypeError(
                f"{self.task}: unknown call option(s) {unknown}; "
                f"options of a call are {sorted(self.defaults)}"
            )
        check_counts(self.task, given, self.count_options)
        return {**self.options.extra, **given}

    def run(self, items: list[Any], options: dict[str, Any]) -> list[Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.repo!r}, backend={self.options.backend!r})"


@dataclass
class Row:
    """One token sequence of an input (unpadded), with what postprocessing needs of its encoding."""

    owner: int
    input_ids: np.ndarray
    token_type_ids: np.ndarray
    offsets: np.ndarray
    sequence_ids: np.ndarray
    word_ids: np.ndarray
    special_tokens_mask: np.ndarray
    info: Any = None

    def __len__(self) -> int:
        return len(self.input_ids)


class TextEncoderPipeline(Pipeline):
    """A task on one encoder graph (zoo family with ``ONNX_STEM``) and the repository's tokenizer."""

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        from .. import zoo

        o = self.options
        self.config = self.repo.config
        self.family = zoo.family(self.config)
        if self.task not in self.family.TASKS:
            raise ValueError(f"{self.task}: the {self.family.__name__} family does not serve this task")
        self.args = self.family.ModelArgs.from_dict(self.config)
        self.tokenizer: Tokenizer = o.tokenizer or Tokenizer.from_repo(self.repo)
        self.model: Model = o.model if o.model is not None else self._load_model()  # or any Model-like
        self.feed_names = self.family.feed_names(self.model.inputs)
        self.feed_dtypes = {i.name: i.dtype for i in self.model.inputs}
        self.max_length = self.tokenizer.model_max_length

    def _load_model(self) -> Model:
        o = self.options
        path = self.repo.onnx_path(
            self.family.ONNX_STEM, variant=o.variant, task_default=self.family.DEFAULT_VARIANT
        )
        return load(path, backend=o.backend, dtype=o.dtype, device=o.device)

    # ------------------------------------------------------------------ rows
    @property
    def limit(self) -> int:
        """The longest row, in tokens: the largest bucket (limited to the model's maximum length)."""
        return self.options.compile.lengths_for(self.max_length)[-1]

    def encode_rows(
        self,
        items: Sequence[str | tuple[str, str]],
        owners: Sequence[int] | None = None,
        truncation: bool | str = True,
        max_length: int | None = None,
        stride: int = 0,
        windows: bool = False,
    ) -> list[Row]:
        """Rows of ``items``; without ``windows``, a text over the limit is truncated with a warning."""
        if not items:
            return []
        limit = max_length or self.limit
        enc = self.tokenizer.encode(
            list(items), truncation=truncation, max_length=limit, stride=stride, return_overflow=True
        )
        owners = list(range(len(items))) if owners is None else list(owners)
        rows, seen, warned = [], set(), set()
        left = self.tokenizer.padding_side == "left"
        for r, sample in enumerate(enc.overflow_to_sample.tolist()):
            if sample in seen and not windows:
                if sample not in warned:
                    warned.add(sample)
                    self._warn_truncated(items[sample], limit)
                continue
            seen.add(sample)
            n = int(enc.attention_mask[r].sum())
            cols = slice(enc.input_ids.shape[1] - n, None) if left else slice(0, n)
            rows.append(
                Row(
                    owners[sample],
                    enc.input_ids[r, cols],
                    enc.token_type_ids[r, cols],
                    enc.offsets[r, cols],
                    enc.sequence_ids[r, cols],
                    enc.word_ids[r, cols],
                    enc.special_tokens_mask[r, cols],
                )
            )
        return rows

    def _warn_truncated(self, item: str | tuple[str, str], limit: int) -> None:
        length = len(self.tokenizer.encode([item], truncation=False).input_ids[0])
        warnings.warn(f"{self.task}: an input of {length} tokens was truncated to {limit}", stacklevel=5)

    def run_rows(self, rows: Sequence[Row], per_token: bool) -> list[dict[str, np.ndarray]]:
        """The model's outputs for each row (float32 numpy; per-token outputs cut to the row's tokens)."""
        c = self.options.compile
        buckets: dict[int, list[int]] = {}
        for i, row in enumerate(rows):
            buckets.setdefault(c.bucket(len(row), self.max_length), []).append(i)
        results: list[dict[str, np.ndarray]] = [{} for _ in rows]
        for length, indices in sorted(buckets.items()):
            for chunk in chunks(indices, c.batch_size):
                outputs = self._run_batch([rows[i] for i in chunk], length, c.batch_size)
                for j, i in enumerate(chunk):
                    results[i] = {
                        k: self._cut(v[j], len(rows[i]), length) if per_token else v[j]
                        for k, v in outputs.items()
                    }
        return results

    def _run_batch(self, batch: list[Row], length: int, size: int) -> dict[str, np.ndarray]:
        batch = batch + [batch[0]] * (size - len(batch))  # dummy rows keep the compiled shape
        pad_id = next(
            (i for i in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id) if i is not None), 0
        )
        ids = np.full((size, length), pad_id, dtype=np.int64)
        mask = np.zeros((size, length), dtype=np.int64)
        types = np.zeros((size, length), dtype=np.int64)
        for j, row in enumerate(batch):
            cols = self._cols(len(row), length)
            ids[j, cols], mask[j, cols], types[j, cols] = row.input_ids, 1, row.token_type_ids
        feeds = self.family.feeds(self.feed_names, ids, mask, types, self.feed_dtypes)
        B = self.model.backend
        out = {}
        for name, value in self.model(feeds).items():
            array = B.to_numpy(value) if B.is_array(value) else np.asarray(value)
            floating = array.dtype.kind == "f" or array.dtype.name == "bfloat16"
            out[name] = array.astype(np.float32) if floating else array
        return out

    def _cols(self, n: int, length: int) -> slice:
        return slice(length - n, length) if self.tokenizer.padding_side == "left" else slice(0, n)

    def _cut(self, value: np.ndarray, n: int, length: int) -> np.ndarray:
        return value[self._cols(n, length)] if value.ndim >= 1 and value.shape[0] == length else value

    def output(self, outputs: Mapping[str, np.ndarray], name: str) -> np.ndarray:
        if name not in outputs:
            raise ValueError(
                f"{self.task}: the ONNX graph of {self.repo.name} has no output {name!r} "
                f"(its outputs: {list(outputs)}); is it exported for this task?"
            )
        return outputs[name]


def check_text(task: str, index: int, value: Any, what: str = "text") -> str:
    """``value`` if it is a str of Unicode text; a TypeError naming the input otherwise (a ValueError for
    a lone surrogate, which no UTF-8 tokenizer can take)."""
    if not isinstance(value, str):
        raise TypeError(f"{task}: input {index}: the {what} must be a str, got {type(value).__name__}")
    return check_unicode(value, f"{task}: input {index}", what)
