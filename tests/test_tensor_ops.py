"""Tensor ops on cases the ONNX suite leaves out, against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from transmuter_mlx.converters.model import load

BACKENDS = ["mlx", "torch"]


def _model(
    op: str, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray], n_out: int = 1, opset=18, **attrs
):
    names = list(inputs) + list(consts)
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    vi = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in inputs.items()
    ]
    out_vi = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs]
    init = [numpy_helper.from_array(v, n) for n, v in consts.items()]
    graph = helper.make_graph([node], "g", vi, out_vi, init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str) -> None:
    want = ReferenceEvaluator(model).run(None, feeds)
    m = load(model, backend=backend)
    got = m(feeds)
    for w, name in zip(want, [o.name for o in model.graph.output]):
        g = m.backend.to_numpy(got[name]) if m.backend.is_array(got[name]) else np.asarray(got[name])
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


X = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
SLICES = [
    ([0, -1], [3, -(10**9)], [0, 2], [1, -1]),
    ([10, 2], [-10, -10], [2, 1], [-2, -3]),
    ([-1], [-4], [-1], [-1]),
    ([0], [10**18], [1], [3]),
    ([4], [-1], [2], [-1]),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice_clamping(backend, starts, ends, axes, steps):
    consts = {n: np.array(v, np.int64) for n, v in zip(("s", "e", "a", "t"), (starts, ends, axes, steps))}
    _check(_model("Slice", {"x": X}, consts), {"x": X}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 0, 3, 1, 2], [0, -1, 2, 1, 3, -2], [2, 3, 4, 2, 3, 4]])
def test_pad_modes(backend, mode, pads):
    """Negative pads crop first (the reference evaluator refuses them), then numpy pads."""
    begin, end = pads[:3], pads[3:]
    crop = X[tuple(slice(max(-b, 0), X.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begin, end)))]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    kw = {"constant_values": 1.5} if mode == "constant" else {}
    want = np.pad(crop, widths, mode=mode, **kw)
    consts = {"p": np.array(pads, np.int64), "v": np.array(1.5, np.float32)}
    m = load(_model("Pad", {"x": X}, consts, opset=19, mode=mode), backend=backend)
    got = m.backend.to_numpy(m({"x": X})["y0"])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_nd_batch_dims_2(backend):
    data = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    idx = np.array([[[[1], [-1]], [[0], [2]], [[3], [-4]]]] * 2, np.int64)
    _check(_model("GatherND", {"d": data, "i": idx}, {}, batch_dims=2), {"d": data, "i": idx}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_slices(backend, reduction):
    data = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    idx = np.array([[1], [-1]] if reduction == "none" else [[1], [-3], [3]], np.int64)
    upd = np.full((len(idx), 3, 2), 2.0, np.float32)
    feeds = {"d": data, "i": idx, "u": upd}
    _check(_model("ScatterND", feeds, {}, reduction=reduction), feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_uneven_num_outputs(backend):
    x = np.arange(7, dtype=np.int64)
    _check(_model("Split", {"x": x}, {}, n_out=3, num_outputs=3), {"x": x}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_range_int_exact(backend):
    consts = {"a": np.array(-7, np.int64), "b": np.array(10, np.int64), "c": np.array(3, np.int64)}
    x = np.zeros(1, np.float32)
    model = _model("Range", {}, consts)
    model.graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]))
    _check(model, {"x": x}, backend)


SPARSE_FLAT = helper.make_sparse_tensor(
    helper.make_tensor("v", TensorProto.FLOAT, [2], [5.0, 7.0]),
    helper.make_tensor("i", TensorProto.INT64, [2], [1, 4]),
    [2, 3],
)
SPARSE_COORDS = helper.make_sparse_tensor(
    helper.make_tensor("v", TensorProto.INT32, [2], [5, 7]),
    helper.make_tensor("i", TensorProto.INT64, [2, 2], [0, 1, 1, 2]),
    [2, 3],
)


@pytest.mark.parametrize(
    "attr,want",
    [
        ({"sparse_value": SPARSE_FLAT}, np.array([[0, 5, 0], [0, 7, 0]], np.float32)),
        ({"sparse_value": SPARSE_COORDS}, np.array([[0, 5, 0], [0, 0, 7]], np.int32)),
        ({"value_floats": [1.0, 2.0]}, np.array([1.0, 2.0], np.float32)),
        ({"value_int": 3}, np.array(3, np.int64)),
        ({"value_strings": ["a", "b"]}, np.array(["a", "b"], dtype=object)),
    ],
)
def test_constant_attributes(attr, want):
    node = helper.make_node("Constant", [], ["y"], **attr)
    graph = helper.make_graph(
        [node], "g", [], [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)]
    )
    got = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), backend="numpy")({})[
        "y"
    ]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


RESIZES = [  # (input H, W), sizes or scales, mode, coordinate_transformation_mode, cubic_coeff_a, exclude_outside
    ((4, 5), {"sizes": (9, 13)}, "linear", "half_pixel", -0.75, 0),
    ((8, 10), {"sizes": (3, 4)}, "linear", "pytorch_half_pixel", -0.75, 0),
    ((4, 5), {"scales": (2.0, 3.0)}, "linear", "align_corners", -0.75, 0),
    ((6, 7), {"sizes": (14, 9)}, "cubic", "half_pixel", -0.75, 0),
    ((9, 12), {"sizes": (4, 5)}, "cubic", "align_corners", -0.75, 0),
    ((4, 5), {"sizes": (9, 13)}, "cubic", "half_pixel", -0.5, 0),  # not torch's a: the taps
    ((4, 5), {"sizes": (9, 13)}, "cubic", "half_pixel", -0.75, 1),  # excluded taps: the taps
    ((4, 5), {"scales": (1.5, 1.5)}, "linear", "half_pixel", -0.75, 0),  # 6.0 rows, 7.5 columns: the taps
    ((4, 5), {"sizes": (9, 13)}, "linear", "asymmetric", -0.75, 0),  # the taps
]


@pytest.mark.parametrize("hw,target,mode,ctm,a,exclude", RESIZES)
def test_resize_in_one_kernel_where_it_is_the_same(monkeypatch, hw, target, mode, ctm, a, exclude):
    """torch runs a plain 2-D linear or cubic resize as ``F.interpolate`` (``B.interpolate_2d``), every other one as
    the taps; both against onnx's reference, within float32 rounding (the kernel sums the taps in its own order)."""
    from transmuter_mlx.converters.backends.torch import TorchBackend

    calls = []
    kernel = TorchBackend.interpolate_2d
    monkeypatch.setattr(TorchBackend, "interpolate_2d", lambda self, *args: calls.append(args) or kernel(self, *args))
    x = np.random.default_rng(0).standard_normal((2, 3, *hw)).astype(np.float32)
    if "sizes" in target:
        consts = {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                  "sizes": np.array((2, 3, *target["sizes"]), np.int64)}
    else:
        consts = {"roi": np.zeros(0, np.float32), "scales": np.array((1, 1, *target["scales"]), np.float32)}
    model = _model("Resize", {"x": x}, consts, mode=mode, coordinate_transformation_mode=ctm, cubic_coeff_a=a,
                   exclude_outside=exclude)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    m = load(model, backend="torch")
    got = m.backend.to_numpy(m({"x": x})["y0"])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())
    plain = ctm != "asymmetric" and a == -0.75 and not exclude and target != {"scales": (1.5, 1.5)}
    assert bool(calls) == plain, calls


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(2, 3, 5000), (1, 4, 30, 70), (2, 2, 1)])
def test_instance_norm_as_a_layer_norm_of_the_positions(backend, shape):
    """float32 InstanceNormalization runs as the backend's layer norm over each (n, c)'s positions (wav2vec2's group
    norm): the op's formula within float32 rounding (1e-5 of the largest output), channels scaled and shifted."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 3 + 2).astype(np.float32)
    consts = {"scale": rng.standard_normal(shape[1]).astype(np.float32),
              "bias": rng.standard_normal(shape[1]).astype(np.float32)}
    model = _model("InstanceNormalization", {"x": x}, consts, epsilon=1e-5)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    m = load(model, backend=backend)
    got = m.backend.to_numpy(m({"x": x})["y0"])
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


CONVS = [  # x shape, weight shape, attributes, the formulation mlx_conv should choose (None: mx.conv_general)
    ((2, 8, 9, 11), (6, 8, 1, 1), {}, "_pointwise"),
    ((1, 8, 9, 11), (6, 8, 1, 1), {"strides": [2, 3]}, "_pointwise"),
    ((2, 8, 20), (6, 4, 1), {"group": 2}, "_pointwise"),
    ((1, 8, 9, 11), (6, 8, 1, 1), {"pads": [1, 0, 0, 1]}, None),  # a padded 1 x 1: MLX's
    ((2, 6, 12, 13), (6, 1, 7, 7), {"group": 6, "pads": [3, 3, 3, 3]}, "_depthwise"),
    ((1, 5, 15, 14), (5, 1, 3, 3), {"group": 5, "strides": [2, 2], "pads": [1, 0, 2, 1]}, "_depthwise"),
    ((1, 4, 30), (4, 1, 5), {"group": 4, "dilations": [2], "pads": [4, 4]}, "_depthwise"),
    ((1, 4, 12, 12), (8, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}, None),  # two outputs a channel: MLX's
    ((2, 32, 16, 17), (5, 32, 3, 3), {"pads": [1, 1, 1, 1]}, None),  # k x k: MLX's
    ((1, 8, 12, 12), (8, 2, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}, None),  # grouped: MLX's
]


@pytest.mark.parametrize("xs,ws,attrs,path", CONVS)
def test_conv_on_mlx_cpu_as_matmuls_and_shifted_sums(monkeypatch, xs, ws, attrs, path):
    """On MLX's CPU device float32 1 x 1 convolutions run as a matmul and depthwise ones as a sum of shifted views
    (``mlx_conv``), others on MLX's kernel; each against onnx's reference within float32 rounding (1e-5 of the
    largest output: the sums run in another order), with a spy on the formulation taken."""
    import mlx.core as mx

    from transmuter_mlx.converters.backends import mlx_conv

    if mx.default_device() != mx.cpu:
        pytest.skip("the formulations are for MLX's CPU device")
    taken = []
    for name in ("_pointwise", "_depthwise"):
        fn = getattr(mlx_conv, name)
        monkeypatch.setattr(mlx_conv, name, lambda *a, _n=name, _f=fn: taken.append(_n) or _f(*a))
    rng = np.random.default_rng(2)
    x = rng.standard_normal(xs).astype(np.float32)
    consts = {"w": rng.standard_normal(ws).astype(np.float32), "b": rng.standard_normal(ws[0]).astype(np.float32)}
    model = _model("Conv", {"x": x}, consts, **attrs)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    m = load(model, backend="mlx")
    got = m.backend.to_numpy(m({"x": x})["y0"])
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    assert set(taken) == ({path} if path else set())  # (the planning walk and the compiled trace both call it)


MATRIX_RESIZES = [  # (H, W), sizes, mode, antialias, whether both axes go by a matrix product
    ((16, 12), (128, 96), "linear", 0, True),
    ((9, 10), (40, 7), "cubic", 0, True),
    ((600, 4), (100, 4), "linear", 1, True),  # antialiased: 14 taps a row
    ((600, 4), (100, 4), "linear", 0, False),  # 2 taps over 600 rows: gathers
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("hw,target,mode,antialias,by_matrix", MATRIX_RESIZES)
def test_resize_axes_as_matrix_products(monkeypatch, backend, hw, target, mode, antialias, by_matrix):
    """An axis of few input rows a tap is resized as one product with its (out, in) matrix of tap weights (MLX's
    CPU gathers are scalar loops), the rest as gathers: against onnx's reference within float32 rounding."""
    from transmuter_mlx.converters.ops import resize

    products = []
    product = resize._axis_product
    monkeypatch.setattr(resize, "_axis_product", lambda B, y, axis, m: products.append(axis) or product(B, y, axis, m))
    x = np.random.default_rng(3).standard_normal((1, 2, *hw)).astype(np.float32)
    consts = {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
              "sizes": np.array((1, 2, *target), np.int64)}
    model = _model("Resize", {"x": x}, consts, mode=mode, antialias=antialias, cubic_coeff_a=-0.5,
                   coordinate_transformation_mode="asymmetric")  # (not torch's interpolate_2d)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    m = load(model, backend=backend)
    got = m.backend.to_numpy(m({"x": x})["y0"])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())
    resized = {a for a in (2, 3) if hw[a - 2] != target[a - 2]}
    assert set(products) == (resized if by_matrix else set())
