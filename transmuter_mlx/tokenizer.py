"""Tokenizers of Hugging Face repositories, encoding as transformers' fast tokenizers do.

>>> from transmuter_mlx.tokenizer import Tokenizer
>>> tok = Tokenizer.from_repo("Xenova/all-MiniLM-L6-v2")
>>> enc = tok(["Hello world", "café 東京"], pad_to=[32, 128])
>>> enc.input_ids.shape, enc.offsets.shape
((2, 32), (2, 32, 2))

Built on the ``tokenizers`` package (tokenizer.json) plus tokenizer_config.json and
special_tokens_map.json, as transformers' fast tokenizers (config.json is the model's: the pipelines cap
``model_max_length`` by the positions its family declares). Offsets are byte offsets into each text's
UTF-8 encoding. ``encode_rows`` gives each row unpadded (``TokenRow``); ``encode`` pads them into one batch.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers

from ._native import STOPPING, native_message
from ._tokenize import TokenRow, char_to_byte_offsets, pad_rows, validate_texts
from .hub import MalformedFileError, Repo, RepoFileNotFoundError, open_repo

__all__ = ["Encoded", "TokenRow", "Tokenizer", "TokenizerLoadError"]

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_TRUNCATION = {True: "longest_first", "longest_first": "longest_first", "only_first": "only_first",
               "only_second": "only_second"}  # fmt: skip
_LARGE = 10**12

TextInput = str | tuple[str, str]


class TokenizerLoadError(RepoFileNotFoundError):
    """A repository or folder without a usable tokenizer.json."""


@dataclass
class Encoded:
    """A padded batch: (rows, length) int64 arrays; ``offsets`` is (rows, length, 2) UTF-8 byte offsets.

    >>> tok = Tokenizer.from_repo("Xenova/all-MiniLM-L6-v2")
    >>> enc = tok(["a b", ("question", "context")])
    >>> enc.attention_mask.tolist(), enc.token_type_ids.tolist()
    ([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], [[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]])
    >>> list(enc.feeds(["input_ids", "attention_mask", "position_ids"]))   # the inputs it can feed
    ['input_ids', 'attention_mask']

    ``sequence_ids`` and ``word_ids`` are -1 on special and padding tokens. ``overflow_to_sample``
    gives, for each row, the index of the input it came from (rows > inputs with ``return_overflow``).
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray
    offsets: np.ndarray
    sequence_ids: np.ndarray
    word_ids: np.ndarray
    special_tokens_mask: np.ndarray
    overflow_to_sample: np.ndarray

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def feeds(self, input_names: Sequence[str]) -> dict[str, np.ndarray]:
        """The model inputs among ``input_names``: ``enc.feeds(model.input_names)`` -> {"input_ids": ...}."""
        known = ("input_ids", "attention_mask", "token_type_ids")
        return {name: getattr(self, name) for name in input_names if name in known}


