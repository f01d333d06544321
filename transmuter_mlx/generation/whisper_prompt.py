"""Whisper's decoder prompt: ``<|startoftranscript|>``, the language, the task, ``<|notimestamps|>``.

>>> settings = WhisperSettings.from_dict({
...     "decoder_start_token_id": 50258, "eos_token_id": 50257, "no_timestamps_token_id": 50363,
...     "is_multilingual": True, "lang_to_id": {"<|en|>": 50259, "<|fr|>": 50265},
...     "task_to_id": {"translate": 50358, "transcribe": 50359}})
>>> settings.init_tokens(language="french", task=None, return_timestamps=False)
[50258, 50265, 50359, 50363]
>>> settings.init_tokens(language=None, task="translate", return_timestamps=True, detected=50259)
[50258, 50259, 50358]
>>> settings.needs_detection(language=None)
True

The rules are those of ``WhisperGenerationMixin._retrieve_init_tokens`` (transformers 4.57): the
language given (a code, a name or ``<|xx|>``; checked against ``lang_to_id``), else the
``forced_decoder_ids`` of generation_config.json, else the language detected from the first step's
logits (a multilingual model); then the task (``transcribe`` when only the language is given), then
``<|notimestamps|>`` unless timestamps are asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .whisper_languages import LANGUAGES, TO_LANGUAGE_CODE

__all__ = ["TASKS", "WhisperSettings"]

TASKS = ("translate", "transcribe")


@dataclass(frozen=True)
class WhisperSettings:
    """The Whisper keys of generation_config.json (those ``GenerationConfig`` does not hold)."""

    decoder_start_token_id: int
    eos_token_id: int
    no_timestamps_token_id: int | None = None
    is_multilingual: bool | None = None
    lang_to_id: Mapping[str, int] = field(default_factory=dict)
    task_to_id: Mapping[str, int] = field(default_factory=dict)
    forced_decoder_ids: tuple[tuple[int, int | None], ...] = ()
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()
    max_initial_timestamp_index: int | None = None
    alignment_heads: tuple[tuple[int, int], ...] = ()
    prev_sot_token_id: int | None = None
    return_timestamps: bool | None = None  # None: generation_config.json does not say
    has_lang_to_id: bool = False

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], model_config: Mapping[str, Any] | None = None) -> WhisperSettings:
        """From generation_config.json (``values``), with config.json (``model_config``) for the keys it
        lacks, as transformers falls back to the model config."""
        model_config = model_config or {}

        def get(key: str, default: Any = None) -> Any:
            value = values.get(key)
            return value if value is not None else model_config.get(key, default)

        eos = get("eos_token_id")
        eos = eos[0] if isinstance(eos, list) else eos
        start = get("decoder_start_token_id")
        if start is None or eos is None:
            raise ValueError("generation_config.json has no decoder_start_token_id or eos_token_id")
        forced = get("forced_decoder_ids") or ()
        return cls(
            decoder_start_token_id=int(start), eos_token_id=int(eos),
            no_timestamps_token_id=values.get("no_timestamps_token_id"),
            is_multilingual=values.get("is_multilingual"),
            lang_to_id=dict(values.get("lang_to_id") or {}), task_to_id=dict(values.get("task_to_id") or {}),
            forced_decoder_ids=tuple((int(i), None if t is None else int(t)) for i, t in forced),
            suppress_tokens=tuple(int(t) for t in get("suppress_tokens") or ()),
            begin_suppress_tokens=tuple(int(t) for t in get("begin_suppress_tokens") or ()),
            max_initial_timestamp_index=values.get("max_initial_timestamp_index"),
            alignment_heads=tuple((int(a), int(b)) for a, b in values.get("alignment_heads") or ()),
            prev_sot_token_id=values.get("prev_sot_token_id"),
            return_timestamps=values.get("return_timestamps"),
            has_lang_to_id="lang_to_id" in values,
        )

    # ------------------------------------------------------------------ checks
    def check(self, language: Any, task: Any, return_timestamps: Any, where: str) -> None:
        """The errors of ``_set_language_and_task`` / ``_set_return_timestamps`` for these options, before any
        decoding; ``where`` starts the messages (the task and the repository)."""
        if self.is_multilingual is False and (language is not None or task is not None):
            raise ValueError(f"{where}: language and task need a multilingual model; this one is English-only "
                             f"(is_multilingual is false in its generation_config.json)")
        if language is not None:
            if not self.lang_to_id:
                raise ValueError(f"{where}: language given, but generation_config.json has no lang_to_id")
            self.language_id(language, where)
        if task is not None:
            if task not in TASKS:
                raise ValueError(f"{where}: task must be one of {list(TASKS)}, not {task!r}")
            if not self.task_to_id:
                raise ValueError(f"{where}: task given, but generation_config.json has no task_to_id")
        if return_timestamps and self.no_timestamps_token_id is None:
            raise ValueError(f"{where}: timestamps need no_timestamps_token_id in generation_config.json")

    def language_id(self, language: str, where: str = "automatic-speech-recognition") -> int:
        """The token id of a language given as a code (``"fr"``), a name (``"french"``) or a token (``"<|fr|>"``)."""
        if not isinstance(language, str):
            raise TypeError(f"{where}: language must be a str such as 'fr' or 'french', not {type(language).__name__}")
        name = language.lower()
        if name in self.lang_to_id:
            token = name
        elif name in TO_LANGUAGE_CODE:
            token = f"<|{TO_LANGUAGE_CODE[name]}|>"
        elif name in TO_LANGUAGE_CODE.values():
            token = f"<|{name}|>"
        else:
            raise ValueError(f"{where}: unsupported language {language!r}; languages are codes such as 'fr' or "
                             f"names such as 'french' ({len(LANGUAGES)} of them)")
        if token not in self.lang_to_id:
            raise ValueError(f"{where}: language {token} is not in the lang_to_id of this model's "
                             "generation_config.json")
        return int(self.lang_to_id[token])

    # ------------------------------------------------------------------ prompt
    def _forced(self, language: Any, task: Any) -> list[int | None]:
        """The start token and the leading forced_decoder_ids (used when neither language nor task is given)."""
        tokens: list[int | None] = [self.decoder_start_token_id]
        if language is None and task is None and self.forced_decoder_ids and self.forced_decoder_ids[0][0] == 1:
            i, forced = 1, list(self.forced_decoder_ids)
            while forced and forced[0][0] == i:
                tokens.append(forced[0][1])
                forced, i = forced[1:], i + 1
            if forced:
                raise ValueError(f"forced_decoder_ids {list(self.forced_decoder_ids)} do not follow Whisper's prompt")
        return tokens

    def needs_detection(self, language: Any, task: Any = None) -> bool:
        """Whether the language must be detected (no language given or forced, and the config has lang_to_id)."""
        tokens = self._forced(language, task)
        undefined = len(tokens) <= 1 or tokens[1] is None
        return language is None and self.has_lang_to_id and undefined

    def init_tokens(self, language: Any, task: Any, return_timestamps: bool, detected: int | None = None) -> list[int]:
        """The decoder prompt of one input (``detected``: its detected language token, when it needs one)."""
        tokens = self._forced(language, task)
        lang_id = self.language_id(language) if language is not None else detected
        if lang_id is not None:
            if len(tokens) > 1:
                tokens[1] = lang_id
            else:
                tokens.append(lang_id)
        if task is not None:
            task_id = int(self.task_to_id[task])
            tokens.append(task_id)  # transformers appends, then replaces any other task token (see below)
            ids = set(self.task_to_id.values())
            if any(t in ids for t in tokens):
                tokens = [task_id if t in ids else t for t in tokens]
        elif language is not None and self.task_to_id:
            if not any(t in self.task_to_id.values() for t in tokens):
                tokens.append(int(self.task_to_id["transcribe"]))
        nts = self.no_timestamps_token_id
        if not return_timestamps and nts is not None and tokens[-1] != nts:
            tokens.append(nts)
        elif return_timestamps and tokens[-1] == nts:
            tokens = tokens[:-1]
        return [int(t) for t in tokens if t is not None]
