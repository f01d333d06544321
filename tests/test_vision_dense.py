"""Depth estimation, image segmentation, background removal, image to image: options and pieces.

The parity numbers (tests/test_vision_parity.py) are those of ``python -m parity vision`` (parity/vision.py) for these tasks, their rows of
parity/tasks.py and references of parity/vision_reference.py, on both backends: fp32 against the
transformers 4.57.6 pipeline on the fixture's PyTorch weights (background removal: onnxruntime on the same
file with transformers.js's post-processing and Pillow's bilinear resize), q8 against our post-processing
of onnxruntime's outputs of the same file. The spec's tolerances: depth within 1e-4 of the map's largest
value and the 8-bit map 1 step away; segmentation labels and scores (1e-4) equal, masks equal except a few
pixels at a near-tie of the reference (counted); a matte value and a pixel of the upscaled image 1 step.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

import transmuter_mlx as tm
from parity import runner
from parity.tasks import PARITY
from parity.vision import CASES
from parity.vision_reference import NearTies, transformers_js_mask
from tests.fixtures.images import image
from tests.fixtures.vision_models import build
from transmuter_mlx.pipelines.resize import interpolate
from transmuter_mlx.pipelines.vision_dense import cutout, depth_image

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

IMAGES = ("chelsea", "odd_217x333", "gray")


def test_tolerances_are_the_specs() -> None:
    depth = PARITY["depth-estimation"].items({"predicted_depth": np.array([[-2.0, 1.0]]), "depth": Image.new("L", (2, 1))})
    assert depth[0][2]["fp32"] == pytest.approx(2e-4) and depth[1][2]["fp32"] == 1  # 1e-4 of the largest; 1 step
    for task, key in (("background-removal", "mask"), ("image-to-image", "image")):
        assert PARITY[task].items({key: Image.new("L", (2, 1))})[0][2]["fp32"] == 1
    mask = Image.new("L", (3, 2))
    score, pixels = PARITY["image-segmentation"].items(
        {"segments": [{"label": "a", "score": 0.5, "mask": mask}], "near_ties": np.zeros((2, 3), bool)})
    assert score[2]["fp32"] == 1e-4 and pixels[2]["fp32"].budget == 3


def test_near_ties_allow_a_few_flips_where_the_reference_is_near_a_decision() -> None:
    ties = np.zeros(4000, bool)
    ties[:10] = True
    rule = NearTies(ties, 4)
    flips = np.zeros(4000)
    assert rule.within(flips)
    flips[:4] = 1  # four near-tie pixels flipped
    assert rule.within(flips)
    flips[4] = 1  # a fifth: over the budget
    assert not rule.within(flips)
    flips[:5], flips[20] = 0, 1  # one flip where the reference is far from a decision
    assert not rule.within(flips)
    want = {"segments": [{"label": "a", "score": None, "mask": Image.new("L", (4, 1000), 255)}],
            "near_ties": ties.reshape(1000, 4)}
    flipped = np.full((1000, 4), 255, np.uint8)
    flipped[0, :2] = 0
    got = {"segments": [{"label": "a", "score": None, "mask": Image.fromarray(flipped)}]}
    assert runner.compare("image-segmentation", [got], [want], 1e-4)[1:3] == (True, True)
    assert not runner.compare("image-segmentation", [got], [want], 1e-3, "q8")[2]  # q8: masks equal


def test_segmentation_cases_have_segments_to_compare() -> None:
    """The references of the parity cases (computed once, as the parity run computes them): Mask2Former's
    random queries give several segments of several labels at instance threshold 0.5 in every image."""
    from tests.fixtures.images import image_path

    def reference(case) -> list[dict]:
        inputs = [str(image_path(n)) for n in case.inputs]
        return PARITY[case.task].run_reference(case.task, build(case.fixture), inputs, dict(case.options))

    cases = {c.name: c for c in CASES if c.fixture == "mask2former"}
    assert all(len(r["segments"]) >= 2 for r in reference(cases["instance 0.5"]))
    assert len({s["label"] for c in cases.values() for r in reference(c) for s in r["segments"]}) >= 2
    segformer = next(c for c in CASES if c.fixture == "segformer")
    assert all(len(r["segments"]) >= 2 for r in reference(segformer))  # semantic: two labels or more an image


@functools.cache
def ours(task: str, fixture: str, backend: str, variant: str):
    return tm.pipeline(task, str(build(fixture)), backend=backend, variant=variant)


def rgb(name: str) -> Image.Image:
    return image(name).convert("RGB")


# ---------------------------------------------------------------- depth estimation
def test_depth_image_is_the_pipelines_formula() -> None:
    depth = np.array([[0.0, 1.0], [2.0, 3.5]], np.float32)  # 72.86 and 145.71 of 255: truncated, not rounded
    assert np.asarray(depth_image(depth)).tolist() == [[0, 72], [145, 255]]  # the nearest (largest) is 255
    assert np.asarray(depth_image(np.ones((2, 3), np.float32))).tolist() == [[0, 0, 0], [0, 0, 0]]  # flat: no NaN


# ---------------------------------------------------------------- image segmentation
def test_a_subtask_the_model_has_not_is_an_error() -> None:
    segment = ours("image-segmentation", "segformer", "mlx", "fp32")
    assert segment(image("gray"), subtask="semantic")["segments"]
    with pytest.raises(ValueError, match=r"subtask 'panoptic' is not supported .* supports \['semantic'\]"):
        segment(image("gray"), subtask="panoptic")
    with pytest.raises(ValueError, match="subtask must be one of"):
        segment(image("gray"), subtask="stuff")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("family", ["detr", "mask2former"])
def test_mask_segments_are_transformers(family: str, seed: int) -> None:
    """Mask queries that compete for the pixels: transformers' post_process_panoptic_segmentation (DETR's;
    Mask2Former's, which first resizes the mask logits to 384x384) on the same random outputs, its
    thresholds varied."""
    from transmuter_mlx.pipelines.segments import mask_segments

    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((8, 6)) * 2).astype(np.float32)  # 8 queries, 5 labels + "no object"
    logits[rng.permutation(8)[:5], rng.integers(0, 5, 5)] += 6  # five confident queries of objects
    y, x = np.mgrid[0:12, 0:16]
    cy, cx = rng.uniform(0, 12, 8), rng.uniform(0, 16, 8)  # blobs of mask logits that overlap
    masks = np.stack([4 - ((y - cy[q]) ** 2 + (x - cx[q]) ** 2) / rng.uniform(4, 20) for q in range(8)])
    masks = masks.astype(np.float32)
    threshold, mask_threshold, overlap = (0.9, 0.5, 0.5) if seed % 2 else (0.5, 0.3, 0.3)
    if family == "detr":
        processor, outputs = transformers.DetrImageProcessor(), {"logits": "logits", "pred_masks": "pred_masks"}
    else:
        processor = transformers.Mask2FormerImageProcessor()
        outputs = {"logits": "class_queries_logits", "pred_masks": "masks_queries_logits"}
    raw = {outputs["logits"]: torch.from_numpy(logits)[None], outputs["pred_masks"]: torch.from_numpy(masks)[None]}
    want = processor.post_process_panoptic_segmentation(
        SimpleNamespace(**raw), threshold=threshold, mask_threshold=mask_threshold,
        overlap_mask_area_threshold=overlap, target_sizes=[(37, 53)],
    )[0]  # fmt: skip
    size = (384, 384) if family == "mask2former" else None
    segmentation, info = mask_segments(logits, masks, (37, 53), threshold, mask_threshold, overlap, size)
    assert [(s["id"], s["label_id"]) for s in info] == [(s["id"], s["label_id"]) for s in want["segments_info"]]
    assert np.allclose([s["score"] for s in info], [s["score"] for s in want["segments_info"]], atol=1e-6)
    assert (segmentation == want["segmentation"].numpy()).mean() >= 0.999
    assert info, "segments to compare"


class TransformersFeaturizer:
    """transformers' image processor as a ``featurizer=`` (Mask2FormerImageProcessor: none of ours yet)."""

    kind = "image"
    fixed_size = False

    def __init__(self, processor) -> None:
        self.processor = processor

    def preprocess(self, picture, index: int) -> list:
        from transmuter_mlx.processors.image import ImageFeatures

        pixels = self.processor(picture, return_tensors="np")["pixel_values"][0].astype(np.float32)
        return [ImageFeatures(pixels, (picture.height, picture.width), pixels.shape[-2:], None, index)]

    def bucket(self, features) -> tuple:
        return features.pixel_values.shape

    def collate(self, batch, bucket) -> dict:
        return {"pixel_values": np.stack([f.pixel_values for f in batch])}

    def cut(self, value, features, bucket):
        return value


