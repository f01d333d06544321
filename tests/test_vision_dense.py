"""Depth estimation, image segmentation, background removal and image to image against their references.

fp32: the transformers 4.57.6 pipeline (``transformers.pipeline(task, model=folder)`` on the PyTorch
weights the fixture saved); background removal has no transformers pipeline, so its reference is
onnxruntime on the same file with transformers.js's post-processing (written out below from its
source) and Pillow's bilinear resize. q8: onnxruntime on ``model_quantized.onnx`` fed by transformers'
image processor, with transformers' own post-processing. Both backends, on real photographs and odd
images. Tolerances are the spec's: depth within 1e-4 of the map's largest value and the 8-bit map
1 step away; segmentation labels identical except pixels whose two best logits are within 1e-4 (counted:
float32 flips them); a matte value and a pixel of the upscaled image 1 step away.
"""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

import transmuter_mlx as tm
from tests.fixtures.images import image
from tests.fixtures.vision_models import BackgroundProcessor, build
from transmuter_mlx.pipelines.resize import interpolate
from transmuter_mlx.pipelines.vision_dense import cutout, depth_image

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")

BACKENDS = ["mlx", "torch"]
VARIANTS = ["fp32", "q8"]
IMAGES = ("chelsea", "odd_217x333", "gray")
TIE = 1e-4  # two best logits this close may swap in float32 (fixtures.md)
# q8: the converter's model (not the post-processing) is up to 4.1e-3 of the largest depth away from
# onnxruntime on the tiny DPTs, where a DynamicQuantizeLinear code lands on the other side of a rounding
# (a 1e-7 difference upstream); fp32 is the spec's 1e-4
DEPTH_TOLERANCE = {"fp32": 1e-4, "q8": 5e-3}


@functools.cache
def ours(task: str, fixture: str, backend: str, variant: str):
    return tm.pipeline(task, str(build(fixture)), backend=backend, variant=variant)


@functools.cache
def hf_pipeline(task: str, fixture: str):
    return transformers.pipeline(task, model=str(build(fixture)), device="cpu")


@functools.cache
def hf_processor(fixture: str):
    return transformers.AutoImageProcessor.from_pretrained(str(build(fixture)))


@functools.cache
def session(fixture: str, variant: str) -> ort.InferenceSession:
    name = "model.onnx" if variant == "fp32" else "model_quantized.onnx"
    return ort.InferenceSession(str(build(fixture) / "onnx" / name), providers=["CPUExecutionProvider"])


def rgb(name: str) -> Image.Image:
    return image(name).convert("RGB")


def run_onnx(fixture: str, variant: str, pixels: np.ndarray) -> list[np.ndarray]:
    s = session(fixture, variant)
    return s.run(None, {s.get_inputs()[0].name: pixels.astype(np.float32)})


# ---------------------------------------------------------------- depth estimation
@functools.cache
def depth_reference(fixture: str, name: str, variant: str) -> tuple[np.ndarray, np.ndarray]:
    """(predicted_depth, 8-bit depth) of transformers: its pipeline (fp32), or onnxruntime's depth through
    its post_process_depth_estimation and the pipeline's 8-bit formula (q8)."""
    picture = rgb(name)
    if variant == "fp32":
        out = hf_pipeline("depth-estimation", fixture)(picture)
        return out["predicted_depth"].numpy(), np.asarray(out["depth"])
    pixels = hf_processor(fixture)(picture, return_tensors="np")["pixel_values"]
    raw = SimpleNamespace(predicted_depth=torch.from_numpy(run_onnx(fixture, variant, pixels)[0]))
    depth = hf_processor(fixture).post_process_depth_estimation(raw, [picture.size[::-1]])[0]["predicted_depth"]
    depth = depth.numpy()
    scaled = (depth - depth.min()) / (depth.max() - depth.min())
    return depth, (scaled * 255).astype("uint8")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fixture", ["dpt", "depth_anything"])
