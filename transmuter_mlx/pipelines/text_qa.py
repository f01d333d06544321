"""question_answering: the span of a context that answers a question (extractive QA)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..processors.text import text_input
from ..tokenizer import TokenRow
from ..zoo._base import score
from .base import EncoderPipeline, Prepared

MAX_WINDOWS = 256  # windows of one context (about 60,000 tokens at the default 384 and stride 128)


def decode_spans(
    start: np.ndarray, end: np.ndarray, top_k: int, max_answer_len: int, wanted: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``top_k`` best (start, end, score) spans, as transformers' ``decode_spans``."""
    outer = np.matmul(start[:, None], end[None, :])
    candidates = np.tril(np.triu(outer), max_answer_len - 1)
    flat = candidates.flatten()
    if top_k == 1:
        order = np.array([np.argmax(flat)])
    elif len(flat) < top_k:
        order = np.argsort(-flat)
    else:
        idx = np.argpartition(-flat, top_k)[0:top_k]
        order = idx[np.argsort(-flat[idx])]
    starts, ends = np.unravel_index(order, candidates.shape)
    keep = np.isin(starts, wanted.nonzero()) & np.isin(ends, wanted.nonzero())
    starts, ends = starts[keep], ends[keep]
    return starts, ends, candidates[starts, ends]


