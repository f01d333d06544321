"""Whisper's text: windows of generated token ids -> ``{"text", "chunks"}`` as transformers' ASR pipeline.

The numpy/pure-Python equivalent of transformers 4.57.6 ``_decode_asr`` (tokenization_whisper.py), which the
automatic-speech-recognition pipeline's postprocess calls for Whisper: windows of audio (chunked with strides,
or one long-form sequence of segments) are merged by their longest common token sequence, split into segments
at timestamp tokens, and with word timestamps collated into words.

Signatures (what the Whisper recognizer calls)::

    decode_asr(tokenizer, windows, *, return_timestamps=False, return_language=False,
               time_precision=0.02, language=None, segment_size=1500) -> dict
        windows: one dict per window of audio, in order:
            {"tokens": 1-D ids (the generated sequence, with its special and timestamp tokens; a (1, n)
                       array is taken as (n,)),
             "stride": (chunk_s, left_s, right_s)  # only for chunked audio: the window's length and strides
                       in SECONDS, as the pipeline computes them: samples / sampling_rate (Python floats),
             "token_timestamps": 1-D, the start time of each token of "tokens" (float32, as
                       whisper_words.token_timestamps gives; a row padded past them, as a batch's, is
                       fine up to its last text token): needed for return_timestamps="word"}
        return_timestamps: False, True (segments) or "word"
        -> {"text": str} plus "chunks" when return_timestamps or return_language:
           [{"text", "timestamp": (start, end)}] (segments or words; end may be None), each with
           "language" when return_language.
    compute_offsets(tokenizer, token_ids, time_precision=0.02, segment_size=1500) -> list[dict]
        the segments of one sequence with timestamp tokens, as ``tokenizer.decode(ids, output_offsets=True)``.
    longest_common_sequence(sequences, token_timestamp_sequences=None)
    collate_word_timestamps(tokenizer, tokens, token_timestamps, language, return_language) -> list[dict]
    combine_tokens_into_words(tokenizer, tokens, language=None) -> (words, word_tokens, token_indices)

``tokenizer`` is transmuter_mlx's :class:`~transmuter_mlx.tokenizer.Tokenizer` or a transformers
WhisperTokenizer(Fast): what is used is ``decode(ids, skip_special_tokens=False)``, ``all_special_ids``,
``eos_token_id``, and ``token_to_id`` (ours) or ``convert_tokens_to_ids`` (transformers').
``time_precision`` is the feature extractor's ``chunk_length`` / the config's ``max_source_positions`` (0.02).
Results equal transformers' exactly, with one exception: where its word split fails (an IndexError when
clean-up made the text shorter than its parts before a character cut across tokens), ours goes on, the cut
character joining the word.

>>> longest_common_sequence([[1, 2, 3, 4], [3, 4, 5]])   # two windows' tokens, overlapping in audio
[1, 2, 3, 4, 5]
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .whisper_languages import LANGUAGES

__all__ = ["LANGUAGES", "collate_word_timestamps", "combine_tokens_into_words", "compute_offsets", "decode_asr",
           "longest_common_sequence"]

#: languages written without spaces: their words are split at whole unicode characters
NO_SPACE_LANGUAGES = frozenset({"chinese", "japanese", "thai", "lao", "myanmar", "cantonese"})
PREPEND_PUNCTUATIONS = "\"'“¡¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
_TIMESTAMP_TEXT = re.compile(r"<\|(\d+\.\d+)\|>")  # a timestamp token's text, removed from decoded text


class WhisperTokens:
    """What the decoding needs of a tokenizer (ours or transformers'), read once: the ids of Whisper's
    control tokens, the special ids, and ``decode`` as transformers' WhisperTokenizerFast decodes.

    Any object with ``decode(ids, skip_special_tokens=False)``, ``all_special_ids``, ``eos_token_id`` and
    ``token_to_id(str)`` or ``convert_tokens_to_ids(str)`` serves.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        to_id = getattr(tokenizer, "token_to_id", None) or getattr(tokenizer, "convert_tokens_to_ids", None)
        if to_id is None or not hasattr(tokenizer, "decode") or not hasattr(tokenizer, "all_special_ids"):
            raise TypeError(f"tokenizer: expected a Whisper tokenizer (decode, all_special_ids, token_to_id), "
                            f"got {type(tokenizer).__name__}")
        ids = {}
        for name in ("<|notimestamps|>", "<|startofprev|>", "<|startoftranscript|>"):
            value = to_id(name)
            if value is None or value == getattr(tokenizer, "unk_token_id", None):
                raise ValueError(f"tokenizer: not a Whisper tokenizer, it has no {name} token")
            ids[name] = int(value)
        #: the first timestamp token ("<|0.00|>"): every id from it on is a timestamp
        self.timestamp_begin = ids["<|notimestamps|>"] + 1
        self.prompt_id = ids["<|startofprev|>"]
        self.start_id = ids["<|startoftranscript|>"]
        self.special_ids = frozenset(int(i) for i in tokenizer.all_special_ids)
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos_id = int(eos) if eos is not None else self.start_id - 1
        #: the tokenizer's own language (transformers' ``tokenizer.language``), else None
        self.language: str | None = getattr(tokenizer, "language", None)
        self._single: dict[int, str] = {}

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ids with special tokens kept and timestamp tokens removed (``tokenizer.decode(ids)``)."""
        text = self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)
        return _TIMESTAMP_TEXT.sub("", text)

    def language_of(self, token: int) -> str | None:
        """The language name of a special token ("<|fr|>" -> "french"), None for other special tokens."""
        text = self._single.get(token)
        if text is None:
            text = self._single[token] = self.decode([token])
        return LANGUAGES.get(text[2:-2])  # without the outer "<|" "|>"

    def strip_prompt(self, ids: list[int]) -> list[int]:
        """Without a leading "<|startofprev|> prompt": from its "<|startoftranscript|>" on (none: empty)."""
        if ids and ids[0] == self.prompt_id:
            return ids[ids.index(self.start_id):] if self.start_id in ids else []
        return ids


def _whisper_tokens(tokenizer: Any) -> WhisperTokens:
    return tokenizer if isinstance(tokenizer, WhisperTokens) else WhisperTokens(tokenizer)


def _ids(value: Any, what: str) -> list[int]:
    """A window's 1-D integer ids as a list (a (1, n) array is taken as (n,))."""
    array = np.asarray(value)
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D sequence of token ids, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{what}: token ids must be integers, got {array.dtype}")
    return [int(i) for i in array.tolist()]


def _times(value: Any, what: str) -> list[float]:
    """A window's 1-D token timestamps as Python floats of their own precision (float32 as transformers')."""
    array = np.asarray(value)
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.number)):
        raise ValueError(f"{what}: expected a 1-D sequence of numbers, got shape {array.shape} {array.dtype}")
    return array.tolist()