def test_depth_estimation(fixture: str, backend: str, variant: str) -> None:
    estimate = ours("depth-estimation", fixture, backend, variant)
    for name in IMAGES:
        want_depth, want_image = depth_reference(fixture, name, variant)
        assert np.ptp(want_depth) > 0.1 * np.abs(want_depth).max(), "a flat reference proves nothing"
        got = estimate(image(name))
        depth = np.asarray(got["predicted_depth"])
        assert depth.shape == want_depth.shape == image(name).size[::-1] and depth.dtype == np.float32
        assert type(got["predicted_depth"]).__module__.startswith("mlx" if backend == "mlx" else "torch")
        diff = np.abs(depth - want_depth).max() / np.abs(want_depth).max()
        assert diff <= DEPTH_TOLERANCE[variant], f"{name}: depth {diff:.2e} of its largest value"
        assert got["depth"].mode == "L" and got["depth"].size == image(name).size
        steps = np.abs(np.asarray(got["depth"], np.int16) - want_image).max()
        # one step: the spec's; q8's depth may be 5e-3 of the range away, which can be 2 steps of 255
        assert steps <= (1 if variant == "fp32" else 2), f"{name}: the 8-bit depth is {steps} steps away"


def test_depth_image_is_the_pipelines_formula() -> None:
    depth = np.array([[0.0, 1.0], [2.0, 3.5]], np.float32)  # 72.86 and 145.71 of 255: truncated, not rounded
    assert np.asarray(depth_image(depth)).tolist() == [[0, 72], [145, 255]]  # the nearest (largest) is 255
    assert np.asarray(depth_image(np.ones((2, 3), np.float32))).tolist() == [[0, 0, 0], [0, 0, 0]]  # flat: no NaN


# ---------------------------------------------------------------- image segmentation
def label_map(segments: list[dict], labels: dict[str, int], size: tuple[int, int]) -> np.ndarray:
    """The label id of each pixel from a result's masks; each pixel in exactly one mask."""
    out = np.full(size[::-1], -1, np.int64)
    for s in segments:
        mask = np.asarray(s["mask"])
        assert set(np.unique(mask)) <= {0, 255} and s["score"] is None
        assert (out[mask == 255] == -1).all(), "masks overlap"
        out[mask == 255] = labels[s["label"]]
    assert (out >= 0).all(), "a pixel in no mask"
    return out


@functools.cache
def segmentation_reference(name: str, variant: str) -> tuple[np.ndarray, np.ndarray]:
    """(label map, gap between the two best resized logits) of transformers: the pipeline's masks (fp32),
    or post_process_semantic_segmentation of onnxruntime's logits (q8)."""
    picture, processor = rgb(name), hf_processor("segformer")
    pixels = processor(picture, return_tensors="pt")["pixel_values"]
    if variant == "fp32":
        model = hf_pipeline("image-segmentation", "segformer").model
        with torch.no_grad():
            logits = model(pixel_values=pixels).logits
        labels = model.config.label2id
        found = label_map(hf_pipeline("image-segmentation", "segformer")(picture), labels, picture.size)
    else:
        logits = torch.from_numpy(run_onnx("segformer", variant, pixels.numpy())[0])
        found = processor.post_process_semantic_segmentation(SimpleNamespace(logits=logits), [picture.size[::-1]])
        found = found[0].numpy()
    resized = torch.nn.functional.interpolate(logits, size=picture.size[::-1], mode="bilinear", align_corners=False)
    top2 = torch.topk(resized[0], 2, dim=0).values.numpy()
    return found, top2[0] - top2[1]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_image_segmentation(backend: str, variant: str) -> None:
    segment = ours("image-segmentation", "segformer", backend, variant)
    labels = {v: int(k) for k, v in json.loads((build("segformer") / "config.json").read_text())["id2label"].items()}
    present = set()
    for name in IMAGES:
        want, gap = segmentation_reference(name, variant)
        segments = segment(image(name))["segments"]
        ids = [labels[s["label"]] for s in segments]
        assert ids == sorted(ids), "segments in the order of the label ids"
        got = label_map(segments, labels, image(name).size)
        present |= set(np.unique(want).tolist())
        flipped = got != want
        assert (gap[flipped] < TIE).all(), f"{name}: a pixel differs whose best logits are {gap[flipped].max():.2e} apart"
        assert flipped.sum() <= max(3, 1e-3 * flipped.size), f"{name}: {flipped.sum()} near-tie pixels flipped"
    assert len(present) >= 2, "one label everywhere proves nothing"


def test_a_subtask_the_model_has_not_is_an_error() -> None:
    segment = ours("image-segmentation", "segformer", "mlx", "fp32")
    assert segment(image("gray"), subtask="semantic")["segments"]
    with pytest.raises(ValueError, match=r"subtask 'panoptic' is not supported .* supports \['semantic'\]"):
        segment(image("gray"), subtask="panoptic")
    with pytest.raises(ValueError, match="subtask must be one of"):
        segment(image("gray"), subtask="stuff")


