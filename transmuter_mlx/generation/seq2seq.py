"""``EncoderDecoderSession``: a ``DecoderSession`` over the encoder and decoder ONNX files of a seq2seq export.

>>> import numpy as np, transmuter_mlx as tm                              # doctest: +SKIP
>>> from transmuter_mlx.generation.config import GenerationConfig         # doctest: +SKIP
>>> from transmuter_mlx.generation.loop import generate                   # doctest: +SKIP
>>> from transmuter_mlx.generation.seq2seq import EncoderDecoderSession   # doctest: +SKIP
>>> session = EncoderDecoderSession(tm.load("onnx/encoder_model.onnx"),
...                                 tm.load("onnx/decoder_model_merged.onnx"))  # doctest: +SKIP
>>> session.encode(np.array([[37, 8, 1]]), np.array([[1, 1, 1]]))        # doctest: +SKIP
>>> generate(session, [[0]], GenerationConfig(max_new_tokens=8, eos_token_id=1)).sequences  # doctest: +SKIP
[[21, 9, 1]]

The encoder runs once per input (``encode``, batched, padded with an attention mask). The decoder
rows are the inputs, their sampled copies or their beams: ``prefill`` maps row r to input
``r // (rows // inputs)`` and gathers the encoder outputs and masks for its rows. The cache is
``past_key_values.N.decoder.key/value`` (self-attention, grows by one position per step) and
``past_key_values.N.encoder.key/value`` (cross-attention, filled by the first step, then passed
through unchanged). Two layouts:

- merged (``decoder_model_merged.onnx``): ``use_cache_branch`` False on the first step, with
  empty caches, True afterwards;
- split: ``decoder_model.onnx`` for the first step, ``decoder_with_past_model.onnx`` afterwards
  (it returns only the self-attention cache).

All decoder prompts have one length (the decoder start token), so the rows share one cache.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .sessions_common import run_model, token_column

__all__ = ["EncoderDecoderSession", "Seq2SeqCache"]

_PAST = re.compile(r"^past_key_values\.(\d+)\.(decoder|encoder)\.(key|value)$")


@dataclass(frozen=True)
class Seq2SeqCache:
    """The cache inputs of a seq2seq decoder: names per layer and kind, heads, head size and dtype."""

    decoder: tuple[str, ...]
    encoder: tuple[str, ...]
    heads: int
    head_dim: int
    dtype: np.dtype

    @classmethod
    def of(cls, model: Any, config: dict | None = None) -> Seq2SeqCache:
        """The layout of a loaded decoder ``Model``; symbolic heads or head size are read from ``config``
        (``decoder_attention_heads``/``num_heads`` and ``d_kv`` or ``d_model / heads``)."""
        past = sorted(
            ((int(m[1]), m[2], m[3], i) for i in model.inputs if (m := _PAST.match(i.name))),
            key=lambda x: (x[0], x[1], x[2] != "key"),
        )
        if not past:
            raise ValueError(
                f"{model.name}: no past_key_values.N.decoder/encoder.key/value inputs; "
                "not an encoder-decoder decoder with a KV cache"
            )
        info = past[0][3]
        heads, head_dim = info.shape[1], info.shape[3]
        if not isinstance(heads, int) or not isinstance(head_dim, int):
            c = config or {}
            heads = c.get("decoder_attention_heads") or c.get("num_heads") or c.get("num_attention_heads")
            head_dim = c.get("d_kv") or (c.get("d_model") or c.get("hidden_size") or 0) // max(heads or 1, 1)
            if not heads or not head_dim:
                raise ValueError(
                    f"{model.name}: cache input {info.name} has symbolic heads or head size "
                    f"{info.shape} and the config does not give them"
                )
        return cls(
            tuple(i.name for _, k, _, i in past if k == "decoder"),
            tuple(i.name for _, k, _, i in past if k == "encoder"),
            int(heads),
            int(head_dim),
            np.dtype(info.dtype or np.float32),
        )


class EncoderDecoderSession:
    """Encoder once per input, decoder one token per row per step (see the module docstring).

    ``encoder`` and ``decoder`` are loaded ``Model``s (the merged decoder, or ``decoder_model.onnx``
    with ``decoder_with_past`` given); ``config`` (config.json) gives the cache's heads and head size
    when the graph leaves them symbolic.
    """

    def __init__(
        self, encoder: Any, decoder: Any, decoder_with_past: Any = None, *, config: dict | None = None
    ) -> None:
        self.encoder, self.decoder, self.decoder_with_past = encoder, decoder, decoder_with_past
        self.B = decoder.backend
        self.merged = "use_cache_branch" in {i.name for i in decoder.inputs}
        self.layout = Seq2SeqCache.of(
            decoder if self.merged or decoder_with_past is None else decoder_with_past, config
        )
        if not self.merged and decoder_with_past is None:
            raise ValueError(
                f"{decoder.name}: a decoder without use_cache_branch needs decoder_with_past "
                "(decoder_with_past_model.onnx) for the steps after the first"
            )
        self.hidden: Any = None  # (inputs, length, hidden) encoder outputs
        self.mask: np.ndarray | None = None  # (inputs, length) encoder attention mask
        self.input_padding: list[int] = []  # encoder padding positions of each input
        self.padding: list[int] = []  # ... of each decoder row
        self._rows_hidden: Any = None
        self._rows_mask: np.ndarray | None = None
        self.cache: dict[str, Any] = {}

    # ------------------------------------------------------------------ encoder
    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> None:
        """Run the encoder on padded (inputs, length) ids and mask; ``prefill`` uses the result."""
        input_ids = np.asarray(input_ids, np.int64)
        attention_mask = np.asarray(attention_mask, np.int64)
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        wanted = {i.name for i in self.encoder.inputs}
        out = self.encoder({k: v for k, v in feeds.items() if k in wanted})
        self.hidden = out["last_hidden_state"] if "last_hidden_state" in out else next(iter(out.values()))
        self.mask = attention_mask
        self.input_padding = [int(n) for n in attention_mask.shape[1] - attention_mask.sum(-1)]

    # ------------------------------------------------------------------ DecoderSession
    def prefill(self, prompts: Sequence[Sequence[int]]) -> Any:
        """Run the decoder prompts (one length for all rows); fills both caches."""
        if self.hidden is None or self.mask is None:
            raise RuntimeError("EncoderDecoderSession.prefill before encode: run the encoder first")
        inputs, rows = len(self.mask), len(prompts)
        if rows % inputs:
            raise ValueError(
                f"{rows} decoder rows for {inputs} encoded inputs: rows must be copies of inputs"
            )
        if len({len(p) for p in prompts}) != 1:
            raise ValueError("the decoder prompts of a seq2seq batch must have one length")
        owner = np.repeat(np.arange(inputs, dtype=np.int64), rows // inputs)
        self._rows_hidden = self.B.take(self.hidden, self.B.asarray(owner), 0)
        self._rows_mask = self.mask[owner]
        self.padding = [self.input_padding[i] for i in owner]
        ids = np.asarray([list(p) for p in prompts], np.int64)
        feeds = {
            "input_ids": ids,
            "encoder_attention_mask": self._rows_mask,
            "encoder_hidden_states": self._rows_hidden,
        }
        if self.merged:
            feeds.update(self._empty(rows))
            feeds["use_cache_branch"] = np.array([False])
        out = self.decoder(self._known(self.decoder, feeds))
        self.cache = {n: out[_present(n)] for n in self.layout.decoder + self.layout.encoder}
        return self._last(out["logits"])

    def step(self, tokens: np.ndarray) -> Any:
        """Run one token per row; the cross-attention cache is passed through unchanged."""
        feeds = {"input_ids": token_column(self.B, tokens), "encoder_attention_mask": self._rows_mask, **self.cache}
        model = self.decoder
        if self.merged:
            feeds["encoder_hidden_states"] = self._rows_hidden
            feeds["use_cache_branch"] = np.array([True])
        else:
            model = self.decoder_with_past
        out = run_model(model, self._known(model, feeds), grows=True)
        for n in self.layout.decoder:
            self.cache[n] = out[_present(n)]
        return self._last(out["logits"])

    def reorder(self, rows: np.ndarray) -> None:
        """Row r continues from old row ``rows[r]``: gathers the caches, encoder outputs and masks."""
        index = np.asarray(rows, np.int64).reshape(-1)
        if np.array_equal(index, np.arange(len(index))):
            return
        taken = self.B.asarray(index)
        self.cache = {n: self.B.take(v, taken, 0) for n, v in self.cache.items()}
        self._rows_hidden = self.B.take(self._rows_hidden, taken, 0)
        self._rows_mask = self._rows_mask[index]
        self.padding = [self.padding[i] for i in index]

    # ------------------------------------------------------------------ helpers
    def _empty(self, rows: int) -> dict[str, Any]:
        shape = (rows, self.layout.heads, 0, self.layout.head_dim)
        return {n: self.B.zeros(shape, self.layout.dtype) for n in self.layout.decoder + self.layout.encoder}

    @staticmethod
    def _known(model: Any, feeds: dict[str, Any]) -> dict[str, Any]:
        names = {i.name for i in model.inputs}
        return {k: v for k, v in feeds.items() if k in names}

    def _last(self, logits: Any) -> Any:
        """The (rows, vocab) logits of the last position."""
        B = self.B
        rows, length, vocab = B.shape(logits)
        return B.reshape(B.slice(logits, [0, length - 1, 0], [rows, length, vocab], [1, 1, 1]), (rows, vocab))


def _present(name: str) -> str:
    return name.replace("past_key_values", "present")
