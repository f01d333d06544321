"""Entity aggregation of token classification, step for step as transformers' TokenClassificationPipeline.

>>> from transmuter_mlx.pipelines.text_entities import get_tag
>>> get_tag("B-PER"), get_tag("I-LOC"), get_tag("MISC")
(('B', 'PER'), ('I', 'LOC'), ('I', 'MISC'))

Entities carry ``start``/``end`` (UTF-8 byte offsets into the text), ``score`` and the token
string ``word``; ``entity`` (per token) or ``entity_group`` (grouped) is the label.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

STRATEGIES = ("none", "simple", "first", "average", "max")


def gather_pre_entities(
    text: bytes,
    words: list[str],
    scores: np.ndarray,
    offsets: np.ndarray,
    special: np.ndarray,
    unk: np.ndarray,
    has_subword_prefix: bool,
) -> list[dict]:
    """One pre-entity per non-special token: its word, scores, byte offsets, whether it continues a word.

    ``text`` is the UTF-8 text, ``words`` the tokens' strings. Without a WordPiece-style
    continuing-subword prefix, a token continues a word when no space is next to its start.
    """
    pre = []
    for idx, token_scores in enumerate(scores):
        if special[idx]:
            continue
        word = words[idx]
        start, end = int(offsets[idx][0]), int(offsets[idx][1])
        ref = text[start:end].decode("utf-8", errors="replace")
        if has_subword_prefix:
            is_subword = len(word) != len(ref)
        else:
            is_subword = start > 0 and b" " not in text[start - 1 : start + 1]
        if unk[idx]:
            word, is_subword = ref, False
        pre.append(
            {
                "word": word,
                "scores": token_scores,
                "start": start,
                "end": end,
                "index": idx,
                "is_subword": is_subword,
            }
        )
    return pre


def aggregate(pre: list[dict], strategy: str, id2label: Mapping[int, str], to_string: Callable) -> list[dict]:
    """Token entities (``none``), or entities grouped over tokens or words (the other strategies)."""
    if strategy in ("none", "simple"):
        entities = []
        for p in pre:
            idx = int(p["scores"].argmax())
            entities.append(
                {
                    "entity": id2label[idx],
                    "score": p["scores"][idx],
                    "index": p["index"],
                    "word": p["word"],
                    "start": p["start"],
                    "end": p["end"],
                }
            )
    else:
        entities = aggregate_words(pre, strategy, id2label, to_string)
    return entities if strategy == "none" else group_entities(entities, to_string)


def aggregate_word(
    entities: list[dict], strategy: str, id2label: Mapping[int, str], to_string: Callable
) -> dict:
    word = to_string([e["word"] for e in entities])
    if strategy == "first":
        scores = entities[0]["scores"]
    elif strategy == "max":
        scores = max(entities, key=lambda e: e["scores"].max())["scores"]
    elif strategy == "average":
        scores = np.nanmean(np.stack([e["scores"] for e in entities]), axis=0)
    else:
        raise ValueError(f"invalid aggregation_strategy {strategy!r}; expected one of {STRATEGIES}")
    idx = int(scores.argmax())
    return {
        "entity": id2label[idx],
        "score": scores[idx],
        "word": word,
        "start": entities[0]["start"],
        "end": entities[-1]["end"],
    }


def aggregate_words(
    pre: list[dict], strategy: str, id2label: Mapping[int, str], to_string: Callable
) -> list[dict]:
    """Make the tokens of a word agree on one label (``first``, ``average`` or ``max``)."""
    words, group = [], None
    for entity in pre:
        if group is None:
            group = [entity]
        elif entity["is_subword"]:
            group.append(entity)
        else:
            words.append(aggregate_word(group, strategy, id2label, to_string))
            group = [entity]
    if group is not None:
        words.append(aggregate_word(group, strategy, id2label, to_string))
    return words


def get_tag(name: str) -> tuple[str, str]:
    if name.startswith("B-"):
        return "B", name[2:]
    if name.startswith("I-"):
        return "I", name[2:]
    return "I", name


def group_sub_entities(entities: list[dict], to_string: Callable) -> dict:
    return {
        "entity_group": entities[0]["entity"].split("-", 1)[-1],
        "score": np.mean(np.nanmean([e["score"] for e in entities])),
        "word": to_string([e["word"] for e in entities]),
        "start": entities[0]["start"],
        "end": entities[-1]["end"],
    }


def group_entities(entities: list[dict], to_string: Callable) -> list[dict]:
    """Join adjacent entities of one tag (B- starts a new one)."""
    groups, current = [], []
    for entity in entities:
        if not current:
            current.append(entity)
            continue
        bi, tag = get_tag(entity["entity"])
        _, last_tag = get_tag(current[-1]["entity"])
        if tag == last_tag and bi != "B":
            current.append(entity)
        else:
            groups.append(group_sub_entities(current, to_string))
            current = [entity]
    if current:
        groups.append(group_sub_entities(current, to_string))
    return groups
