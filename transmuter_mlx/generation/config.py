"""``GenerationConfig``: the settings of ``generate``, named and defaulted as in transformers.

>>> from transmuter_mlx.generation.config import GenerationConfig
>>> config = GenerationConfig(eos_token_id=[2, 7]).update(max_new_tokens=8, num_beams=3)
>>> config.max_new_tokens, config.num_beams, config.eos_ids, config.mode
(8, 3, [2, 7], 'beam')
>>> config.lengths(prompt_length=5)
(13, 0)

``GenerationConfig.from_repo(repo)`` reads ``generation_config.json`` as
``GenerationConfig.from_pretrained`` does; a repository without one (or with one that
transformers wrote from the model config, ``"_from_model_config": true``) gets the generation keys
of ``config.json``, as ``GenerationConfig.from_model_config`` takes them: every field below that
config.json holds with a value other than null, then, for fields still at their default, the
value in the decoder's config (``decoder``, ``generator`` or ``text_config``; a flat encoder-decoder
config is its own, so a null there resets a default, as in transformers).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["GenerationConfig"]


@dataclass(frozen=True)
class GenerationConfig:
    """The options of a generation run; the fields and defaults are those of transformers 4.57.

    ``seed`` is ours: the seed of the per-row sampling keys (None: a fresh random seed).
    ``stop_strings`` stops a row when its decoded new text contains one of them.
    """

    max_new_tokens: int | None = None
    max_length: int = 20
    min_length: int = 0
    min_new_tokens: int | None = None
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = 50
    top_p: float | None = 1.0
    min_p: float | None = None
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    decoder_start_token_id: int | None = None
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | list[int] | None = None
    bad_words_ids: list[list[int]] | None = None
    renormalize_logits: bool = False
    seed: int | None = None
    stop_strings: list[str] | None = field(default=None)

    def __post_init__(self) -> None:
        _check_types(self)
        if self.early_stopping not in (True, False, "never"):
            raise ValueError(f"early_stopping must be True, False or 'never', not {self.early_stopping!r}")
        if self.mode == "beam" and self.num_return_sequences > self.num_beams:
            raise ValueError(
                f"num_return_sequences ({self.num_return_sequences}) must be at most num_beams ({self.num_beams})")
        if self.mode == "greedy" and self.num_return_sequences > 1:
            raise ValueError("greedy selection returns one sequence: num_return_sequences > 1 needs "
                             "do_sample=True or num_beams > 1")
        if self.do_sample and self.temperature is not None and self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 with do_sample=True, not {self.temperature}")

    # ------------------------------------------------------------------ construction
    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> GenerationConfig:
        """A config from the known keys of ``values`` (other keys are ignored, as transformers keeps them
        as unused attributes)."""
        names = set(cls.fields())
        return cls(**{k: _plain(v) for k, v in values.items() if k in names})

    @classmethod
    def from_repo(cls, repo: Any) -> GenerationConfig:
        """The configuration of a repository (a ``hub.Repo``, repo id or folder), see the module docstring."""
        from ..hub import Repo, open_repo

        repo = repo if isinstance(repo, Repo) else open_repo(str(repo) if isinstance(repo, Path) else repo)
        generation = repo.read_json("generation_config.json")
        if generation is not None and not generation.get("_from_model_config", False):
            name, read = "generation_config.json", lambda: cls.from_dict(generation)
        else:
            name, read = "config.json", lambda: cls.from_model_config(repo.config if repo.exists("config.json") else {})
        try:
            return read()
        except ValueError as error:  # a bad value in the file: say which file
            raise ValueError(f"{name} of {repo.name}: {error}") from error

    @classmethod
    def from_model_config(cls, config: dict[str, Any]) -> GenerationConfig:
        """``GenerationConfig.from_model_config`` on the dict of a config.json."""
        result = cls.from_dict({k: v for k, v in config.items() if v is not None})
        decoder = config.get("decoder") or config.get("generator") or config.get("text_config")
        if decoder is None and config.get("is_encoder_decoder"):
            decoder = config  # a flat encoder-decoder config is its own decoder config, nulls included
        if isinstance(decoder, dict):
            default = cls()
            unset = {k: decoder[k] for k in cls.fields()
                     if k in decoder and getattr(result, k) == getattr(default, k)}
            result = dataclasses.replace(result, **{k: _plain(v) for k, v in unset.items()})
        return result

    def update(self, **options: Any) -> GenerationConfig:
        """A copy with ``options`` set (they win over the values here); an unknown option is a TypeError."""
        unknown = [k for k in options if k not in self.fields()]
        if unknown:
            raise TypeError(f"unknown generation option(s) {unknown}; valid: {', '.join(self.fields())}")
        return dataclasses.replace(self, **{k: _plain(v) for k, v in options.items()})

    # ------------------------------------------------------------------ derived values
    @property
    def mode(self) -> str:
        """``"beam"`` (num_beams > 1), ``"sample"`` or ``"greedy"``."""
        return "beam" if self.num_beams > 1 else "sample" if self.do_sample else "greedy"

    @property
    def eos_ids(self) -> list[int]:
        """``eos_token_id`` as a list (empty when unset)."""
        return _ids(self.eos_token_id)

    @property
    def forced_eos_ids(self) -> list[int]:
        """``forced_eos_token_id`` as a list (empty when unset)."""
        return _ids(self.forced_eos_token_id)

    @property
    def pad_id(self) -> int | None:
        """The padding token: ``pad_token_id``, else the first eos token (transformers does the same)."""
        return self.pad_token_id if self.pad_token_id is not None else (self.eos_ids or [None])[0]

    @property
    def start_id(self) -> int | None:
        """The first decoder token of an encoder-decoder: ``decoder_start_token_id``, else ``bos_token_id``."""
        return self.decoder_start_token_id if self.decoder_start_token_id is not None else self.bos_token_id

    def lengths(self, prompt_length: int, max_position_embeddings: int | None = None) -> tuple[int, int]:
        """``(max_length, min_length)`` of a row whose prompt (decoder input) has ``prompt_length`` tokens.

        As ``_prepare_generated_length``: ``max_new_tokens`` wins over ``max_length``; the default
        ``max_length`` of 20 means 20 new tokens (capped by ``max_position_embeddings``); ``min_new_tokens``
        wins over ``min_length``. Both lengths count the prompt.
        """
        if self.max_new_tokens is not None:
            max_length = self.max_new_tokens + prompt_length
        elif self.max_length == 20:
            max_length = 20 + prompt_length
            if max_position_embeddings is not None:
                max_length = min(max_length, max_position_embeddings)
        else:
            max_length = self.max_length
        min_length = self.min_length
        if self.min_new_tokens is not None:
            min_length = self.min_new_tokens + prompt_length
        return max_length, min_length


# The checks of transformers 4.57 (``GenerationConfig.validate``, the logits processors' constructors and
# ``generate``), applied to every option whatever the mode, so a bad value fails when it is given.
# Integer counts and their least value:
_COUNTS = {"max_new_tokens": 1, "max_length": 1, "min_length": 0, "min_new_tokens": 0, "top_k": 0,
           "no_repeat_ngram_size": 0, "num_beams": 1, "num_return_sequences": 1}
# Real numbers and their range (lowest, highest, whether the lowest is excluded); temperature's range
# (> 0) applies with do_sample=True only, as greedy selection ignores it:
_REALS = {"temperature": (-math.inf, math.inf, False), "top_p": (0.0, 1.0, False), "min_p": (0.0, 1.0, False),
          "repetition_penalty": (0.0, math.inf, True), "length_penalty": (-math.inf, math.inf, False)}
_FLAGS = ("do_sample", "renormalize_logits")
_TOKENS = ("bos_token_id", "decoder_start_token_id", "forced_bos_token_id")  # a token id (>= 0) or None
_TOKEN_LISTS = ("eos_token_id", "forced_eos_token_id")  # a token id or a list of them, or None
_SEED_LIMIT = 2**64  # the seed of mx.random.key is an unsigned 64-bit integer


def _check_types(config: GenerationConfig) -> None:
    """Every option's type and range (a ValueError naming the option, its value and what is allowed);
    numbers are normalized to plain ``int``/``float``/``bool`` and a single stop string to a list."""
    optional = {f.name for f in dataclasses.fields(config) if "None" in str(f.type)}
    values: dict[str, Any] = {}
    for name, least in _COUNTS.items():
        values[name] = _count(name, getattr(config, name), least, name in optional)
    for name, (low, high, open_low) in _REALS.items():
        values[name] = _real(name, getattr(config, name), low, high, open_low)
    for name in _FLAGS:
        values[name] = _flag(name, getattr(config, name))
    for name in _TOKENS:
        values[name] = _count(name, getattr(config, name), 0, True)
    for name in _TOKEN_LISTS:
        values[name] = _token_list(name, getattr(config, name))
    values["pad_token_id"] = _count("pad_token_id", config.pad_token_id, None, True)  # -1 is seen in configs
    values["seed"] = _seed(config.seed)
    values["bad_words_ids"] = _bad_words(config.bad_words_ids)
    values["stop_strings"] = _stop_strings(config.stop_strings)
    for name, value in values.items():
        object.__setattr__(config, name, value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _count(name: str, value: Any, least: int | None, optional: bool) -> int | None:
    """An integer option: an int (numpy ints too), at least ``least``; None where ``optional``."""
    if value is None and optional:
        return None
    if not _is_int(value):
        allowed = "an int" + (f" >= {least}" if least is not None else "") + (" or None" if optional else "")
        raise ValueError(f"{name} must be {allowed}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if least is not None and value < least:
        bound = "greater than 0" if least == 1 else f"at least {least}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def _real(name: str, value: Any, low: float, high: float, open_low: bool) -> float | None:
    """A real option (ints accepted), in ``[low, high]`` (``(low, high]`` when ``open_low``), or None (the
    processor is off, as a null in a config file means). NaN is never in range."""
    if value is None:
        return None
    if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    above = value > low if open_low else value >= low
    if not (above and value <= high and math.isfinite(value)):
        if math.isinf(low) and math.isinf(high):
            raise ValueError(f"{name} must be a finite number, got {value}")
        if math.isinf(high):
            least = "greater than" if open_low else "at least"
            raise ValueError(f"{name} must be a finite number {least} {low:g}, got {value}")
        raise ValueError(f"{name} must be in [{low:g}, {high:g}], got {value}")
    return value


def _flag(name: str, value: Any) -> bool | None:
    """True or False (None, a null in a config file, stays: it reads as False)."""
    if value is None:
        return None
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def _token_list(name: str, value: Any) -> int | list[int] | None:
    """A token id, or a list of them (empty: none), or None."""
    if value is None or _is_int(value):
        return _count(name, value, 0, True)
    if not isinstance(value, list | tuple) or not all(_is_int(v) for v in value):
        raise ValueError(f"{name} must be a token id (an int) or a list of them, got {value!r}")
    return [_count(name, v, 0, False) for v in value]


def _seed(value: Any) -> int | None:
    seed = _count("seed", value, 0, True)
    if seed is not None and seed >= _SEED_LIMIT:
        raise ValueError(f"seed must be less than 2**64, got {seed}")
    return seed


def _bad_words(value: Any) -> list[list[int]] | None:
    """A non-empty list of non-empty token-id lists, as ``NoBadWordsLogitsProcessor`` requires."""
    if value is None:
        return None
    words = list(value) if isinstance(value, list | tuple) else None
    if not words or not all(isinstance(w, list | tuple) and w and all(_is_int(t) and t >= 0 for t in w)
                            for w in words):
        raise ValueError(f"bad_words_ids must be a non-empty list of non-empty lists of token ids, got {value!r}")
    return [[int(t) for t in w] for w in words]


def _stop_strings(value: Any) -> list[str] | None:
    """A str or a list of non-empty strs (a str is one stop string, as transformers' StopStringCriteria)."""
    if value is None:
        return None
    strings = [value] if isinstance(value, str) else value
    if not isinstance(strings, list | tuple) or not all(isinstance(s, str) and s for s in strings):
        raise ValueError(f"stop_strings must be a non-empty str or a list of them, got {value!r}")
    return list(strings) or None


def _ids(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]


def _plain(value: Any) -> Any:
    """Lists stay lists (json), tuples become lists so configs compare equal (nested ones too)."""
    return [_plain(v) for v in value] if isinstance(value, tuple | list) else value