def _stride(value: Any, what: str) -> tuple[float, float, float]:
    try:
        chunk_len, left, right = value
        return chunk_len, left, right
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected (chunk_s, left_s, right_s), got {value!r}") from None


def decode_asr(
    tokenizer: Any,
    windows: Sequence[Mapping[str, Any]],
    *,
    return_timestamps: bool | str = False,
    return_language: bool = False,
    time_precision: float = 0.02,
    language: str | None = None,
    segment_size: int = 1500,
) -> dict[str, Any]:
    """The pipeline result of Whisper's windows: ``{"text"}`` plus ``"chunks"`` (segments, or words with
    ``return_timestamps="word"``) when ``return_timestamps`` or ``return_language`` is set. See the module
    docstring for the windows; ``language``: the language of word splitting when no language token was
    generated (transformers' ``tokenizer.language``; None: english).
    """
    if return_timestamps not in (False, True, "word", None):
        raise ValueError(f"return_timestamps must be False, True or 'word', got {return_timestamps!r}")
    if isinstance(windows, Mapping) or not isinstance(windows, Sequence):
        raise TypeError(f"windows: expected a list of dicts (one per window), got {type(windows).__name__}")
    tok = _whisper_tokens(tokenizer)
    if language is not None and tok.language is None:
        tok = copy.copy(tok)
        tok.language = language
    words = return_timestamps == "word"
    timestamp_begin = tok.timestamp_begin
    last_language = None

    def new_chunk() -> dict[str, Any]:
        return {"language": last_language, "timestamp": [None, None], "text": ""}

    # The state machine of transformers' _decode_asr, kept step for step: the same floats in the same order
    # (its timestamps are compared for equality), the same quirks (``skip`` carries over windows).
    chunks: list[dict[str, Any]] = []
    chunk = new_chunk()
    time_offset = 0.0
    previous_tokens: list[list[int]] = []
    previous_token_timestamps: list[list[tuple[float, float]]] = []
    skip = False
    right_stride_start = None

    for index, output in enumerate(windows):
        if not isinstance(output, Mapping) or "tokens" not in output:
            raise ValueError(f"windows[{index}]: expected a dict with 'tokens', got {type(output).__name__}")
        token_ids = tok.strip_prompt(_ids(output["tokens"], f"windows[{index}]['tokens']"))
        token_timestamps: list[float] = []
        if words:
            if output.get("token_timestamps") is None:
                raise ValueError(f"windows[{index}]: return_timestamps='word' needs its 'token_timestamps'")
            token_timestamps = _times(output["token_timestamps"], f"windows[{index}]['token_timestamps']")
            # the tokens of a batch may be padded past the timestamps (transformers' pipeline): only those of
            # text tokens are read
            last_text = max((i for i, t in enumerate(token_ids)
                             if t < tok.timestamp_begin and t not in tok.special_ids), default=-1)
            if last_text >= len(token_timestamps):
                raise ValueError(f"windows[{index}]: {len(token_timestamps)} token_timestamps for tokens whose "
                                 f"text token {last_text} needs its own")

        last_timestamp = None
        first_timestamp: float = timestamp_begin
        # long-form: one window holds several segments, each with timestamps from 0 again
        cur_max_timestamp = 0.0
        prev_segments_len = 0.0
        penultimate_timestamp = 0.0

        stride = output.get("stride")
        if stride is not None:
            chunk_len, stride_left, stride_right = _stride(stride, f"windows[{index}]['stride']")
            time_offset -= stride_left
            right_stride_start = chunk_len - stride_right
            # timestamps inside the strides are not split on: they are resolved by the merge
            if stride_left:
                first_timestamp = stride_left / time_precision + timestamp_begin
            if stride_right:
                for token in reversed(token_ids):
                    if token >= timestamp_begin:
                        # several may fall in the right stride, but the last one is always skipped
                        if (last_timestamp is not None
                                and (token - timestamp_begin) * time_precision < right_stride_start):
                            break
                        last_timestamp = token

        current_tokens: list[int] = []
        current_token_timestamps: list[tuple[float, float]] = []
        for i, token in enumerate(token_ids):
            if token in tok.special_ids:
                found = tok.language_of(token)
                if found is not None:
                    if last_language and found != last_language and not return_timestamps:
                        previous_tokens.append(current_tokens)
                        resolved = longest_common_sequence(previous_tokens)
                        chunk["text"] = tok.decode(resolved)
                        chunks.append(chunk)
                        previous_tokens = []
                        current_tokens = []
                        chunk = new_chunk()
                    chunk["language"] = found
                    last_language = found
            elif token >= timestamp_begin:
                timestamp = float((token - timestamp_begin) * time_precision)
                if timestamp < cur_max_timestamp:
                    # the next segment has started
                    last_was_single_ending = i >= 2 and not (
                        token_ids[i - 1] >= timestamp_begin and token_ids[i - 2] >= timestamp_begin
                    )
                    if last_was_single_ending:
                        prev_segments_len += time_precision * segment_size
                    else:
                        cur_max_timestamp = penultimate_timestamp
                        prev_segments_len += penultimate_timestamp
                penultimate_timestamp = cur_max_timestamp
                cur_max_timestamp = timestamp

                time = (token - timestamp_begin) * time_precision + time_offset + prev_segments_len
                time = round(time, 2)
                if last_timestamp and token >= last_timestamp:
                    # in the right stride: skipped with the next one (timestamps come in pairs)
                    skip = True
                elif skip or (previous_tokens and token < first_timestamp):
                    skip = False
                elif chunk["timestamp"][0] is None:
                    chunk["timestamp"][0] = time
                elif time == chunk["timestamp"][0]:
                    pass  # a repeated start (a model glitch): it stays a start
                else:
                    chunk["timestamp"][1] = time
                    previous_tokens.append(current_tokens)
                    if words:
                        previous_token_timestamps.append(current_token_timestamps)
                    resolved, resolved_times = longest_common_sequence(previous_tokens, previous_token_timestamps)
                    chunk["text"] = tok.decode(resolved)
                    if words:
                        chunk["words"] = collate_word_timestamps(tok, resolved, resolved_times, last_language,
                                                                 return_language)
                    chunks.append(chunk)
                    previous_tokens = []
                    current_tokens = []
                    previous_token_timestamps = []
                    current_token_timestamps = []
                    chunk = new_chunk()
            else:
                current_tokens.append(token)
                if words:
                    start_time = round(0.0 + time_offset, 2) if i == 0 else round(
                        token_timestamps[i - 1] + time_offset, 2)
                    end_time = round(token_timestamps[i] + time_offset, 2)
                    current_token_timestamps.append((start_time, end_time))

        if stride is not None:
            time_offset += chunk_len - stride_right

        if current_tokens:
            previous_tokens.append(current_tokens)
            if words:
                previous_token_timestamps.append(current_token_timestamps)
        elif not any(p for p in previous_tokens):
            chunk = new_chunk()
            previous_tokens = []
            current_tokens = []
            previous_token_timestamps = []
            current_token_timestamps = []

    if previous_tokens:
        # no closing timestamp (audio cut in a word), or no timestamps at all
        resolved, resolved_times = longest_common_sequence(previous_tokens, previous_token_timestamps)
        chunk["text"] = tok.decode(resolved)
        if words:
            chunk["words"] = collate_word_timestamps(tok, resolved, resolved_times, last_language, return_language)
        chunks.append(chunk)

    result: dict[str, Any] = {"text": "".join(c["text"] for c in chunks)}
    if return_timestamps or return_language:
        for c in chunks:
            if not return_timestamps:
                c.pop("timestamp")
            else:
                c["timestamp"] = tuple(c["timestamp"])
            if not return_language:
                c.pop("language")
        result["chunks"] = [w for c in chunks for w in c["words"]] if words else chunks
    return result


