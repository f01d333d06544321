"""The vision fixtures are sound: each export matched PyTorch when it was built, and the processor saved
in the folder is the one transformers' slow image processor loads back.

The export check itself runs in the build (``tests/fixtures/vision_models.py``: onnxruntime against
PyTorch on images whose processed size differs from the trace's, a flat reference refused); these tests
read what it recorded, so they are cheap once the fixtures are cached.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fixtures import vision_models
from tests.fixtures.vision_models import SPECS, TOLERANCE, images

pytest.importorskip("optimum.exporters.onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXT_FAMILIES = {"clip", "siglip", "owlvit", "owlv2", "grounding_dino"}


@pytest.fixture(scope="module")
def folders():
    return vision_models.build_all()


def _meta(folder) -> dict:
    return json.loads((folder / "fixture.json").read_text())


@pytest.mark.parametrize("name", SPECS)
def test_export_check_passed(folders, name):
    meta = _meta(folders[name])
    assert meta["check"], "no export was checked"
    for stem, outputs in meta["check"].items():
        for file in (f"{stem}.onnx", f"{stem}_quantized.onnx"):
            assert (folders[name] / "onnx" / file).is_file() and file in meta["onnx"]
        assert list(outputs) == meta["onnx"][f"{stem}.onnx"]["outputs"]
        for output, report in outputs.items():
            assert report["max_abs_diff"] <= TOLERANCE * max(1.0, report["max_abs_ref"]), (stem, output)
            assert report["std_ref"] > 1e-6, f"{stem}:{output} is flat: the comparison proves nothing"
            assert np.isfinite(report["q8_max_abs_diff"]), (stem, output)
    assert meta["onnx"]["model_quantized.onnx"] == meta["onnx"]["model.onnx"]


@pytest.mark.parametrize("name", [n for n in SPECS if n != "background"])
def test_slow_processor_reloads(folders, name):
    """preprocessor_config.json names the slow class, which loads it back and processes as it did."""
    folder = folders[name]
    saved = json.loads((folder / "preprocessor_config.json").read_text())
    summary = _meta(folder)["processor"]
    kind = saved["image_processor_type"]
    assert not kind.endswith("Fast") and kind == summary["image_processor_type"]
    processor = getattr(transformers, kind).from_pretrained(folder)
    assert type(processor).__name__ == kind
    assert json.loads(processor.to_json_string()) == saved
    _same_pixels(processor(images=images()[: summary["pixel_values_shape"][0]], return_tensors="np"), summary)


def test_background_processor(folders):
    """The background fixture's preprocessor_config.json is transformers.js's (no Python class has it)."""
    folder = folders["background"]
    saved = json.loads((folder / "preprocessor_config.json").read_text())
    assert saved == json.loads(json.dumps(vision_models.BACKGROUND_PREPROCESSOR))
    assert json.loads((folder / "config.json").read_text()) == {"model_type": "isnet"}
    summary = _meta(folder)["processor"]
    _same_pixels(vision_models.BackgroundProcessor()(images()[: summary["pixel_values_shape"][0]]), summary)


@pytest.mark.parametrize("name", sorted(TEXT_FAMILIES))
def test_tokenizer_matches_model(folders, name):
    folder = folders[name]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert len(tok) == config["text_config"]["vocab_size"]
    ids = tok(["a photo of a cat"])["input_ids"][0]
    assert 1 < len(ids) <= tok.model_max_length and max(ids) < len(tok)


def _same_pixels(processed, summary: dict) -> None:
    pixels = np.asarray(processed["pixel_values"], dtype=np.float64)
    assert list(pixels.shape) == summary["pixel_values_shape"]
    np.testing.assert_allclose(pixels.sum(), summary["pixel_values_sum"], rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(np.abs(pixels).sum(), summary["pixel_values_abs_sum"], rtol=1e-6)