class Tokenizer:
    """A fast tokenizer with the settings of its repository.

    >>> tok = Tokenizer.from_repo("Xenova/all-MiniLM-L6-v2")       # or Tokenizer.from_folder("/models/bert")
    >>> tok.decode(tok("Hello").input_ids[0])
    'hello'
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        tokenizer_config: dict | None = None,
        special_tokens_map: dict | None = None,
        chat_template: str | dict | None = None,
        source: str = "",
    ) -> None:
        self.backend = backend
        backend.no_truncation()  # settings saved in tokenizer.json are ignored, as transformers does per call
        backend.no_padding()
        config = dict(tokenizer_config or {})
        stm = special_tokens_map or {}
        # transformers reads special_tokens_map.json only for configs without added_tokens_decoder
        self.config = {**config, **stm} if "added_tokens_decoder" not in config else {**stm, **config}
        self.source = source
        self.chat_template = chat_template if chat_template is not None else _config_template(config)
        self.padding_side: str = config.get("padding_side", "right")
        self.truncation_side: str = config.get("truncation_side", "right")
        self.clean_up_tokenization_spaces: bool = bool(config.get("clean_up_tokenization_spaces", False))
        self._clones: dict[tuple, tokenizers.Tokenizer] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Tokenizer({self.source!r}, vocab_size={self.vocab_size})"

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_repo(cls, repo: Repo | str | Path | tuple[str, str], **open_options: Any) -> Tokenizer:
        """Load from a repository: ``Tokenizer.from_repo("Xenova/bert-base-uncased", offline=True)``."""
        repo = open_repo(repo, **open_options)
        if not repo.exists("tokenizer.json"):
            raise TokenizerLoadError(
                f"tokenizer.json not found in {repo.name}: transmuter-mlx needs the fast tokenizer file "
                "tokenizer.json (save the tokenizer with a transformers *TokenizerFast to create it)"
            )
        backend = _read_backend(repo.path("tokenizer.json"))
        template: Any = None
        if repo.exists("chat_template.jinja"):
            template = repo.path("chat_template.jinja").read_text(encoding="utf-8")
        elif repo.exists("chat_template.json"):
            template = _config_template(repo.read_json("chat_template.json") or {})
        return cls(
            backend,
            tokenizer_config=repo.read_json("tokenizer_config.json"),
            special_tokens_map=repo.read_json("special_tokens_map.json"),
            chat_template=template,
            source=repo.repo_id or repo.source,
        )

    @classmethod
    def from_folder(cls, path: str | Path) -> Tokenizer:
        """Load from a local folder: ``Tokenizer.from_folder("/models/bert")``."""
        return cls.from_repo(Path(path))

    # ------------------------------------------------------------------ special tokens and vocabulary
    def _special(self, key: str) -> str | None:
        value = self.config.get(key)
        return value.get("content") if isinstance(value, dict) else value

    def _special_id(self, key: str) -> int | None:
        token = self._special(key)
        return None if token is None else self.backend.token_to_id(token)

    bos_token = property(lambda self: self._special("bos_token"), doc="``tok.bos_token`` -> '<s>' or None")
    eos_token = property(lambda self: self._special("eos_token"), doc="``tok.eos_token`` -> '</s>' or None")
    unk_token = property(lambda self: self._special("unk_token"), doc="``tok.unk_token`` -> '[UNK]' or None")
    sep_token = property(lambda self: self._special("sep_token"), doc="``tok.sep_token`` -> '[SEP]' or None")
    pad_token = property(lambda self: self._special("pad_token"), doc="``tok.pad_token`` -> '[PAD]' or None")
    cls_token = property(lambda self: self._special("cls_token"), doc="``tok.cls_token`` -> '[CLS]' or None")
    mask_token = property(
        lambda self: self._special("mask_token"), doc="``tok.mask_token`` -> '[MASK]' or None"
    )
    bos_token_id = property(
        lambda self: self._special_id("bos_token"), doc="``tok.bos_token_id`` -> int or None"
    )
    eos_token_id = property(
        lambda self: self._special_id("eos_token"), doc="``tok.eos_token_id`` -> int or None"
    )
    unk_token_id = property(
        lambda self: self._special_id("unk_token"), doc="``tok.unk_token_id`` -> int or None"
    )
    sep_token_id = property(
        lambda self: self._special_id("sep_token"), doc="``tok.sep_token_id`` -> int or None"
    )
    pad_token_id = property(
        lambda self: self._special_id("pad_token"), doc="``tok.pad_token_id`` -> int or None"
    )
    cls_token_id = property(
        lambda self: self._special_id("cls_token"), doc="``tok.cls_token_id`` -> int or None"
    )
    mask_token_id = property(
        lambda self: self._special_id("mask_token"), doc="``tok.mask_token_id`` -> int or None"
    )

    @property
    def all_special_ids(self) -> list[int]:
        """Ids of the special tokens and additional special tokens: ``tok.all_special_ids`` -> [0, 100, ...]."""
        extra = [
            t.get("content") if isinstance(t, dict) else t
            for t in self.config.get("additional_special_tokens") or []
        ]
        tokens = [self._special(k) for k in SPECIAL_TOKENS] + extra
        ids = [self.backend.token_to_id(t) for t in tokens if t is not None]
        return sorted({i for i in ids if i is not None})

    @property
    def vocab_size(self) -> int:
        """Size of the base vocabulary, without added tokens (as transformers): ``tok.vocab_size``."""
        return self.backend.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    @property
    def added_tokens(self) -> dict[int, tokenizers.AddedToken]:
        """Added tokens by id (``.content``, ``.special``): ``tok.added_tokens[0].content`` -> '[PAD]'."""
        return dict(self.backend.get_added_tokens_decoder())

    @property
    def model_max_length(self) -> int | None:
        """Longest input the tokenizer's config declares (tokenizer_config.json's model_max_length; None when
        it declares none or transformers' "very large" default). The pipelines also cap it by the positions of
        the model's family.

        >>> Tokenizer.from_repo("Xenova/all-MiniLM-L6-v2").model_max_length
        512
        """
        value = self.config.get("model_max_length")
        return int(value) if isinstance(value, int | float) and value < _LARGE else None

    def token_to_id(self, token: str) -> int | None:
        """Id of a token, or None: ``tok.token_to_id("[CLS]")`` -> 101."""
        return self.backend.token_to_id(token)

    def convert_ids_to_tokens(self, ids: Sequence[int] | np.ndarray | int, skip_special_tokens: bool = False):
        """Tokens of ids: ``tok.convert_ids_to_tokens([101, 7592])`` -> ['[CLS]', 'hello']."""
        if isinstance(ids, int | np.integer):
            return self.backend.id_to_token(int(ids))
        special = set(self.all_special_ids) if skip_special_tokens else set()
        return [self.backend.id_to_token(int(i)) for i in ids if int(i) not in special]

    def convert_tokens_to_string(self, tokens: Sequence[str]) -> str:
        """Text of tokens through the decoder, as transformers' fast tokenizers: ``["hel", "##lo"]`` -> 'hello'."""
        decoder = self.backend.decoder
        return decoder.decode(list(tokens)) if decoder is not None else " ".join(tokens)

    # ------------------------------------------------------------------ decoding
    def decode(
        self,
        ids: Sequence[int] | np.ndarray | int,
        skip_special_tokens: bool = True,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> str:
        """Text of token ids, as transformers decodes: ``tok.decode([101, 7592, 102])`` -> 'hello'."""
        ids = (
            [int(ids)] if isinstance(ids, int | np.integer) else [int(i) for i in np.asarray(ids).reshape(-1)]
        )
        text = self._decode_native(ids, skip_special_tokens)
        clean = (
            self.clean_up_tokenization_spaces
            if clean_up_tokenization_spaces is None
            else clean_up_tokenization_spaces
        )
        return _clean_up_tokenization(text) if clean else text

    def _decode_native(self, ids: list[int], skip_special_tokens: bool) -> str:
        """``backend.decode``, whose Rust errors and panics become a ValueError naming the ids."""
        try:
            return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)
        except STOPPING:
            raise
        except BaseException as error:  # OverflowError for ids < 0, or a panic (not an Exception)
            bad = [i for i in ids if not 0 <= i < len(self)]
            detail = f"ids {bad[:5]} are outside the vocabulary of {len(self)}" if bad else "the ids are valid"
            raise ValueError(f"the tokenizer could not decode {len(ids)} token ids ({detail}; "
                             f"{type(error).__name__}: {native_message(error)})") from error

    def batch_decode(self, rows: Sequence[Sequence[int]] | np.ndarray, **options: Any) -> list[str]:
        """Decode each row: ``tok.batch_decode(enc.input_ids)`` -> ['hello', ...]."""
        return [self.decode(row, **options) for row in rows]

    # ------------------------------------------------------------------ encoding
    def __call__(self, texts: TextInput | Sequence[TextInput], **options: Any) -> Encoded:
        """Same as :meth:`encode`: ``tok(["a", "b"], pad_to=32)``."""
        return self.encode(texts, **options)

    def encode(
        self,
        texts: TextInput | Sequence[TextInput],
        *,
        add_special_tokens: bool = True,
        truncation: bool | str = True,
        max_length: int | None = None,
        stride: int = 0,
        return_overflow: bool = False,
        pad_to: int | Sequence[int] | None = None,
        padding_side: str | None = None,
    ) -> Encoded:
        """Encode texts or ``(text, text_pair)`` tuples into one padded batch.

        >>> tok = Tokenizer.from_repo("Xenova/all-MiniLM-L6-v2")
        >>> enc = tok([("Who?", "a " * 20)], truncation="only_second", max_length=16,
        ...           stride=4, return_overflow=True)
        >>> enc.input_ids.shape, enc.overflow_to_sample.tolist()   # 3 windows of the context, one input
        ((3, 16), [0, 0, 0])

        ``truncation``: True (= "longest_first"), "only_first", "only_second" or False; the length
        is ``max_length``, else ``model_max_length`` (and at most the largest ``pad_to``).
        ``return_overflow`` adds the windows cut off by truncation (overlapping by ``stride``
        tokens) as extra rows. ``pad_to``: a length, or lengths of which the smallest that fits
        is taken; None pads to the longest row. A single str or tuple is a batch of one.
        """
        buckets = sorted({pad_to} if isinstance(pad_to, int) else set(pad_to or ()))
        if truncation and max_length is None and buckets:
            max_length = min(x for x in (self.model_max_length, buckets[-1]) if x)
        rows = self.encode_rows(texts, add_special_tokens=add_special_tokens, truncation=truncation,
                                max_length=max_length, stride=stride, return_overflow=return_overflow)
        pad_id = next((i for i in (self.pad_token_id, self.eos_token_id) if i is not None), 0)
        arrays = pad_rows(rows, buckets, pad_id, padding_side or self.padding_side)
        return Encoded(**arrays, overflow_to_sample=np.asarray([r.sample for r in rows], dtype=np.int64))

    def encode_rows(
        self,
        texts: TextInput | Sequence[TextInput],
        *,
        add_special_tokens: bool = True,
        truncation: bool | str = True,
        max_length: int | None = None,
        stride: int = 0,
        return_overflow: bool = False,
    ) -> list[TokenRow]:
        """The rows of :meth:`encode`, unpadded: each a :class:`TokenRow` with the index of its text
        (``sample``). Options as :meth:`encode`; a truncated text with ``return_overflow`` gives its
        overflowing windows as more rows of the same ``sample``.

        >>> tok = Tokenizer.from_repo("Xenova/all-MiniLM-L6-v2")
        >>> [len(r) for r in tok.encode_rows(["a b", "c"])]
        [4, 3]
        """
        items = validate_texts(texts)
        if truncation and max_length is None:
            max_length = self.model_max_length
        strategy = _TRUNCATION.get(truncation) if truncation else None
        if truncation and strategy is None:
            raise ValueError(f"truncation must be a bool or one of {sorted(set(_TRUNCATION.values()))}")
        backend = self._backend_for(strategy if max_length else None, max_length, stride)
        cut = (strategy, max_length, stride) if strategy and max_length else None
        encodings = self._encode_native(backend, items, add_special_tokens, cut)
        rows = []
        for index, encoding in enumerate(encodings):
            for row in [encoding, *encoding.overflowing] if return_overflow else [encoding]:
                rows.append(TokenRow.of(row, index))
        char_to_byte_offsets(rows, items)
        return rows

    def encode_words(self, words: Sequence[str], *, max_length: int | None = None) -> tokenizers.Encoding:
        """One text given as its words (transformers' ``is_split_into_words=True``), with special tokens and cut
        to ``max_length`` tokens when given; ``.ids`` and ``.word_ids`` (each token's word, None for specials).

        >>> tok = Tokenizer.from_repo("Xenova/all-MiniLM-L6-v2")
        >>> tok.encode_words(["Hello", "there"]).word_ids
        [None, 0, 1, None]
        """
        backend = self._backend_for("longest_first" if max_length else None, max_length, 0)
        try:
            return backend.encode(list(words), is_pretokenized=True)
        except STOPPING:
            raise
        except BaseException as error:
            raise ValueError(f"the tokenizer failed on {len(words)} words ({type(error).__name__}: "
                             f"{native_message(error)})") from error

    def _encode_native(self, backend: tokenizers.Tokenizer, items: list[TextInput], add_special_tokens: bool,
                       cut: tuple[str, int, int] | None) -> list[tokenizers.Encoding]:
        """``backend.encode_batch``, whose errors and panics become a ValueError naming the input.

        tokenizers panics (pyo3's ``PanicException``, a BaseException that ``except Exception`` misses)
        when a pair's untruncated text leaves no more room than ``stride`` in ``max_length``; the
        input at fault is found by encoding each alone (only after a failure).
        """
        try:
            return backend.encode_batch(items, add_special_tokens=add_special_tokens)
        except STOPPING:
            raise
        except BaseException as error:
            cause = error
        for index, item in enumerate(items):
            try:
                backend.encode_batch([item], add_special_tokens=add_special_tokens)
            except STOPPING:
                raise
            except BaseException as error:
                raise ValueError(self._encode_failure(index, item, error, add_special_tokens, cut)) from error
        raise ValueError(f"the tokenizer failed on a batch of {len(items)} texts, though on none of them alone "
                         f"({type(cause).__name__}: {native_message(cause)})") from cause

    def _encode_failure(self, index: int, item: TextInput, error: BaseException, add_special_tokens: bool,
                        cut: tuple[str, int, int] | None) -> str:
        """What went wrong with one input, and what to change."""
        said = f"{type(error).__name__}: {native_message(error)}"
        kept = {"only_first": 1, "only_second": 0}.get(cut[0]) if cut and isinstance(item, tuple) else None
        if kept is None:
            return f"input {index}: the tokenizer failed on it ({said})"
        _, max_length, stride = cut
        special = self.backend.num_special_tokens_to_add(True) if add_special_tokens else 0
        taken = len(self.backend.encode(item[kept], add_special_tokens=False).ids) + special
        which = ("first", "second")[kept]
        left = ("leaving none for the other text" if taken >= max_length else
                f"leaving {max_length - taken}, which must be more than the stride of {stride}")
        return (f"input {index}: the {which} text of the pair is not truncated, and with the special tokens it "
                f"takes {taken} of the {max_length} tokens of a window, {left}; shorten that text, lower the "
                f"stride or raise max_length ({said})")

    def _backend_for(self, strategy: str | None, max_length: int | None, stride: int) -> tokenizers.Tokenizer:
        """The backend configured for one truncation setting (a cached copy: calls may run concurrently)."""
        if strategy is None:
            return self.backend
        key = (strategy, max_length, stride, self.truncation_side)
        with self._lock:
            if key not in self._clones:
                clone = tokenizers.Tokenizer.from_str(self.backend.to_str())
                clone.enable_truncation(
                    max_length, stride=stride, strategy=strategy, direction=self.truncation_side
                )
                self._clones[key] = clone
            return self._clones[key]


def _read_backend(path: Path) -> tokenizers.Tokenizer:
    """tokenizer.json; a MalformedFileError naming it when ``tokenizers`` cannot read it (it raises a bare
    ``Exception``: bad JSON, or JSON that is not a tokenizer)."""
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as error:
        raise MalformedFileError(f"{path} is not a tokenizer.json that the tokenizers library can read: "
                                 f"{error}") from error


def _config_template(config: dict) -> str | dict | None:
    template = config.get("chat_template")
    if isinstance(template, list):
        template = {t["name"]: t["template"] for t in template}
    return template


# transformers' ``clean_up_tokenization``, replaced in this order (a later token may remove a space
# already decoded: generation/streaming.py holds such text back)
CLEANUP_REPLACEMENTS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                        (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))  # fmt: skip


def _clean_up_tokenization(text: str) -> str:
    for before, after in CLEANUP_REPLACEMENTS:
        text = text.replace(before, after)
    return text