class QuestionAnswering(EncoderPipeline):
    """Answers from a context: ``{"results": [{"text", "start", "end", "score"}, ...]}``, best first.

    >>> import transmuter_mlx as tm
    >>> qa = tm.text.question_answering("Xenova/distilbert-base-cased-distilled-squad")
    >>> context = "The Eiffel Tower is a wrought-iron lattice tower in Paris."
    >>> answers = qa({"question": "Where is the Eiffel Tower?", "context": context})
    >>> answers
    {'results': [{'text': ..., 'start': ..., 'end': ..., 'score': ...}]}
    >>> answer = answers["results"][0]
    >>> context.encode()[answer["start"]:answer["end"]].decode() == answer["text"]
    True

    ``start``/``end`` are UTF-8 byte offsets into the context. A long context becomes windows of
    ``max_seq_len`` tokens (384, at most the model's and the largest bucket's length) that
    overlap by ``doc_stride`` tokens (128, at most half a window); each window is one row. Spans
    with the same text add their scores across windows (as transformers); ``top_k`` (1),
    ``max_answer_len`` (15), ``handle_impossible_answer`` (False), ``align_to_words`` (True).
    ``max_question_len`` is accepted and, as in transformers' fast-tokenizer path, not applied.
    ``max_windows`` (256; None: no cap) caps the windows of one context: a longer context raises a
    ValueError before the model runs (transformers has no cap: a 100,000-word context is ~500 windows).
    """

    task = "question-answering"
    defaults = MappingProxyType(
        {
            "top_k": 1,
            "doc_stride": None,
            "max_seq_len": None,
            "max_question_len": 64,
            "max_answer_len": 15,
            "handle_impossible_answer": False,
            "align_to_words": True,
            "max_windows": MAX_WINDOWS,
        }
    )
    count_options = MappingProxyType({"top_k": (1, False), "max_answer_len": (1, False), "doc_stride": (0, True),
                                      "max_seq_len": (1, True), "max_question_len": (1, False),
                                      "max_windows": (1, True)})
    single_types = (dict,)

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The window length (``max_seq_len``: 384, at most the model's and the largest bucket's) and stride."""
        max_len = min(x for x in (options["max_seq_len"], 384, self.processor.limit) if x)
        stride = options["doc_stride"] if options["doc_stride"] is not None else min(max_len // 2, 128)
        if stride > max_len:
            raise ValueError(f"{self.task}: doc_stride ({stride}) is larger than max_seq_len ({max_len})")
        return {**options, "window": max_len, "stride": stride}

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        """The windows of the (question, context) pair (the context first for left-padding tokenizers)."""
        if not isinstance(item, dict) or set(item) != {"question", "context"}:
            raise TypeError(
                f"{self.task}: input {index}: expected {{'question': str, 'context': str}}, got {item!r:.80}"
            )
        question = text_input(self.task, index, item["question"], "question")
        context = text_input(self.task, index, item["context"], "context")
        question_first = self.tokenizer.padding_side == "right"
        pair = (question, context) if question_first else (context, question)
        max_len, stride = options["window"], options["stride"]
        try:
            rows = self.processor.rows([pair], [index], truncation="only_second" if question_first else "only_first",
                                       max_length=max_len, stride=stride, windows=True)
        except ValueError as e:  # the question alone leaves no more room than the stride for the context
            detail = str(e).removeprefix("input 0: ")  # the tokenizer saw this input alone
            raise ValueError(f"{self.task}: input {index}: the question is too long for windows of "
                             f"max_seq_len={max_len} tokens with doc_stride={stride}; shorten the question, lower "
                             f"doc_stride or raise max_seq_len ({detail})") from e
        cap = options["max_windows"]
        if cap is not None and len(rows) > cap:
            raise ValueError(
                f"{self.task}: input {index}: the context needs {len(rows)} windows of {max_len} tokens "
                f"(doc_stride {stride}), more than max_windows={cap}; pass max_windows={len(rows)} "
                "(or None: no cap) to run them all, or shorten the context"
            )
        return Prepared(rows, context)

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        seq = 1 if self.tokenizer.padding_side == "right" else 0
        return self.answers(prepared.data, list(zip(prepared.rows, outputs)), seq, options)

    def answers(
        self, context: str, windows: list[tuple[TokenRow, dict]], seq: int, options: Mapping[str, Any]
    ) -> dict:
        data = context.encode("utf-8")
        top_k, null_score, answers = options["top_k"], 1000000.0, []
        pre_top_k = top_k * 2 + 10 if options["align_to_words"] else top_k
        for row, out in windows:
            wanted = (row.sequence_ids == seq).astype(np.int64)
            cls_id = self.tokenizer.cls_token_id
            if cls_id is not None:
                wanted[row.input_ids == cls_id] = 1
            start = self.normalize(self.output(out, "start_logits"), wanted)
            end = self.normalize(self.output(out, "end_logits"), wanted)
            if options["handle_impossible_answer"]:
                null_score = min(null_score, float(start[0] * end[0]))
            start[0] = end[0] = 0.0
            starts, ends, scores = decode_spans(start, end, pre_top_k, options["max_answer_len"], wanted)
            for s, e, span_score in zip(starts, ends, scores):
                a, b = self.indices(row, int(s), int(e), seq, options["align_to_words"])
                text = data[a:b].decode("utf-8", errors="replace")
                same = next((x for x in answers if x["text"].lower() == text.lower()), None)
                if same is not None:
                    same["score"] += float(span_score)
                else:
                    answers.append({"text": text, "start": a, "end": b, "score": float(span_score)})
        if options["handle_impossible_answer"]:
            answers.append({"text": "", "start": 0, "end": 0, "score": null_score})
        return {"results": sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]}

    @staticmethod
    def normalize(logits: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        """A softmax over the tokens that may be in the answer (the others at -10000, as transformers)."""
        return score(np.where(wanted == 0, -10000.0, logits), "softmax")

    @staticmethod
    def indices(row: TokenRow, s: int, e: int, seq: int, align_to_words: bool) -> tuple[int, int]:
        """Byte offsets of a token span, widened to whole words as transformers' ``get_indices``."""
        if align_to_words and row.word_ids[s] >= 0 and row.word_ids[e] >= 0:
            first = (row.word_ids == row.word_ids[s]) & (row.sequence_ids == seq)
            last = (row.word_ids == row.word_ids[e]) & (row.sequence_ids == seq)
            if first.any() and last.any():
                return int(row.offsets[first][0][0]), int(row.offsets[last][-1][1])
        return int(row.offsets[s][0]), int(row.offsets[e][1])
