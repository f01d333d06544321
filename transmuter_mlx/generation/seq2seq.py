"""``EncoderDecoderSession``: a ``DecoderSession`` over the encoder and decoder ONNX files of a seq2seq export.

>>> import numpy as np, transmuter_mlx as tm
>>> from transmuter_mlx.generation.config import GenerationConfig
>>> from transmuter_mlx.generation.loop import generate
>>> from transmuter_mlx.generation.seq2seq import EncoderDecoderSession
>>> from transmuter_mlx.hub import open_repo
>>> repo = open_repo("Xenova/t5-small")
>>> session = EncoderDecoderSession(tm.load(repo.onnx_path("encoder_model")),
...                                 tm.load(repo.onnx_path("decoder_model_merged")))
>>> session.encode({"input_ids": np.array([[37, 8, 1]]), "attention_mask": np.array([[1, 1, 1]])})
>>> generate(session, [[0]], GenerationConfig(max_new_tokens=8, eos_token_id=1)).token_summaries
[{'input': 1, 'output': ..., 'padding': 0}]

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

import copy
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .sessions_common import CacheLayout, last_logits, run_model, token_column

__all__ = ["EncoderDecoderSession"]

# decoder -> whether its steps give the same outputs from a cross-attention cache of batch 1 shared by the rows
_SHARES: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()

class EncoderDecoderSession:
    """Encoder once per input, decoder one token per row per step (see the module docstring).

    ``encoder`` and ``decoder`` are loaded ``Model``s (the merged decoder, or ``decoder_model.onnx``
    with ``decoder_with_past`` given); ``heads`` and ``head_dim`` (the decoder's, from the family's config)
    serve a graph that leaves the cache's heads or head size symbolic.
    """

    def __init__(
        self, encoder: Any, decoder: Any, decoder_with_past: Any = None, *, heads: int | None = None,
        head_dim: int | None = None,
    ) -> None:
        self.encoder, self.decoder, self.decoder_with_past = encoder, decoder, decoder_with_past
        self.B = decoder.backend
        self.merged = "use_cache_branch" in {i.name for i in decoder.inputs}
        self.layout = CacheLayout.of(
            decoder if self.merged or decoder_with_past is None else decoder_with_past, heads, head_dim
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
        self._owner = np.zeros(0, np.int64)  # the input of each decoder row
        self._shared = False  # the rows' one input's cross-attention cache held once (batch 1) at the steps
        self._check_sharing = False  # whether the next step checks that the decoder may share it (prefill)
        self.cache: dict[str, Any] = {}

    def fresh(self) -> EncoderDecoderSession:
        """A session of the same models and layout with no input (one per row of a continuous batch)."""
        other = copy.copy(self)
        other.hidden = other.mask = other._rows_hidden = other._rows_mask = None
        other.input_padding, other.padding, other.cache = [], [], {}
        other._owner, other._shared, other._check_sharing = np.zeros(0, np.int64), False, False
        return other

    # ------------------------------------------------------------------ encoder
    def encode(self, feeds: Mapping[str, Any]) -> None:
        """Run the encoder on one batch of its feeds (``input_ids`` and ``attention_mask`` of padded text;
        ``input_features`` of audio, ``pixel_values`` of images); ``prefill`` uses the result. An
        ``attention_mask`` among them also masks the decoder's cross-attention (else every position counts)."""
        wanted = {i.name for i in self.encoder.inputs}
        out = self.encoder({k: v for k, v in feeds.items() if k in wanted})
        self.hidden = out["last_hidden_state"] if "last_hidden_state" in out else next(iter(out.values()))
        rows, length = self.B.shape(self.hidden)[:2]
        mask = feeds.get("attention_mask")
        self.mask = np.ones((rows, length), np.int64) if mask is None else np.asarray(mask, np.int64)
        self.input_padding = [int(n) for n in self.mask.shape[1] - self.mask.sum(-1)]

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
        self._owner = owner
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
        self._decoded(self.decoder, out)
        self.cache = self.layout.present(out, self.layout.names + self.layout.cross)
        for name in self.layout.cross:  # read at every step: a transposed view would be copied at each read
            self.cache[name] = self.B.contiguous(self.cache[name])
        # the copies of one input (its beams, its samples) may share its cross-attention cache at the steps, as
        # batch 1 that the decoder's attention products broadcast over the rows (ONNX MatMul): each step then reads
        # it once, not once a row (Whisper tiny.en at 5 beams: 92 MB a step); checked at a first step per decoder
        self._shared = False
        copies_of_one = inputs == 1 and rows > 1 and bool(self.layout.cross)
        shares = _SHARES.get(self._step_model)
        if copies_of_one and shares:
            self._share()
        self._check_sharing = copies_of_one and shares is None
        return last_logits(self.B, out["logits"])

    def step(self, tokens: np.ndarray) -> Any:
        """Run one token per row; the cross-attention cache is passed through unchanged."""
        model = self._step_model
        feeds = {"input_ids": token_column(self.B, tokens), "encoder_attention_mask": self._rows_mask, **self.cache}
        if self.merged:
            feeds["encoder_hidden_states"] = self._rows_hidden
            feeds["use_cache_branch"] = np.array([True])
        out = run_model(model, self._known(model, feeds), grows=True)
        if self._check_sharing:
            self._check_sharing = False
            _SHARES[model] = self._shares_alike(model, feeds, out)
            if _SHARES[model]:
                self._share()
        self._decoded(model, out)
        self.cache.update(self.layout.present(out))
        return last_logits(self.B, out["logits"])

    @property
    def _step_model(self) -> Any:
        return self.decoder if self.merged else self.decoder_with_past

    def _share(self) -> None:
        """The cross-attention cache of the rows' one input, once (batch 1)."""
        self._shared = True
        for name in self.layout.cross:
            self.cache[name] = self._first_row(self.cache[name])

    def _first_row(self, x: Any) -> Any:
        return self.B.slice(x, [0] * 4, [1, *self.B.shape(x)[1:]], [1] * 4)

    def _shares_alike(self, model: Any, feeds: dict[str, Any], out: dict[str, Any]) -> bool:
        """Whether ``model`` gives the step's outputs ``out`` again from the rows' cross-attention cache given once
        (batch 1): a graph that reshapes it by the rows' count instead of broadcasting it would make other values
        of the same shapes (transformers' Whisper does so with the encoder states of the first step, which is why
        only the steps share)."""
        once = feeds | {name: self._first_row(feeds[name]) for name in self.layout.cross}
        try:
            again = run_model(model, self._known(model, once), grows=True)
        except Exception:  # noqa: BLE001 - a graph that cannot broadcast it: the rows keep their copies
            return False
        passed_through = {n.replace("past_key_values", "present") for n in self.layout.cross}
        for name, value in out.items():
            if name in passed_through:
                continue
            a, b = (np.asarray(self.B.to_numpy(v) if self.B.is_array(v) else v, np.float64) for v in (value, again[name]))
            if a.shape != b.shape or not np.allclose(a, b, rtol=1e-4, atol=1e-4 * (np.abs(a).max(initial=0) or 1)):
                return False
        return True

    def _decoded(self, model: Any, out: dict[str, Any]) -> None:
        """The outputs of each call of ``model`` (the decoder, or the split layout's decoder with past) once they are
        the rows' own: a subclass keeps what it needs of them."""

    def reorder(self, rows: np.ndarray) -> None:
        """Row r continues from old row ``rows[r]``: gathers the caches, encoder outputs and masks."""
        index = np.asarray(rows, np.int64).reshape(-1)
        if np.array_equal(index, np.arange(len(index))):
            return
        taken = self.B.asarray(index)
        # what depends only on a row's input (the cross-attention cache, encoder outputs and masks) stays
        # when every row keeps its input, as beams do: only the self-attention cache moves
        same_inputs = np.array_equal(self._owner[index], self._owner)
        moved = self.layout.names if same_inputs or self._shared else list(self.cache)
        self.cache.update({n: self.B.take(self.cache[n], taken, 0) for n in moved})
        if not same_inputs:
            self._owner = self._owner[index]
            self._rows_hidden = self.B.take(self._rows_hidden, taken, 0)
            self._rows_mask = self._rows_mask[index]
            self.padding = [self.padding[i] for i in index]

    # ------------------------------------------------------------------ helpers
    def _empty(self, rows: int) -> dict[str, Any]:
        shape = (rows, self.layout.heads, 0, self.layout.head_dim)
        return {n: self.B.zeros(shape, self.layout.dtype) for n in self.layout.names + self.layout.cross}

    @staticmethod
    def _known(model: Any, feeds: dict[str, Any]) -> dict[str, Any]:
        names = {i.name for i in model.inputs}
        return {k: v for k, v in feeds.items() if k in names}