def longest_common_sequence(
    sequences: Sequence[Sequence[int]],
    token_timestamp_sequences: Sequence[Sequence[Any]] | None = None,
) -> Any:
    """Windows' token sequences merged into one at their best overlap (transformers'
    ``_find_longest_common_sequence``): the tokens; with ``token_timestamp_sequences`` (None: not given)
    ``(tokens, timestamps)``, the timestamps cut alike and a match needing ordered timestamps.

    Overlaps are scored ``matches / length + length / 10000`` (long perfect matches win); in the overlap the
    left window is trusted for its first half and the right window for the second.
    """
    left_sequence = list(sequences[0])
    left_length = len(left_sequence)
    total_sequence: list[int] = []
    with_times = bool(token_timestamp_sequences)
    if with_times:
        left_times = list(token_timestamp_sequences[0])
        total_times: list[Any] = []

    for seq_idx, right_sequence in enumerate(sequences[1:]):
        right_sequence = list(right_sequence)
        best = 0.0
        best_indices = (left_length, left_length, 0, 0)
        right_length = len(right_sequence)
        if with_times:
            right_times = token_timestamp_sequences[seq_idx + 1]
        for i in range(1, left_length + right_length):
            eps = i / 10000.0  # favours long perfect matches
            left_start = max(0, left_length - i)
            left_stop = min(left_length, left_length + right_length - i)
            right_start = max(0, i - left_length)
            right_stop = min(right_length, i)
            left = left_sequence[left_start:left_stop]
            right = right_sequence[right_start:right_stop]
            if with_times:
                # matching tokens count only when their timestamps are in order
                matches = sum(1 for k, token in enumerate(left) if token == right[k]
                              and left_times[left_start + k] <= right_times[right_start + k])
            else:
                matches = sum(1 for a, b in zip(left, right) if a == b)
            matching = matches / i + eps
            if matches > 1 and matching > best:
                best = matching
                best_indices = (left_start, left_stop, right_start, right_stop)

        left_start, left_stop, right_start, right_stop = best_indices
        left_mid = (left_stop + left_start) // 2
        right_mid = (right_stop + right_start) // 2
        total_sequence.extend(left_sequence[:left_mid])
        left_sequence = right_sequence[right_mid:]
        left_length = len(left_sequence)
        if with_times:
            total_times.extend(left_times[:left_mid])
            left_times = list(right_times[right_mid:])

    total_sequence.extend(left_sequence)
    if token_timestamp_sequences is None:
        return total_sequence
    if with_times:
        total_times.extend(left_times)
        return total_sequence, total_times
    return total_sequence, []


