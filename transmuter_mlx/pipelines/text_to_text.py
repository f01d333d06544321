"""text_to_text: an encoder-decoder (T5, Marian, NLLB, M2M100) generating text from text.

>>> import transmuter_mlx as tm
>>> translate = tm.text.text_to_text("Xenova/opus-mt-en-de")
>>> translate("The house is wonderful.")
{'results': [{'text': '...', 'token_summary': {'input': ..., 'output': ..., 'padding': ...}}]}
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from ..generation.config import GenerationConfig
from ..generation.context import ContextLimit
from ..generation.loop import Generated, generate
from ..generation.seq2seq import EncoderDecoderSession
from ..generation.slots import EncoderDecoderSlots
from ..processors.text import text_input
from ..tokenizer import SPECIAL_TOKENS, Tokenizer
from .generating import GENERATION_OPTIONS, STREAM_OPTIONS, GeneratingPipeline, RowInput

__all__ = ["Summarization", "TextToText", "Translation"]

LANGUAGE_OPTIONS = ("source_language_token", "target_language_token")


class TextToText(GeneratingPipeline):
    """Text in, generated text out: ``{"results": [{"text", "token_summary"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> nllb = tm.text.text_to_text("Xenova/nllb-200-distilled-600M", source_language_token="eng_Latn",
    ...                             target_language_token="fra_Latn")
    >>> result = nllb("The house is wonderful.", max_new_tokens=10)["results"][0]
    >>> isinstance(result["text"], str), result["token_summary"]["output"] <= 10
    (True, True)

    The repository needs ``onnx/encoder_model.onnx`` and ``onnx/decoder_model_merged.onnx`` (or
    ``decoder_model.onnx`` + ``decoder_with_past_model.onnx``). The settings of generation_config.json
    apply (Marian: 4 beams); the generation options of transformers override them (``max_new_tokens``,
    ``num_beams``, ``do_sample``, ``seed``, ...). ``source_language_token`` replaces the language token
    of the tokenizer.json template (transformers' ``src_lang``); ``target_language_token`` becomes
    ``forced_bos_token_id`` (``tgt_lang``). One result per returned sequence (``num_return_sequences``);
    ``token_summary`` counts the input tokens, the sequence's new tokens and the encoder padding.
    """

    task = "text2text-generation"
    defaults = MappingProxyType(
        {**{n: None for n in (*LANGUAGE_OPTIONS, *GENERATION_OPTIONS)}, **STREAM_OPTIONS}
    )

    def __init__(self, source: Any = None, /, **options: Any) -> None:
        super().__init__(source, **options)
        o = self.options
        self.tokenizer: Tokenizer = o.tokenizer or Tokenizer.from_repo(self.repo)
        self.generation = GenerationConfig.from_repo(self.repo)
        self.session: EncoderDecoderSession = (
            o.model if isinstance(o.model, EncoderDecoderSession) else self._load_session()
        )
        self.template = _language_slot(self.tokenizer)
        self.max_positions = self.args.positions  # the cap of the default 20 new tokens, as transformers
        self.context_limit = ContextLimit.of(self.args, self.tokenizer.model_max_length)
        self.generation_for(dict(o.extra))  # options given at build time fail here, not at the first call

    def _load_session(self) -> EncoderDecoderSession:
        """The encoder and the merged decoder (else the first-step and with-past decoders) of the repo."""
        decoders = [self.load_file("decoder")]
        if "use_cache_branch" not in {i.name for i in decoders[0].inputs}:
            decoders.append(self.load_file("decoder_with_past"))
        return EncoderDecoderSession(self.load_file("encoder"), *decoders, heads=self.args.num_attention_heads,
                                     head_dim=self.args.head_dim)

    # ------------------------------------------------------------------ options
    def configure(self, config: GenerationConfig, options: Mapping[str, Any]) -> GenerationConfig:
        """The decoder start and the language tokens of a call (checked here, before any decoding)."""
        if config.start_id is None:
            raise ValueError(
                f"{self.task}: {self.repo.name} has no decoder_start_token_id (nor bos_token_id) "
                "in generation_config.json or config.json"
            )
        self.row_length(config, 1, "the decoder: ")  # it starts from one token; past a table: an error
        target = options.get("target_language_token")
        if target is not None:
            config = config.update(forced_bos_token_id=self.language_id(target, "target_language_token"))
        source = options.get("source_language_token")
        if source is not None:
            self.language_id(source, "source_language_token")
            if self.template is None:
                raise ValueError(
                    f"{self.task}: source_language_token given, but the post-processor of the "
                    f"tokenizer.json of {self.repo.name} has no language token to replace"
                )
        return config

    def language_id(self, code: str, option: str) -> int:
        """The id of a language token: the family's spellings of ``code`` (``"fra_Latn"``; M2M100's ``"fr"``
        is ``"__fr__"``) that are added tokens of the tokenizer."""
        for token in self.family.language_ids(code) if isinstance(code, str) else ():
            token_id = self.tokenizer.token_to_id(token)
            if token_id is not None and token_id in self.tokenizer.added_tokens:
                return token_id
        example = f" (this tokenizer's template uses {self.template[1]!r})" if self.template else ""
        raise ValueError(
            f"{self.task}: unknown {option} {code!r}: it is not a special token of the tokenizer; "
            f"language tokens are the added tokens of the tokenizer.json of {self.repo.name}{example}"
        )

    # ------------------------------------------------------------------ hooks of GeneratingPipeline
    def preprocess(self, index: int, item: Any, options: Mapping[str, Any], config: GenerationConfig) -> str:
        """One input: a str (the texts of a batch are encoded together, padded to one bucket)."""
        return text_input(self.task, index, item)

    def generate_batch(self, batch: list[str], config: GenerationConfig, options: Mapping[str, Any],
                       on_step: Callable[[list[list[int]]], None] | None) -> Generated:
        """The encoder on the batch's texts, then the decoder from ``decoder_start_token_id``; each
        input's token summary counts its encoded text and the encoder padding of the batch."""
        ids, mask, lengths = self.encode(batch, options.get("source_language_token"))
        self.session.encode({"input_ids": ids, "attention_mask": mask})
        out = generate(self.session, [[config.start_id]] * len(batch), config, decode=self.tokenizer.decode,
                       on_step=on_step, max_position_embeddings=self.max_positions,
                       max_length_cap=self.context_limit.positions)
        self.warn_context_end(out, [1] * len(batch), config)
        out.token_summaries = [{"input": n, "output": s["output"], "padding": int(ids.shape[1] - n)}
                               for n, s in zip(lengths, out.token_summaries)]
        return out

    def open_slots(self, slots: int) -> Any:
        """A session per row (each encodes its own text when it joins)."""
        return EncoderDecoderSlots(self.session, slots)

    def row_input(self, prepared: str, config: GenerationConfig, options: Mapping[str, Any]) -> RowInput:
        ids, mask, lengths = self.encode([prepared], options.get("source_language_token"))
        return RowInput([config.start_id], {"input_ids": ids, "attention_mask": mask}, lengths[0],
                        int(ids.shape[1] - lengths[0]))

    def decode(self, ids: Sequence[int]) -> str:
        """New tokens to text, as ``Text2TextGenerationPipeline`` (special tokens skipped, no clean-up)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def generate_ids(
        self, texts: list[str], options: Mapping[str, Any]
    ) -> list[tuple[list[list[int]], dict]]:
        """For each text: the new token ids of its returned sequences, and ``{"input", "padding"}``."""
        outputs = self.generate_outputs(texts, [None] * len(texts), self.call_options(options))
        return [(seqs, {k: summary[k] for k in ("input", "padding")}) for _, (seqs, summary) in outputs]

    def encode(self, texts: list[str], source: str | None) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """Padded (inputs, bucket) ids and mask, and each input's length; the source language token
        takes the place of the template's language token."""
        c, limit = self.options.compile, self.tokenizer.model_max_length
        buckets = list(c.lengths_for(limit))
        # truncated to the largest bucket; the overflow rows only tell which texts were cut
        enc = self.tokenizer.encode(
            texts, truncation=True, max_length=buckets[-1], pad_to=buckets, return_overflow=True
        )
        _, first = np.unique(enc.overflow_to_sample, return_index=True)  # each text's own row
        cut = np.flatnonzero(np.bincount(enc.overflow_to_sample) > 1)
        if len(cut):
            full = self.tokenizer.encode([texts[i] for i in cut], truncation=False)
            longest = int(full.attention_mask.sum(-1).max())
            # stacklevel: the caller of pipe(...), through GeneratingPipeline's run and batch frames
            warnings.warn(
                f"{self.task}: an input of {longest} tokens was truncated to {buckets[-1]}", stacklevel=9
            )
        ids, mask = enc.input_ids[first], enc.attention_mask[first]
        lengths = [int(n) for n in mask.sum(-1)]
        if source is not None and self.template is not None:  # configure() checked that there is one
            position, _ = self.template
            left = self.tokenizer.padding_side == "left"
            for r, n in enumerate(lengths):
                start = ids.shape[1] - n if left else 0
                ids[r, start + (position if position >= 0 else n + position)] = self.language_id(
                    source, "source_language_token"
                )
        return ids, mask, lengths


class Translation(TextToText):
    """``translation``: :class:`TextToText` under the task name of transformers."""

    task = "translation"


class Summarization(TextToText):
    """``summarization``: :class:`TextToText` under the task name of transformers."""

    task = "summarization"


def _language_slot(tokenizer: Tokenizer) -> tuple[int, str] | None:
    """``(position, token)`` of the language token in the single-text template of tokenizer.json's
    post-processor (a special token that is not bos/eos/pad/...); position counts from the start
    when it comes before the text, from the end (negative) after it. None without one."""
    processor = json.loads(tokenizer.backend.to_str()).get("post_processor") or {}
    templates = [p for p in processor.get("processors", [processor]) if p.get("type") == "TemplateProcessing"]
    if not templates:
        return None
    pieces = templates[0]["single"]
    common = {getattr(tokenizer, k) for k in SPECIAL_TOKENS}
    text = next(i for i, p in enumerate(pieces) if "Sequence" in p)
    for i, piece in enumerate(pieces):
        token = piece.get("SpecialToken", {}).get("id")
        if token is not None and token not in common:
            return (i if i < text else i - len(pieces)), token
    return None