# ---------------------------------------------------------------- panoptic segmentation (DETR)
def panoptic_reference(name: str, variant: str, threshold: float) -> list[dict]:
    """transformers' segments: its pipeline (fp32), or post_process_panoptic_segmentation of onnxruntime's
    outputs with the pipeline's thresholds (q8)."""
    picture = rgb(name)
    if variant == "fp32":
        return hf_pipeline("image-segmentation", "detr_panoptic")(picture, threshold=threshold)
    pixels = hf_processor("detr_panoptic")(picture, return_tensors="np")["pixel_values"]
    logits, masks = (torch.from_numpy(a) for a in run_onnx("detr_panoptic", variant, pixels))
    found = hf_processor("detr_panoptic").post_process_panoptic_segmentation(
        SimpleNamespace(logits=logits, pred_masks=masks), threshold=threshold, mask_threshold=0.5,
        overlap_mask_area_threshold=0.5, target_sizes=[picture.size[::-1]],
    )[0]  # fmt: skip
    id2label = hf_pipeline("image-segmentation", "detr_panoptic").model.config.id2label
    return [{"label": id2label[s["label_id"]], "score": s["score"],
             "mask": Image.fromarray(((found["segmentation"] == s["id"]) * 255).numpy().astype(np.uint8))}
            for s in found["segments_info"]]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_panoptic_segmentation(backend: str, variant: str) -> None:
    segment = ours("image-segmentation", "detr_panoptic", backend, variant)
    count = 0
    for name in ("chelsea", "odd_217x333", "gray"):
        for threshold in (0.9, 0.5):  # the pipeline's default, and one that keeps more queries
            want = panoptic_reference(name, variant, threshold)
            got = segment(image(name), threshold=threshold)["segments"]
            assert [s["label"] for s in got] == [s["label"] for s in want], name
            count += len(want)
            for a, b in zip(got, want, strict=True):
                assert abs(a["score"] - b["score"]) <= 1e-4 and a["mask"].size == image(name).size
                assert (np.asarray(a["mask"]) == np.asarray(b["mask"])).mean() >= 0.999, name
    assert count >= 3, "segments to compare"


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


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_mask2former_panoptic_segmentation(backend: str, variant: str) -> None:
    folder = str(build("mask2former"))
    segment = tm.pipeline("image-segmentation", folder, backend=backend, variant=variant,
                          featurizer=TransformersFeaturizer(hf_processor("mask2former")))
    count = 0
    for name in ("chelsea", "odd_217x333", "gray"):
        picture = rgb(name)
        for threshold in (0.9, 0.5):
            if variant == "fp32":
                want = hf_pipeline("image-segmentation", "mask2former")(picture, threshold=threshold)
            else:
                pixels = hf_processor("mask2former")(picture, return_tensors="np")["pixel_values"]
                classes, masks = (torch.from_numpy(a) for a in run_onnx("mask2former", variant, pixels))
                found = hf_processor("mask2former").post_process_panoptic_segmentation(
                    SimpleNamespace(class_queries_logits=classes, masks_queries_logits=masks), threshold=threshold,
                    mask_threshold=0.5, overlap_mask_area_threshold=0.5, target_sizes=[picture.size[::-1]],
                )[0]  # fmt: skip
                id2label = hf_pipeline("image-segmentation", "mask2former").model.config.id2label
                want = [{"label": id2label[s["label_id"]], "score": s["score"],
                         "mask": Image.fromarray(((found["segmentation"] == s["id"]) * 255).numpy().astype(np.uint8))}
                        for s in found["segments_info"]]
            got = segment(image(name), threshold=threshold)["segments"]
            assert [s["label"] for s in got] == [s["label"] for s in want], name
            count += len(want)
            for a, b in zip(got, want, strict=True):
                assert abs(a["score"] - b["score"]) <= 1e-4
                assert (np.asarray(a["mask"]) == np.asarray(b["mask"])).mean() >= 0.999, name
    assert count >= 3, "segments to compare"


