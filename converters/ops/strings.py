"""String ops and TfIdfVectorizer. Strings are numpy object arrays of ``str``, so these run on the host."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .registry import register


def _map_str(fn: Any, x: np.ndarray, dtype: Any = object) -> np.ndarray:
    out = np.empty(x.shape, dtype=dtype)
    for idx, s in np.ndenumerate(x):
        out[idx] = fn(s)
    return out


@register("StringConcat", 20, host=True)
def string_concat_20(B: Any, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    x, y = np.broadcast_arrays(np.asarray(X, dtype=object), np.asarray(Y, dtype=object))
    out = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        out[idx] = str(x[idx]) + str(y[idx])
    return out


@register("StringSplit", 20, host=True)
def string_split_20(
    B: Any, X: np.ndarray, *, delimiter: str | None = None, maxsplit: int | None = None
) -> tuple:
    """Split each string; ``Y`` pads every row to the longest split with "", ``Z`` counts the parts."""
    sep = delimiter or None  # unset or "": runs of whitespace, as str.split()
    limit = -1 if maxsplit is None else maxsplit
    parts = [str(s).split(sep, limit) for s in np.asarray(X).reshape(-1)]
    width = max((len(p) for p in parts), default=0)
    Y = np.full((len(parts), width), "", dtype=object)
    for i, p in enumerate(parts):
        Y[i, : len(p)] = p
    Z = np.array([len(p) for p in parts], dtype=np.int64)
    shape = np.shape(X)
    return Y.reshape(*shape, width), Z.reshape(shape)


@register("RegexFullMatch", 20, host=True)
def regex_full_match_20(B: Any, X: np.ndarray, *, pattern: str) -> np.ndarray:
    regex = re.compile(pattern)
    return _map_str(lambda s: regex.fullmatch(str(s)) is not None, np.asarray(X), np.bool_)


@register("StringNormalizer", 10, host=True)
def string_normalizer_10(B: Any, X: np.ndarray, *, case_change_action: str = "NONE", is_case_sensitive: int = 0,
                         locale: str = "", stopwords: list[str] | None = None) -> np.ndarray:  # fmt: skip
    """Drop stopwords, then change case. Input [C] or [1, C]; an all-stopword input gives [""]."""
    x = np.asarray(X, dtype=object)
    words = [str(s) for s in x.reshape(-1)]
    if stopwords:
        if is_case_sensitive:
            stop = set(stopwords)
            words = [w for w in words if w not in stop]
        else:
            stop = {s.lower() for s in stopwords}
            words = [w for w in words if w.lower() not in stop]
    if case_change_action == "LOWER":
        words = [w.lower() for w in words]
    elif case_change_action == "UPPER":
        words = [w.upper() for w in words]
    elif case_change_action != "NONE":
        raise ValueError(f"unknown case_change_action {case_change_action!r}")
    out = np.array(words or [""], dtype=object)
    return out.reshape(1, -1) if x.ndim == 2 else out


@register("TfIdfVectorizer", 9, host=True)
def tfidf_vectorizer_9(B: Any, X: np.ndarray, *, max_gram_length: int, min_gram_length: int, max_skip_count: int,
                       mode: str, ngram_counts: list[int], ngram_indexes: list[int], pool_int64s: list[int] | None = None,
                       pool_strings: list[str] | None = None, weights: list[float] | None = None) -> np.ndarray:  # fmt: skip
    """Count the pool's n-grams in each row (skipping up to ``max_skip_count`` between items)."""
    pool = list(pool_strings) if pool_strings is not None else [int(v) for v in pool_int64s or []]
    table: dict[tuple, int] = {}
    bounds = list(ngram_counts) + [len(pool)]
    k = 0
    for n in range(1, len(ngram_counts) + 1):
        for start in range(bounds[n - 1], bounds[n], n):
            table[tuple(pool[start : start + n])] = ngram_indexes[k]
            k += 1
    width = max(ngram_indexes) + 1 if len(ngram_indexes) else 0
    x = np.asarray(X)
    rows = x.reshape(1, -1) if x.ndim <= 1 else x
    out = np.zeros((rows.shape[0], width), dtype=np.float32)
    for r, row in enumerate(rows):
        items = [str(v) for v in row] if pool_strings is not None else [int(v) for v in row]
        for n in range(min_gram_length, max_gram_length + 1):
            for skip in range(max_skip_count + 1 if n > 1 else 1):  # a 1-gram has no gaps
                step = skip + 1
                for i in range(len(items) - (n - 1) * step):
                    j = table.get(tuple(items[i : i + (n - 1) * step + 1 : step]))
                    if j is not None:
                        out[r, j] += 1
    w = np.ones(width, np.float32)
    if weights is not None:  # weights follow the pool's n-gram order, like ngram_indexes
        w[np.asarray(ngram_indexes)] = np.asarray(weights, np.float32)
    if mode == "IDF":
        out = (out > 0).astype(np.float32) * w
    elif mode == "TFIDF":
        out = out * w
    elif mode != "TF":
        raise ValueError(f"unknown mode {mode!r}")
    return out.reshape(-1) if x.ndim <= 1 else out
