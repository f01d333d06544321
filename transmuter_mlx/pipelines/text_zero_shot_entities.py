"""zero_shot_entity_recognition: the entities of labels that you give, found by a GLiNER model."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from .._tokenize import byte_table
from ..processors.text import text_input
from ..tokenizer import Tokenizer
from ..zoo import gliner
from .base import EncoderPipeline, Pipeline, Prepared
from .batching import chunks
from .text_zero_shot import parse_labels

__all__ = ["ZeroShotEntityRecognition"]


class ZeroShotEntityRecognition(EncoderPipeline):
    """Entities of your labels: ``{"entities": [{"start", "end", "label", "score", "phrase"}, ...]}`` in text order.

    >>> import transmuter_mlx as tm
    >>> find = tm.text.zero_shot_entity_recognition("onnx-community/gliner_small-v2.1")
    >>> found = find({"text": "Cristiano Ronaldo plays for Al Nassr.", "labels": ["person", "organization"]})
    >>> sorted(found), all(e["label"] in ("person", "organization") for e in found["entities"])
    (['entities'], True)

    The steps are those of the ``gliner`` package's ``predict_entities``: the words of the text (its whitespace
    splitter), a prompt of the labels before them, every span of up to ``max_width`` words (span models) or each
    word's start, end and inside (token models, ``span_mode`` "token_level") scored against each label, the
    spans above ``threshold`` (default 0.5) kept best first unless they overlap one kept before (``flat_ner``
    False keeps an entity inside another, ``multi_label`` True lets a span have several labels). ``labels`` may
    be given when building, at each call, or in a dict input ``{"text": ..., "labels": [...]}``; each input can
    have its own. ``start``/``end`` are UTF-8 byte offsets into the text.

    A text of more than the model's ``max_len`` words (gliner_config.json) is read in windows of ``max_len``
    words that overlap by half, and the entities of all windows go through the same greedy choice; the package
    cuts such a text off after ``max_len`` words instead.
    """

    task = "zero-shot-entity-recognition"
    per_position = False
    defaults = MappingProxyType({"labels": None, "threshold": 0.5, "flat_ner": True, "multi_label": False})
    single_types = (str, dict)

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        Pipeline.__init__(self, source, **options)
        self.args = self.family.ModelArgs.from_dict(gliner.read_settings(self.repo))
        o = self.options
        self.model = o.model if o.model is not None else self.load_file("model")
        self.tokenizer: Tokenizer = o.tokenizer or Tokenizer.from_repo(self.repo)
        self.processor = None  # GLiNER's rows are built here (words, prompt, word mask, spans)
        self.feeds = {i.name for i in self.model.inputs}
        self.max_tokens = self.tokenizer.model_max_length

    # ------------------------------------------------------------------ preprocess
    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        """The rows of one input: a window of at most ``max_len`` words each, with its labels' prompt."""
        text, labels = self.split(index, item, options)
        threshold = options["threshold"]
        if not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise ValueError(f"{self.task}: threshold must be a number in [0, 1], got {threshold!r}")
        words = gliner.split_words(text)
        size = self.args.max_len
        step = max(1, size // 2)
        starts = [0] if len(words) <= size else list(range(0, len(words) - size + step, step))
        rows = [self.row([w for w, _, _ in words[s:s + size]], labels, s) for s in starts] if words else []
        return Prepared(rows, (text, words, labels))

    def split(self, index: int, item: Any, options: Mapping[str, Any]) -> tuple[str, list[str]]:
        labels = options["labels"]
        if isinstance(item, dict):
            if "text" not in item or set(item) - {"text", "labels"}:
                raise TypeError(f"{self.task}: input {index}: a dict input has keys 'text' and 'labels', "
                                f"got {sorted(item)}")
            labels = item.get("labels", labels)
            item = item["text"]
        text = text_input(self.task, index, item)
        labels = parse_labels(labels) if labels is not None else []
        if not labels:
            raise ValueError(f"{self.task}: input {index}: no labels; give labels=[...] when building the pipeline, "
                             "at the call, or in the input {'text': ..., 'labels': [...]}")
        return text, labels

    def row(self, words: list[str], labels: list[str], offset: int) -> dict[str, Any]:
        """The model's inputs for one window of words (``offset``: its first word in the text)."""
        head = gliner.prompt(labels, self.args.ent_token, self.args.sep_token)
        encoding = self.tokenizer.encode_words(head + words, max_length=self.max_tokens)
        mask = gliner.word_mask(encoding.word_ids, len(head), self.args.subtoken_pooling)
        return {"input_ids": np.asarray(encoding.ids, np.int64), "words_mask": np.asarray(mask, np.int64),
                "num_words": len(words), "offset": offset, "num_labels": len(labels)}

    # ------------------------------------------------------------------ forward
    def forward(self, prepared: list[Prepared], options: Mapping[str, Any]) -> list[list[np.ndarray]]:
        """Each row's logits, the rows run ``batch_size`` at a time in input order, padded to the longest of
        their batch as the package pads them (a quantized model's activation ranges see just that padding)."""
        rows = [r for p in prepared for r in p.rows]
        logits: list[np.ndarray] = []
        for batch in chunks(rows, self.batch_size):
            out = self.output(self.run_model(self.declared_feeds(self.collate(batch), "the GLiNER inputs")),
                              "logits")
            logits += [out[i] for i in range(len(batch))]
        per_input, start = [], 0
        for p in prepared:
            per_input.append(logits[start:start + len(p.rows)])
            start += len(p.rows)
        return per_input

    def collate(self, batch: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        n = max(len(r["input_ids"]) for r in batch)
        words = max(r["num_words"] for r in batch)
        pad = self.tokenizer.pad_token_id or 0
        ids = np.full((len(batch), n), pad, np.int64)
        attention = np.zeros((len(batch), n), np.int64)
        words_mask = np.zeros((len(batch), n), np.int64)
        for i, r in enumerate(batch):
            k = len(r["input_ids"])
            ids[i, :k], attention[i, :k], words_mask[i, :k] = r["input_ids"], 1, r["words_mask"]
        feeds = {"input_ids": ids, "attention_mask": attention, "words_mask": words_mask,
                 "text_lengths": np.array([[r["num_words"]] for r in batch], np.int64)}
        if "span_idx" in self.feeds:  # span models: every span of each row, those past its text masked out
            spans = gliner.span_index(words, self.args.max_width)
            feeds["span_idx"] = np.zeros((len(batch), *spans.shape), np.int64)
            feeds["span_mask"] = np.zeros((len(batch), len(spans)), bool)
            for i, r in enumerate(batch):
                own = gliner.span_index(r["num_words"], self.args.max_width)
                keep = own[:, 1] <= r["num_words"] - 1
                feeds["span_idx"][i, :len(own)] = own * keep[:, None]
                feeds["span_mask"][i, :len(own)] = keep
        return feeds

    # ------------------------------------------------------------------ postprocess
    def postprocess(self, prepared: Prepared, outputs: list[np.ndarray], options: Mapping[str, Any]) -> dict[str, Any]:
        text, words, labels = prepared.data
        decode = gliner.decode_tokens if self.args.token_level else gliner.decode_spans
        candidates = []
        for r, logits in zip(prepared.rows, outputs):
            found = decode(logits, r["num_words"], r["num_labels"], options["threshold"])
            candidates += [s._replace(start=s.start + r["offset"], end=s.end + r["offset"]) for s in found]
        if len(prepared.rows) > 1:  # windows overlap: a span found twice keeps its best score
            best: dict[tuple[int, int, int], gliner.Span] = {}
            for s in candidates:
                key = (s.start, s.end, s.label)
                if key not in best or s.score > best[key].score:
                    best[key] = s
            candidates = sorted(best.values(), key=lambda s: (s.start, s.end - s.start, s.label))
        chosen = gliner.greedy(candidates, options["flat_ner"], options["multi_label"])
        data = text.encode()
        table = byte_table(text)  # None for ASCII text, where characters are bytes
        to_byte = (lambda i: i) if table is None else (lambda i: int(table[i]))
        entities = []
        for s in chosen:
            start, end = to_byte(words[s.start][1]), to_byte(words[s.end][2])
            entities.append({"start": start, "end": end, "label": labels[s.label], "score": s.score,
                             "phrase": data[start:end].decode()})
        return {"entities": entities}

