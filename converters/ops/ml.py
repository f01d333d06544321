"""Classical-ML ops of the ``ai.onnx.ml`` domain that the node suite exercises."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .registry import IndexBound, register

ML = "ai.onnx.ml"


@register("Binarizer", 1, domain=ML)
def binarizer_1(B: Any, X: Any, *, threshold: float = 0.0) -> Any:
    dtype = B.dtype(X)
    return B.astype(B.greater(X, B.full((), threshold, dtype)), dtype)


def _column_bound(B: Any, args: list[Any], attrs: dict[str, Any]) -> list[IndexBound]:
    n = B.shape(args[0])[-1]
    return [IndexBound(1, -n, n, f"the {n} columns of the last axis")]


@register("ArrayFeatureExtractor", 1, domain=ML, index_bounds=_column_bound)
def array_feature_extractor_1(B: Any, X: Any, Y: Any) -> Any:
    """The columns ``Y`` of the last axis; a 1-D ``X`` gives a [1, len(Y)] row."""
    shape = B.shape(X)
    out = B.take(X, B.reshape(Y, (-1,)), -1)
    return B.reshape(out, (1, -1)) if len(shape) == 1 else out


def _lookup(x: np.ndarray, keys: list[Any], values: np.ndarray, default: Any) -> np.ndarray:
    table = dict(zip((_key(k) for k in keys), values.tolist()))
    flat = [table.get(_key(k), default) for k in x.reshape(-1).tolist()]
    return np.array(flat, dtype=values.dtype).reshape(x.shape)


def _key(k: Any) -> Any:
    return "nan" if isinstance(k, float) and math.isnan(k) else k  # NaN keys match NaN


@register("LabelEncoder", 1, domain=ML, host=True)
def label_encoder_1(B: Any, X: np.ndarray, *, classes_strings: list[str] | None = None, default_int64: int = -1,
                    default_string: str = "_Unused") -> np.ndarray:  # fmt: skip
    """Strings to their index in ``classes_strings``, or indices back to strings."""
    classes = list(classes_strings or [])
    if np.asarray(X).dtype == object:
        return _lookup(np.asarray(X), classes, np.arange(len(classes), dtype=np.int64), default_int64)
    return _lookup(np.asarray(X), list(range(len(classes))), np.array(classes, dtype=object), default_string)


@register("LabelEncoder", 2, domain=ML, host=True)
def label_encoder_2(B: Any, X: np.ndarray, *, keys_strings: list[str] | None = None, keys_int64s: list[int] | None = None,
                    keys_floats: list[float] | None = None, values_strings: list[str] | None = None,
                    values_int64s: list[int] | None = None, values_floats: list[float] | None = None,
                    default_string: str = "_Unused", default_int64: int = -1, default_float: float = -0.0,
                    keys_tensor: np.ndarray | None = None, values_tensor: np.ndarray | None = None,
                    default_tensor: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """A key -> value map (v2 lists; v4 adds ``keys_tensor``/``values_tensor``/``default_tensor``)."""
    keys = next(k for k in (keys_tensor, keys_strings, keys_int64s, keys_floats) if k is not None)
    keys = np.asarray(keys).tolist()
    if values_tensor is not None:
        values = np.asarray(values_tensor)
    elif values_strings is not None:
        values = np.array(values_strings, dtype=object)
    elif values_int64s is not None:
        values = np.array(values_int64s, dtype=np.int64)
    else:
        values = np.array(values_floats, dtype=np.float32)
    if default_tensor is not None:
        default = np.asarray(default_tensor).reshape(-1)[0].item()
    else:
        default = {"O": default_string, "i": default_int64}.get(values.dtype.kind, default_float)
    return _lookup(np.asarray(X), keys, values, default)


label_encoder_4 = register("LabelEncoder", 4, domain=ML, host=True)(label_encoder_2)

_MODES = {
    0: np.less_equal, 1: np.less, 2: np.greater_equal, 3: np.greater, 4: np.equal, 5: np.not_equal,
}  # fmt: skip


@register("TreeEnsemble", 5, domain=ML, host=True)
def tree_ensemble_5(B: Any, X: np.ndarray, *, nodes_splits: np.ndarray, nodes_featureids: list[int],
                    nodes_modes: np.ndarray, nodes_truenodeids: list[int], nodes_falsenodeids: list[int],
                    nodes_trueleafs: list[int], nodes_falseleafs: list[int], leaf_targetids: list[int],
                    leaf_weights: np.ndarray, tree_roots: list[int], n_targets: int | None = None,
                    aggregate_function: int = 1, post_transform: int = 0, membership_values: np.ndarray | None = None,
                    nodes_missing_value_tracks_true: list[int] | None = None,
                    nodes_hitrates: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Walk every tree for every row; aggregate the leaf weights per target (sum/avg/min/max)."""
    x = np.asarray(X)
    splits = np.asarray(nodes_splits).astype(x.dtype)
    modes = np.asarray(nodes_modes).reshape(-1).tolist()
    members: dict[int, set[float]] = {}
    groups = _member_groups(membership_values)
    for node, mode in enumerate(modes):
        if mode == 6:
            members[node] = groups[len(members)]
    tracks = nodes_missing_value_tracks_true or [0] * len(modes)
    weights = np.asarray(leaf_weights).astype(np.float64)
    n_targets = n_targets or (max(leaf_targetids) + 1)
    rows = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
    out = np.zeros((rows.shape[0], n_targets), dtype=np.float64)
    for r, row in enumerate(rows):
        acc: list[list[float]] = [[] for _ in range(n_targets)]
        for root in tree_roots:
            node, is_leaf = root, False
            while not is_leaf:
                v = row[nodes_featureids[node]]
                if np.isnan(v) and tracks[node]:
                    go_true = True
                elif modes[node] == 6:
                    go_true = float(v) in members[node]
                else:
                    go_true = bool(_MODES[modes[node]](v, splits[node]))
                node, is_leaf = (
                    (nodes_truenodeids[node], nodes_trueleafs[node])
                    if go_true
                    else (nodes_falsenodeids[node], nodes_falseleafs[node])
                )
            acc[leaf_targetids[node]].append(weights[node])
        for t, vals in enumerate(acc):
            if vals:
                out[r, t] = [np.mean, np.sum, np.min, np.max][aggregate_function](vals)
        if aggregate_function == 0:  # the average is over all trees, even those without this target
            out[r] = np.array([sum(v) for v in acc]) / len(tree_roots)
    return _post_transform(out, post_transform).astype(x.dtype)


def _member_groups(values: np.ndarray | None) -> list[set[float]]:
    groups, current = [], set()
    for v in [] if values is None else np.asarray(values, np.float64).reshape(-1).tolist():
        if math.isnan(v):
            groups.append(current)
            current = set()
        else:
            current.add(v)
    return groups + [current]


def _post_transform(y: np.ndarray, kind: int) -> np.ndarray:
    if kind == 0:
        return y
    if kind == 1:
        e = np.exp(y - y.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if kind == 3:
        return 1 / (1 + np.exp(-y))
    raise NotImplementedError(f"TreeEnsemble post_transform {kind} (only NONE, SOFTMAX and LOGISTIC)")
