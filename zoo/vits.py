"""VITS and MMS-TTS: text to a waveform in one pass of ``model.onnx`` (``input_ids`` -> ``waveform``).

>>> from transmuter_mlx.zoo import vits
>>> text = vits.VitsText({"<pad>": 0, " ": 1, "a": 2, "b": 3}, add_blank=True)
>>> text.ids("A b!")
[0, 2, 0, 1, 0, 3, 0]
>>> vits.ModelArgs.from_dict({"model_type": "vits", "sampling_rate": 16000}).sampling_rate
16000

The graph holds VITS's noise: random normal operators scaled by ``noise_scale`` (the prior) and
``noise_scale_duration`` (the stochastic duration predictor), which the speech-synthesis pipeline seeds
per input, or turns off (``noise=False``: the audio of transformers with both scales at 0).

The text is prepared as transformers' ``VitsTokenizer`` does (``vocab.json``, else the vocabulary of
tokenizer.json, and tokenizer_config.json:
``normalize``, ``add_blank``, ``language``): see :class:`VitsText`. Tokenizers that phonemize (espeak) are
not served; MMS-TTS tokenizers do not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._base import BaseArgs

__all__ = ["DEFAULT_VARIANT", "FILES", "SPEECH_SYNTHESIZER", "TASKS", "ModelArgs", "VitsText"]

FILES = {"model": ("model",)}
TASKS = frozenset({"text-to-speech"})
DEFAULT_VARIANT = None
SPEECH_SYNTHESIZER = "vits"  # the key of pipelines.audio_tts.SYNTHESIZERS


@dataclass
class ModelArgs(BaseArgs):
    """The rate of the waveform (``sampling_rate`` of config.json, as transformers' pipeline reads it)."""

    sampling_rate: int = 16000


class VitsText:
    """Text to the token ids of a VITS model, as transformers' ``VitsTokenizer`` (phonemize off) gives them.

    With ``normalize`` (the default): the vocabulary's tokens are kept as written, every other character is
    lowercased, characters outside the vocabulary are dropped, and the text is stripped. Without it each
    character is a token (unknown ones the ``unk_token``). ``add_blank`` puts the id of token 0 (the pad) before,
    between and after the characters. ``language="ron"`` spells ț as ţ, as the tokenizer does.
    """

    def __init__(self, vocab: Mapping[str, int], *, add_blank: bool = True, normalize: bool = True,
                 language: str | None = None, unk_token: str | None = "<unk>", source: str = "vocab.json") -> None:
        self.vocab = dict(vocab)
        self.add_blank, self.normalize, self.language = add_blank, normalize, language
        self.unk_id = self.vocab.get(unk_token) if unk_token is not None else None
        self.source = source
        # normalization keeps a vocabulary token as written where one starts (transformers tries them in the
        # vocabulary's order at each position): the tokens by their first character, in that order
        self._words: dict[str, list[str]] = {}
        for word in self.vocab:
            if word:
                self._words.setdefault(word[0], []).append(word)
        self.blank_id = 0

    @classmethod
    def from_repo(cls, repo: Any) -> VitsText:
        """From ``vocab.json`` and tokenizer_config.json (with special_tokens_map.json) of a repository."""
        config = {**(repo.read_json("special_tokens_map.json") or {}), **(repo.read_json("tokenizer_config.json") or {})}
        if config.get("phonemize"):
            raise ValueError(f"text-to-speech: the tokenizer of {repo.name} phonemizes its text (phonemize: true, "
                             "espeak), which transmuter-mlx does not do; MMS-TTS tokenizers do not phonemize")
        if repo.exists("vocab.json"):
            vocab, source = json.loads(repo.path("vocab.json").read_text(encoding="utf-8")), "vocab.json"
        elif repo.exists("tokenizer.json"):  # a transformers.js export without the slow tokenizer's file
            model = json.loads(repo.path("tokenizer.json").read_text(encoding="utf-8")).get("model") or {}
            vocab, source = model.get("vocab"), "tokenizer.json"
            if not isinstance(vocab, dict):
                raise ValueError(f"text-to-speech: the tokenizer.json of {repo.name} has no character vocabulary "
                                 "(model.vocab), and the repository no vocab.json")
        else:
            raise ValueError(f"text-to-speech: {repo.name} has no vocab.json, the vocabulary of its VITS tokenizer")
        unk = config.get("unk_token", "<unk>")
        unk = unk.get("content") if isinstance(unk, dict) else unk
        return cls(vocab, add_blank=config.get("add_blank", True), normalize=config.get("normalize", True),
                   language=config.get("language"), unk_token=unk, source=f"{source} of {repo.name}")

    def prepare(self, text: str) -> str:
        """The text as the tokenizer splits it (``VitsTokenizer.prepare_for_tokenization``)."""
        if self.normalize:
            text = self._lowercase(text)
        if self.language == "ron":
            text = text.replace("ț", "ţ")
        if self.normalize:
            text = "".join(c for c in text if c in self.vocab).strip()
        return text

    def _lowercase(self, text: str) -> str:
        out, i = [], 0
        while i < len(text):
            word = next((w for w in self._words.get(text[i], ()) if text.startswith(w, i)), None)
            if word is not None:
                out.append(word)
                i += len(word)
            else:
                out.append(text[i].lower())
                i += 1
        return "".join(out)

    def ids(self, text: str) -> list[int]:
        """The token ids of ``text`` ([] when none of its characters is in the vocabulary, as transformers)."""
        chars = list(self.prepare(text))
        ids = []
        for c in chars:
            i = self.vocab.get(c, self.unk_id)
            if i is None:
                raise ValueError(f"the character {c!r} is not in {self.source}, which has no unknown token")
            ids.append(i)
        if self.add_blank and ids:
            blanked = [self.blank_id] * (2 * len(ids) + 1)
            blanked[1::2] = ids
            ids = blanked
        return ids