def test_a_featurizer_replaces_the_image_processor() -> None:
    """``featurizer=``: transformers' Mask2FormerImageProcessor gives the pixels of the fixture's own."""
    folder = str(build("mask2former"))
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    featured = tm.pipeline("image-segmentation", folder, featurizer=TransformersFeaturizer(processor))
    for name in ("chelsea", "odd_217x333"):
        a = featured(image(name), subtask="instance", threshold=0.3)["segments"]
        b = ours("image-segmentation", "mask2former", "mlx", "fp32")(image(name), subtask="instance", threshold=0.3)
        assert [s["label"] for s in a] == [s["label"] for s in b["segments"]] and a
        assert all((np.asarray(x["mask"]) == np.asarray(y["mask"])).all() for x, y in zip(a, b["segments"]))


# ---------------------------------------------------------------- background removal
def test_background_removal_returns_the_cutout() -> None:
    remove = ours("background-removal", "background", "mlx", "fp32")
    assert remove.batch_size == 1  # the export fixes its batch at 1, as onnx-community/ormbg-ONNX does
    for name in IMAGES:
        got = remove(image(name), return_image=True)
        rgba = np.asarray(got["image"])
        assert got["image"].mode == "RGBA" and (rgba[..., :3] == np.asarray(rgb(name))).all()
        assert (rgba[..., 3] == np.asarray(got["mask"])).all()