def collate_word_timestamps(
    tokenizer: Any,
    tokens: Sequence[int],
    token_timestamps: Sequence[tuple[float, float]],
    language: str | None,
    return_language: bool,
) -> list[dict[str, Any]]:
    """Words of text tokens, each ``{"text", "timestamp": (start of its first token, end of its last)}``
    (+ ``"language"``), as transformers' ``_collate_word_timestamps``."""
    words, _, token_indices = combine_tokens_into_words(tokenizer, tokens, language)
    extra = {"language": language} if return_language else {}
    return [{"text": word, "timestamp": (token_timestamps[indices[0]][0], token_timestamps[indices[-1]][1]),
             **extra} for word, indices in zip(words, token_indices)]


def combine_tokens_into_words(
    tokenizer: Any,
    tokens: Sequence[int],
    language: str | None = None,
    prepend_punctuations: str = PREPEND_PUNCTUATIONS,
    append_punctuations: str = APPEND_PUNCTUATIONS,
) -> tuple[list[str], list[list[int]], list[list[int]]]:
    """Tokens grouped into words: (words, their tokens, their token indices). Languages without spaces split
    at whole unicode characters, others at spaces and punctuation; punctuation then joins its word."""
    tok = _whisper_tokens(tokenizer)
    language = language or tok.language or "english"
    tokens = [int(t) for t in tokens]
    if language in NO_SPACE_LANGUAGES:
        words, word_tokens, token_indices = _split_tokens_on_unicode(tok, tokens)
    else:
        words, word_tokens, token_indices = _split_tokens_on_spaces(tok, tokens)
    _merge_punctuations(words, word_tokens, token_indices, prepend_punctuations, append_punctuations)
    return words, word_tokens, token_indices


