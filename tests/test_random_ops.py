"""Random generators: the suite cannot check their values, so check dtype, shape, range and seeding."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from transmuter_mlx.converters.model import load


def _run(node, inputs, feeds, backend, opset=17):
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m = load(model, backend=backend)
    y = m(feeds)["y"]
    return np.asarray(m.backend.to_numpy(y) if m.backend.is_array(y) else y)


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_generators_have_the_right_dtype_shape_and_range(backend):
    x = np.zeros((2, 3), np.float32)
    x_in = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    y = _run(
        helper.make_node("RandomNormal", [], ["y"], shape=[4, 5], dtype=TensorProto.DOUBLE), [], {}, backend
    )
    assert y.dtype == np.float64 and y.shape == (4, 5)
    y = _run(helper.make_node("RandomUniformLike", ["x"], ["y"], low=2.0, high=3.0), x_in, {"x": x}, backend)
    assert y.dtype == np.float32 and y.shape == (2, 3) and ((y >= 2) & (y < 3)).all()
    y = _run(
        helper.make_node("RandomNormalLike", ["x"], ["y"], dtype=TensorProto.FLOAT16), x_in, {"x": x}, backend
    )
    assert y.dtype == np.float16 and y.shape == (2, 3)
    y = _run(helper.make_node("Multinomial", ["x"], ["y"], sample_size=7), x_in, {"x": x}, backend)
    assert y.dtype == np.int32 and y.shape == (2, 7) and ((y >= 0) & (y < 3)).all()
    p = np.array([0.0, 1.0, 0.0, 1.0], np.float32)
    p_in = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
    y = _run(helper.make_node("Bernoulli", ["x"], ["y"]), p_in, {"x": p}, backend)
    np.testing.assert_array_equal(y, p)


def test_a_seed_makes_a_generator_deterministic():
    node = helper.make_node("RandomUniform", [], ["y"], shape=[8], seed=3.0)
    np.testing.assert_array_equal(_run(node, [], {}, "mlx"), _run(node, [], {}, "torch"))
