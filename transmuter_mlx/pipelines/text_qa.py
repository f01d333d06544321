"""question_answering: the span of a context that answers a question (extractive QA)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import numpy as np

from .base import Row, TextEncoderPipeline, check_text

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


class QuestionAnswering(TextEncoderPipeline):
    """Answers from a context: ``{"results": [{"text", "start", "end", "score"}, ...]}``, best first.

    >>> import transmuter_mlx as tm
    >>> qa = tm.text.question_answering("Xenova/distilbert-base-cased-distilled-squad")  # doctest: +SKIP
    >>> qa({"question": "Where is the Eiffel Tower?",
    ...     "context": "The Eiffel Tower is a wrought-iron lattice tower in Paris."})  # doctest: +SKIP
    {'results': [{'text': 'Paris', 'start': 52, 'end': 57, 'score': 0.98}]}

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

    def run(self, items: list[Any], options: dict[str, Any]) -> list[dict[str, Any]]:
        question_first = self.tokenizer.padding_side == "right"
        pairs, contexts = [], []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or set(item) != {"question", "context"}:
                raise TypeError(
                    f"{self.task}: input {i}: expected {{'question': str, 'context': str}}, got {item!r:.80}"
                )
            question = check_text(self.task, i, item["question"], "question")
            context = check_text(self.task, i, item["context"], "context")
            pairs.append((question, context) if question_first else (context, question))
            contexts.append(context)
        max_len = min(x for x in (options["max_seq_len"], 384, self.limit) if x)
        stride = options["doc_stride"] if options["doc_stride"] is not None else min(max_len // 2, 128)
        if stride > max_len:
            raise ValueError(f"{self.task}: doc_stride ({stride}) is larger than max_seq_len ({max_len})")
        truncation = "only_second" if question_first else "only_first"
        try:
            rows = self.encode_rows(
                pairs, truncation=truncation, max_length=max_len, stride=stride, windows=True
            )
        except Exception as e:  # tokenizers: the question alone does not leave room for the context
            raise ValueError(
                f"{self.task}: a question is too long for windows of {max_len} tokens ({e})"
            ) from e
        self.check_windows(rows, len(items), max_len, stride, options["max_windows"])
        outputs = self.run_rows(rows, per_token=True)
        seq = 1 if question_first else 0
        return [
            self.answers(contexts[i], [(r, o) for r, o in zip(rows, outputs) if r.owner == i], seq, options)
            for i in range(len(items))
        ]

    def check_windows(self, rows: list[Row], inputs: int, max_len: int, stride: int, cap: int | None) -> None:
        """A ValueError, before the model runs, when a context needs more than ``cap`` windows."""
        counts = np.bincount([r.owner for r in rows], minlength=inputs)
        if cap is None or counts.max(initial=0) <= cap:
            return
        i = int(counts.argmax())
        raise ValueError(
            f"{self.task}: input {i}: the context needs {counts[i]} windows of {max_len} tokens "
            f"(doc_stride {stride}), more than max_windows={cap}; pass max_windows={counts[i]} "
            "(or None: no cap) to run them all, or shorten the context"
        )

    def answers(
        self, context: str, windows: list[tuple[Row, dict]], seq: int, options: dict[str, Any]
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
            for s, e, score in zip(starts, ends, scores):
                a, b = self.indices(row, int(s), int(e), seq, options["align_to_words"])
                text = data[a:b].decode("utf-8", errors="replace")
                same = next((x for x in answers if x["text"].lower() == text.lower()), None)
                if same is not None:
                    same["score"] += float(score)
                else:
                    answers.append({"text": text, "start": a, "end": b, "score": float(score)})
        if options["handle_impossible_answer"]:
            answers.append({"text": "", "start": 0, "end": 0, "score": null_score})
        return {"results": sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]}

    @staticmethod
    def normalize(logits: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        logits = np.where(wanted == 0, -10000.0, logits)
        exp = np.exp(logits - logits.max())
        return exp / exp.sum()

    @staticmethod
    def indices(row: Row, s: int, e: int, seq: int, align_to_words: bool) -> tuple[int, int]:
        """Byte offsets of a token span, widened to whole words as transformers' ``get_indices``."""
        if align_to_words and row.word_ids[s] >= 0 and row.word_ids[e] >= 0:
            first = (row.word_ids == row.word_ids[s]) & (row.sequence_ids == seq)
            last = (row.word_ids == row.word_ids[e]) & (row.sequence_ids == seq)
            if first.any() and last.any():
                return int(row.offsets[first][0][0]), int(row.offsets[last][-1][1])
        return int(row.offsets[s][0]), int(row.offsets[e][1])