def _split_tokens_on_unicode(tok: WhisperTokens, tokens: list[int]):
    """Split where the tokens so far decode to whole unicode characters (a byte-level BPE token may hold
    part of a character: its text then holds the replacement character U+FFFD)."""
    decoded_full = tok.decode(tokens)
    replacement_char = "\ufffd"
    words: list[str] = []
    word_tokens: list[list[int]] = []
    token_indices: list[list[int]] = []
    current_tokens: list[int] = []
    current_indices: list[int] = []
    unicode_offset = 0
    for token_idx, token in enumerate(tokens):
        current_tokens.append(token)
        current_indices.append(token_idx)
        decoded = tok.decode(current_tokens)
        if replacement_char in decoded:
            # a U+FFFD that the whole text holds too is a real one, not a cut character; past the whole
            # text's end (clean-up, " '" -> "'", made it shorter than its parts) transformers fails with an
            # IndexError: here the character counts as cut and the word goes on
            at = unicode_offset + decoded.index(replacement_char)
            whole = at < len(decoded_full) and decoded_full[at] == replacement_char
        else:
            whole = True
        if whole:
            words.append(decoded)
            word_tokens.append(current_tokens)
            token_indices.append(current_indices)
            current_tokens = []
            current_indices = []
            unicode_offset += len(decoded)
    return words, word_tokens, token_indices


