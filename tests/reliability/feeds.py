"""Reliability rows: feeds of a loaded model. A bad feed is an ``InputError`` naming the input and what it
expects; a Python nested list of numbers is an array like any other (onnxruntime's result)."""

from __future__ import annotations

import numpy as np

import transmuter_mlx as tm
from tests.reliability import Raises, Returns, case
from tests.reliability.bounds import _bert_feeds, _minilm, _minilm_path, _ort

EXPECTED = r"expected a tensor of int64 \[batch_size, sequence_length\]"


def _call(backend: str, **given) -> dict:
    return _minilm(backend)({**_bert_feeds(), **given})


@case("feeds", "None as a feed", Raises(tm.InputError, r"input 'input_ids' is None; " + EXPECTED))
def _(backend):
    _call(backend, input_ids=None)


@case("feeds", "a ragged list", Raises(tm.InputError, r"input 'input_ids' is not an array .*; " + EXPECTED))
def _(backend):
    _call(backend, input_ids=[[101, 102], [101]])


@case("feeds", "a string", Raises(tm.InputError, r"input 'input_ids' is a str .*; " + EXPECTED))
def _(backend):
    _call(backend, input_ids="hello")


@case("feeds", "floats for token ids", Raises(tm.InputError, r"input 'input_ids' holds float64 values; " + EXPECTED))
def _(backend):
    _call(backend, input_ids=[[101.5, 7592, 2088, 102]])


@case("feeds", "a float32 array for token ids", Raises(tm.InputError, r"'input_ids' has dtype float32, expected int64"))
def _(backend):
    _call(backend, input_ids=np.ones((1, 4), np.float32))


@case("feeds", "a wrong rank", Raises(tm.InputError, r"'input_ids' has rank 1 \(shape \[4\]\), expected rank 2"))
def _(backend):
    _call(backend, input_ids=np.array([101, 7592, 2088, 102]))


@case("feeds", "a missing input", Raises(tm.InputError, r"missing input\(s\) \['token_type_ids'\]; the model takes"))
def _(backend):
    feeds = _bert_feeds()
    del feeds["token_type_ids"]
    _minilm(backend)(feeds)


@case("feeds", "an unknown input", Raises(tm.InputError, r"unknown input\(s\) \['pixel_values'\]"))
def _(backend):
    _call(backend, pixel_values=np.zeros((1, 3)))


@case("feeds", "feeds that are not a mapping", Raises(tm.InputError, r"feeds must be a mapping .* got list"))
def _(backend):
    _minilm(backend)([np.zeros((1, 4), np.int64)])


def _same_as_ort(out: dict, backend: str) -> None:
    expected = _ort(_minilm_path(), _bert_feeds())[0]
    ours = np.asarray(_minilm(backend).backend.to_numpy(out["last_hidden_state"]))
    np.testing.assert_allclose(ours, expected, atol=2e-5)


@case("feeds", "nested Python lists of ints are arrays", Returns(_same_as_ort))
def _(backend):
    return _minilm(backend)({k: v.tolist() for k, v in _bert_feeds().items()})
