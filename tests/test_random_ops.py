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


def _random_model(backend):
    """y = x + RandomNormalLike(x) * 2 + RandomUniformLike(x) (low 1, high 3): draws per call seed or fixed."""
    nodes = [
        helper.make_node("RandomNormalLike", ["x"], ["n"], mean=0.5),
        helper.make_node("RandomUniformLike", ["x"], ["u"], low=1.0, high=3.0),
        helper.make_node("Add", ["x", "n"], ["xn"]),
        helper.make_node("Add", ["xn", "u"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), backend=backend)


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_a_call_seed_or_no_noise_decides_the_draws(backend):
    m = _random_model(backend)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert m.random and not load(_plain_model()).random

    def y(**kw):
        return np.asarray(m.backend.to_numpy(m({"x": x}, **kw)["y"]))

    # noise=False: the normal gives its mean, the uniform its upper bound; the same at the next call
    np.testing.assert_array_equal(y(noise=False), x + 0.5 + 3.0)
    np.testing.assert_array_equal(y(noise=False), x + 0.5 + 3.0)
    a, b, c = y(seed=7), y(seed=7), y(seed=8)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).min() > 0
    # the seed decides the draws on every backend alike (numpy's generator on the host)
    other = _random_model("mlx" if backend == "torch" else "torch")
    np.testing.assert_array_equal(a, np.asarray(other.backend.to_numpy(other({"x": x}, seed=7)["y"])))
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        m({"x": x}, seed=-1)


def _plain_model():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