def _split_tokens_on_spaces(tok: WhisperTokens, tokens: list[int]):
    """Words start at a special token, a leading space or a punctuation mark."""
    subwords, subword_tokens_list, subword_indices_list = _split_tokens_on_unicode(tok, tokens)
    words: list[str] = []
    word_tokens: list[list[int]] = []
    token_indices: list[list[int]] = []
    for subword, subword_tokens, subword_indices in zip(subwords, subword_tokens_list, subword_indices_list):
        special = subword_tokens[0] >= tok.eos_id
        with_space = subword.startswith(" ")
        punctuation = subword.strip() in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
        if special or with_space or punctuation or len(words) == 0:
            words.append(subword)
            word_tokens.append(subword_tokens)
            token_indices.append(subword_indices)
        else:
            words[-1] = words[-1] + subword
            word_tokens[-1].extend(subword_tokens)
            token_indices[-1].extend(subword_indices)
    return words, word_tokens, token_indices


def _merge_punctuations(words, tokens, indices, prepended: str, appended: str) -> None:
    """Leading punctuation joins the next word, trailing punctuation the previous one (in place)."""
    i = len(words) - 2
    j = len(words) - 1
    while i >= 0:
        if words[i].startswith(" ") and words[i].strip() in prepended:
            words[j] = words[i] + words[j]
            tokens[j] = tokens[i] + tokens[j]
            indices[j] = indices[i] + indices[j]
            words[i] = ""
            tokens[i] = []
            indices[i] = []
        else:
            j = i
        i -= 1
    i = 0
    j = 1
    while j < len(words):
        if not words[i].endswith(" ") and words[j] in appended:
            words[i] += words[j]
            tokens[i] += tokens[j]
            indices[i] += indices[j]
            words[j] = ""
            tokens[j] = []
            indices[j] = []
        else:
            i = j
        j += 1
    words[:] = [word for word in words if word]
    tokens[:] = [token for token in tokens if token]
    indices[:] = [idx for idx in indices if idx]


def compute_offsets(
    tokenizer: Any, token_ids: Sequence[int] | np.ndarray, time_precision: float = 0.02, segment_size: int = 1500
) -> list[dict[str, Any]]:
    """The segments of one generated sequence: ``[{"text", "timestamp": (start, end)}]`` between its
    timestamp tokens, later segments shifted past earlier ones (long-form), as transformers'
    ``tokenizer.decode(ids, output_offsets=True)["offsets"]``."""
    tok = _whisper_tokens(tokenizer)
    ids = np.asarray(_ids(token_ids, "token_ids"), dtype=np.int64)
    timestamp_begin = tok.timestamp_begin
    timestamp_tokens = ids >= timestamp_begin
    consecutive = np.where(timestamp_tokens[:-1] & timestamp_tokens[1:])[0] + 1
    if consecutive.shape[0] == 0 and timestamp_tokens.sum() <= 1:
        return []  # no timestamps, or none consecutive
    if np.where(timestamp_tokens)[0][-1] + 1 not in consecutive:
        consecutive = np.append(consecutive, np.where(timestamp_tokens)[0][-1] + 1)
    offsets = []
    last_slice = np.where(timestamp_tokens)[0][0]
    cur_max_timestamp = 0
    prev_segments_len = 0
    for current_slice in consecutive:
        sliced = ids[last_slice:current_slice]
        if len(sliced) > 1:
            start_position = int(sliced[0]) - timestamp_begin
            end_position = int(sliced[-1]) - timestamp_begin
            if start_position < cur_max_timestamp:
                # the next segment has started
                is_single_ending = last_slice >= 2 and not (
                    ids[last_slice - 2] >= timestamp_begin and ids[last_slice - 1] >= timestamp_begin
                )
                prev_segments_len += segment_size if is_single_ending else cur_max_timestamp
            cur_max_timestamp = end_position
            offsets.append({
                "text": tok.decode(sliced.tolist()),
                "timestamp": (start_position * time_precision + prev_segments_len * time_precision,
                              end_position * time_precision + prev_segments_len * time_precision),
            })
        last_slice = current_slice
    return offsets