# ---------------------------------------------------------------- background removal
def transformers_js_mask(output: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """transformers.js's ImageSegmentationPipeline without a subtask (background-removal): the first output of
    the image, sigmoid_() when a value is outside 0..1 by over 1e-5, mul_(255).to('uint8') (a Float32Array
    into a Uint8Array: truncation), resized to the image (here Pillow's bilinear, as the spec says)."""
    item = output[0].astype(np.float32)
    if (item < -1e-5).any() or (item > 1 + 1e-5).any():
        item = np.array([1 / (1 + np.exp(-float(v))) for v in item.ravel()], np.float32).reshape(item.shape)
    data = np.array([int(float(v)) for v in (item * np.float32(255)).ravel()], np.uint8).reshape(item.shape[-2:])
    return np.asarray(Image.fromarray(data, "L").resize(size, Image.Resampling.BILINEAR))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_background_removal(backend: str, variant: str) -> None:
    remove = ours("background-removal", "background", backend, variant)
    assert remove.batch_size == 1  # the export fixes its batch at 1, as onnx-community/ormbg-ONNX does
    for name in IMAGES:
        picture = rgb(name)
        output = run_onnx("background", variant, BackgroundProcessor()([picture])["pixel_values"])[0]
        want = transformers_js_mask(output, picture.size)
        assert np.ptp(want) > 20, "a flat matte proves nothing"
        got = remove(image(name), return_image=True)
        assert got["mask"].mode == "L" and got["mask"].size == picture.size
        steps = np.abs(np.asarray(got["mask"], np.int16) - want).max()
        assert steps <= 1, f"{name}: the mask is {steps} steps away"
        rgba = np.asarray(got["image"])
        assert (rgba[..., :3] == np.asarray(picture)).all() and (rgba[..., 3] == np.asarray(got["mask"])).all()


def test_a_matte_of_logits_goes_through_a_sigmoid() -> None:
    from transmuter_mlx.pipelines.vision_dense import matte_image

    logits = np.array([[-3.0, 0.0], [0.5, 3.0]], np.float32)
    want = transformers_js_mask(logits[None], (2, 2))
    assert np.asarray(matte_image(logits, (2, 2))).tolist() == want.tolist() == [[12, 127], [158, 242]]
    probabilities = np.array([[0.0, 0.5], [1.0, 1.000001]], np.float32)  # within 1e-5 of 0..1: no sigmoid
    assert np.asarray(matte_image(probabilities, (2, 2))).tolist() == [[0, 127], [255, 255]]


def test_cutout() -> None:
    picture, mask = rgb("chelsea"), Image.new("L", (451, 300), 7)
    out = cutout(picture, mask)
    assert out.mode == "RGBA" and np.asarray(out)[..., 3].max() == 7 and picture.mode == "RGB"


# ---------------------------------------------------------------- image to image
@functools.cache
def upscale_reference(name: str, variant: str) -> np.ndarray:
    """transformers' image-to-image image (fp32: its pipeline; q8: its postprocess on onnxruntime's output),
    cropped to ``upscale`` times the image: the padding's upscaled rows and columns removed."""
    picture = rgb(name)
    if variant == "fp32":
        pixels = np.asarray(hf_pipeline("image-to-image", "swin2sr")(picture))
    else:
        fed = hf_processor("swin2sr")(picture, return_tensors="np")["pixel_values"]
        out = np.clip(run_onnx("swin2sr", variant, fed)[0][0], 0, 1)
        pixels = (np.moveaxis(out, 0, -1) * 255.0).round().astype(np.uint8)
    return pixels[: 2 * picture.height, : 2 * picture.width]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_image_to_image(backend: str, variant: str) -> None:
    upscale = ours("image-to-image", "swin2sr", backend, variant)
    for name in IMAGES:
        want = upscale_reference(name, variant)
        assert int(want.max()) - int(want.min()) > 10, "a flat image proves nothing"
        got = upscale(image(name))["image"]
        assert got.mode == "RGB" and got.size == (2 * image(name).width, 2 * image(name).height)
        steps = np.abs(np.asarray(got, np.int16) - want).max()
        assert steps <= 1, f"{name}: {steps} steps away"


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
    assert batched.batch_size == 2  # a fixed size: batched, the last batch filled
    for a, b in zip([segment(image(n)) for n in IMAGES], batched([image(n) for n in IMAGES]), strict=True):
        assert [s["label"] for s in a["segments"]] == [s["label"] for s in b["segments"]]
        assert all((np.asarray(x["mask"]) == np.asarray(y["mask"])).all() for x, y in zip(a["segments"], b["segments"]))
    assert {dict(k)["pixel_values"][0] for k in batched.model.signatures()} == {(2, 3, 64, 64)}