def test_a_matte_of_logits_goes_through_a_sigmoid() -> None:
    from transmuter_mlx.pipelines.vision_dense import matte_image

    logits = np.array([[-3.0, 0.0], [0.5, 3.0]], np.float32)
    want = np.asarray(transformers_js_mask(logits[None], (2, 2)))
    assert np.asarray(matte_image(logits, (2, 2))).tolist() == want.tolist() == [[12, 127], [158, 242]]
    probabilities = np.array([[0.0, 0.5], [1.0, 1.000001]], np.float32)  # within 1e-5 of 0..1: no sigmoid
    assert np.asarray(matte_image(probabilities, (2, 2))).tolist() == [[0, 127], [255, 255]]


def test_cutout() -> None:
    picture, mask = rgb("chelsea"), Image.new("L", (451, 300), 7)
    out = cutout(picture, mask)
    assert out.mode == "RGBA" and np.asarray(out)[..., 3].max() == 7 and picture.mode == "RGB"


# ---------------------------------------------------------------- torch's interpolate in numpy
@pytest.mark.parametrize("shape, size", [((5, 128, 128), (300, 451)), ((5, 16, 16), (333, 217)),
                                         ((1, 37, 50), (37, 50)), ((3, 300, 451), (16, 16)), ((2, 1, 1), (3, 4))])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_is_torchs(mode: str, shape: tuple, size: tuple) -> None:
    x = (np.random.default_rng(0).standard_normal(shape) * 10).astype(np.float32)
    want = torch.nn.functional.interpolate(torch.from_numpy(x)[None], size=size, mode=mode, align_corners=False)
    want = want[0].numpy()
    got = interpolate(x, size, mode)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())  # a few float32 ulps
    if mode == "bilinear" and shape[1] >= 37 and size[0] >= shape[1]:
        assert (got == want).all()  # a model-sized map resized up to an image: bit-exact


def test_interpolate_checks_its_input() -> None:
    with pytest.raises(ValueError, match="positive"):
        interpolate(np.zeros((2, 2), np.float32), (0, 3), "bilinear")
    with pytest.raises(ValueError, match="mode"):
        interpolate(np.zeros((2, 2), np.float32), (3, 3), "nearest")  # type: ignore[arg-type]

def test_results_on_a_batch_equal_one_by_one() -> None:
    estimate = ours("depth-estimation", "depth_anything", "mlx", "fp32")  # sizes vary: one image per call
    one = [np.asarray(estimate(image(n))["predicted_depth"]) for n in IMAGES]
    many = [np.asarray(r["predicted_depth"]) for r in estimate([image(n) for n in IMAGES])]
    for a, b in zip(one, many, strict=True):
        np.testing.assert_array_equal(a, b)
    segment = ours("image-segmentation", "segformer", "mlx", "fp32")
    batched = tm.pipeline("image-segmentation", str(build("segformer")), compile={"batch_size": 2})
    assert batched.batch_size == 2  # a fixed size: batched, the last image alone
    for a, b in zip([segment(image(n)) for n in IMAGES], batched([image(n) for n in IMAGES]), strict=True):
        assert [s["label"] for s in a["segments"]] == [s["label"] for s in b["segments"]]
        assert all((np.asarray(x["mask"]) == np.asarray(y["mask"])).all() for x, y in zip(a["segments"], b["segments"]))
    assert {dict(k)["pixel_values"][0] for k in batched.model.signatures()} == {(2, 3, 64, 64), (1, 3, 64, 64)}
