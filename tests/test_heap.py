"""converters/heap.py: glibc's heap is trimmed after a planning walk that grew the process, and only then."""

from __future__ import annotations

import numpy as np
import pytest

import transmuter_mlx
from transmuter_mlx.converters import heap


@pytest.fixture
def trims(monkeypatch):
    """The calls of a stand-in ``malloc_trim``, with ``resident()`` reading ``sizes``."""
    calls: list[int] = []
    sizes = {"now": 1 << 30}
    monkeypatch.setattr(heap, "_malloc_trim", lambda: calls.append)
    monkeypatch.setattr(heap, "resident", lambda: sizes["now"])
    return calls, sizes


def test_trim_follows_growth_past_the_threshold(trims):
    calls, sizes = trims
    before = sizes["now"]
    sizes["now"] = before + heap.GROWTH
    assert not heap.release_if_grown(before) and calls == []  # a decoding step's signature: no trim
    sizes["now"] = before + heap.GROWTH + 4096
    assert heap.release_if_grown(before) and calls == [0]
    assert not heap.release_if_grown(None) and calls == [0]  # no measure before (not glibc)


def test_a_model_trims_after_planning_a_signature_that_grew_it(trims, monkeypatch):
    """``Model`` measures around a new signature's planning walk, and not around a call it has planned."""
    from onnx import TensorProto, helper

    calls, sizes = trims
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = transmuter_mlx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), backend="torch")

    def growing() -> int:  # each reading 1 GB more than the last: every planning walk "grew" the process
        sizes["now"] += 1 << 30
        return sizes["now"]

    monkeypatch.setattr(heap, "resident", growing)
    x = np.array([-1.0, 2.0], np.float32)
    np.testing.assert_array_equal(model({"x": x})["y"].numpy(), [0.0, 2.0])
    assert calls == [0]
    model({"x": x})  # the same signature: planned already
    assert calls == [0]
    model({"x": np.ones(3, np.float32)})
    assert calls == [0, 0]


def test_resident_reads_this_process_where_trim_exists():
    if heap._malloc_trim() is None:
        pytest.skip("no malloc_trim in this C library (not glibc): nothing is measured or trimmed")
    block = np.ones(64 << 20, np.uint8)  # 64 MB touched
    assert heap.resident() >= block.nbytes
