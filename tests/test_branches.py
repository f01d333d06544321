"""An If on a flag input runs as the steps of the branch it takes (``converters/branches.py``), and the chains inside
a branch are fused like the main graph's (``converters/fusion.py``): against onnxruntime on both backends.

The graph is a merged decoder in small: one If on ``use_cache_branch`` whose branches read the outer graph's
weights (a linear layer, a GELU whose constant is the outer graph's), reuse an outer value's name, output a constant of
their own, compute a constant named alike in both (each flag's replay must hold its own), and hold a second If on the
same flag.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import transmuter_mlx as tm

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
BACKENDS = ("mlx", "torch")
rng = np.random.default_rng(0)
OUTPUTS = ("y", "z", "constant")


def _out(name: str) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, F, None)


def _gelu(x: str, y: str, tag: str) -> list[onnx.NodeProto]:
    """GELU's erf form, its 0.5 the outer graph's ``half`` (the fusion looks it up outside the branch)."""
    return [oh.make_node("Div", [x, "sqrt2"], [f"d_{tag}"]), oh.make_node("Erf", [f"d_{tag}"], [f"e_{tag}"]),
            oh.make_node("Add", [f"e_{tag}", "one"], [f"a_{tag}"]), oh.make_node("Mul", [x, f"a_{tag}"], [f"m_{tag}"]),
            oh.make_node("Mul", [f"m_{tag}", "half"], [y])]


def _branch(tag: str, scale: float) -> onnx.GraphProto:
    inner = oh.make_graph([oh.make_node("Mul", ["x", "x"], [f"sq_{tag}"])], f"inner_{tag}", [], [_out(f"sq_{tag}")])
    inner_other = oh.make_graph([oh.make_node("Neg", ["x"], [f"neg_{tag}"])], f"other_{tag}", [],
                                [_out(f"neg_{tag}")])
    nodes = [oh.make_node("MatMul", ["x", "w"], ["h"]),  # "h": the outer graph's name too
             oh.make_node("Add", ["h", "b"], [f"lin_{tag}"]),
             *_gelu(f"lin_{tag}", f"g_{tag}", tag),
             oh.make_node("Mul", ["k", "k"], ["kk"]),  # a constant of the branch, named alike in both
             oh.make_node("Mul", [f"g_{tag}", "kk"], [f"y_{tag}"]),
             oh.make_node("If", ["use_cache_branch"], [f"nested_{tag}"], then_branch=inner, else_branch=inner_other)]
    k = numpy_helper.from_array(np.array(scale, np.float32), "k")
    c = numpy_helper.from_array(np.full(3, scale, np.float32), f"c_{tag}")
    outs = [f"y_{tag}", f"nested_{tag}", f"c_{tag}"]
    return oh.make_graph(nodes, tag, [], [_out(o) for o in outs], [k, c])


def merged_decoder() -> onnx.ModelProto:
    weights = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
               numpy_helper.from_array(np.array(math.sqrt(2), np.float32), "sqrt2"),
               numpy_helper.from_array(np.array(1.0, np.float32), "one"),
               numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [oh.make_node("Relu", ["x0"], ["x"]),
             oh.make_node("Neg", ["x"], ["h"]),
             oh.make_node("If", ["use_cache_branch"], ["y0", "z", "constant"],
                          then_branch=_branch("then", 2.0), else_branch=_branch("else", 3.0)),
             oh.make_node("Add", ["y0", "h"], ["y"])]
    graph = oh.make_graph(nodes, "merged", [oh.make_tensor_value_info("x0", F, ["rows", 8]),
                                            oh.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])],
                          [_out(o) for o in OUTPUTS], weights)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_flag_if_runs_as_its_branch(backend):
    proto = merged_decoder()
    reference = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    model = tm.load(proto, backend=backend)
    for flag in (True, False, True):
        for rows in (1, 3):
            x = rng.standard_normal((rows, 8)).astype(np.float32)
            feeds = {"x0": x, "use_cache_branch": np.array([flag])}
            want = dict(zip(OUTPUTS, reference.run(None, feeds)))
            for _ in range(2):  # the planning walk, then the replay
                got = model(feeds)
                for name in OUTPUTS:
                    value = np.asarray(model.backend.to_numpy(got[name]))
                    assert value.shape == want[name].shape, (name, value.shape)
                    np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-5, err_msg=f"{name} {flag}")
    assert len(model.signatures()) == 4  # a signature per flag value and row count
    for exe in model._executables.values():
        ops = [(step.spec.op_type, step.attrs.get("gelu")) for step, _ in exe.steps]  # the GELU in the linear layer
        assert ("If", None) not in ops and ops.count(("MatMulAdd", "none")) == 1 and ("Gelu", None) not in ops, ops


def test_branch_weights_take_the_linear_layout():
    """A weight read only inside the branches, as a MatMul's right operand, is a linear layer's weight: the torch
    backend blocks it for oneDNN at load like the main graph's (``Program._matmul_weights``)."""
    model = tm.load(merged_decoder(), backend="torch")
    assert model.program._matmul_weights() == {"w"}
