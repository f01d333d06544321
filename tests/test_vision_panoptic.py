"""Image segmentation by mask queries (Mask2Former, DETR) beyond panoptic, and Mask2Former's image processor,
against transformers 4.57.6.

- The processor (``Mask2FormerImageProcessor``, ``MaskFormerImageProcessor``): ``pixel_values`` and
  ``pixel_mask`` bit-equal to the slow classes' on the photographs and odd images, for the defaults, the
  mask2former fixture's settings and legacy configs; the ``...Fast`` types against torch's resize.
- The post-processing in numpy (``pipelines/segments.py``) against the processors' own
  ``post_process_instance_segmentation`` / ``post_process_semantic_segmentation`` on random queries that
  compete for the pixels; torch's unsorted ``topk`` order and ``nearest`` resize against torch.
- End to end: the subtasks each family has, and a batch of the mask2former fixture's fixed size. The
  comparisons with transformers' image-segmentation pipeline (the mask2former fixture's panoptic, instance
  and semantic subtasks, the detr_panoptic fixture's panoptic and semantic ones; masks equal except a few
  pixels at a near-tie of the reference) are the parity suite's: tests/test_vision_dense.py::test_parity.
"""

from __future__ import annotations

import functools
import json
import shutil
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import transmuter_mlx as tm
from tests.fixtures.images import NAMES, image, image_path
from tests.fixtures.vision_models import build
from transmuter_mlx.hub import Repo
from transmuter_mlx.pipelines import segments
from transmuter_mlx.pipelines.resize import nearest
from transmuter_mlx.pipelines.segments import query_semantic_map, ranked_segments, semantic_map
from transmuter_mlx.pipelines.torch_topk import topk_unsorted
from transmuter_mlx.processors.image import ImageProcessor
from transmuter_mlx.processors.image.ops import fused_normalize
from transmuter_mlx.processors.image.resize import torch_resize

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers.image_utils import load_image as transformers_load_image  # noqa: E402

BACKENDS = ["mlx", "torch"]
ALL = [n for n in NAMES if n != "large_4000x3000"]
FEW = ["chelsea", "odd_217x333", "rgba", "tiny_1x1"]
PHOTOS = ("chelsea", "astronaut", "coffee", "odd_217x333", "gray")


# ---------------------------------------------------------------- the image processor
def reference(processor, name: str) -> dict[str, np.ndarray]:
    loaded = transformers_load_image(str(image_path(name)))
    layout = {"input_data_format": "channels_last"} if name == "tiny_1x1" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dict(processor(loaded, return_tensors="np", **layout))


def compare(processor, ours: ImageProcessor, names: list[str]) -> None:
    for name in names:
        want, got = reference(processor, name), ours.preprocess(str(image_path(name)), 0)[0]
        assert got.pixel_values.shape == want["pixel_values"].shape[1:], name
        np.testing.assert_array_equal(got.pixel_values, want["pixel_values"][0], err_msg=name)
        assert got.pixel_mask.dtype == np.int64 and ours.feed_names == ("pixel_values", "pixel_mask")
        np.testing.assert_array_equal(got.pixel_mask, want["pixel_mask"][0], err_msg=name)


CASES = [
    ("Mask2FormerImageProcessor", {}),
    ("Mask2FormerImageProcessor", {"size": 384}),  # facebook/mask2former-swin-*: the shortest edge 384
    ("Mask2FormerImageProcessor", {"size": {"shortest_edge": 48, "longest_edge": 64}, "size_divisor": 32,
                                   "pad_size": {"height": 64, "width": 64}, "ignore_index": 255}),  # the fixture's
    ("Mask2FormerImageProcessor", {"size": {"height": 100, "width": 150}, "size_divisor": 0}),
    ("Mask2FormerImageProcessor", {"size": [100, 150], "size_divisor": 16, "resample": 3,
                                   "image_mean": [0.5, 0.4, 0.3], "image_std": [0.2, 0.3, 0.25]}),
    ("Mask2FormerImageProcessor", {"do_resize": False, "size_divisor": 32, "do_normalize": False}),
    ("MaskFormerImageProcessor", {}),
    ("MaskFormerImageProcessor", {"size": 200, "max_size": 300, "pad_size": {"height": 320, "width": 320}}),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{n[:-14]}-{'-'.join(sorted(k)) or 'defaults'}" for n, k in CASES])
def test_processor_matches_transformers(case) -> None:
    name, kwargs = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processor = getattr(transformers, name)(**kwargs)
    ours = ImageProcessor.from_config(processor.to_dict(), "image-segmentation")
    assert type(ours).__name__ == "MaskFormer" and not ours.fast
    compare(processor, ours, ALL if not kwargs else FEW)


# raw configs as repositories hold them (legacy keys read by from_dict on the transformers side)
LEGACY = [
    {"feature_extractor_type": "MaskFormerFeatureExtractor", "size": 512, "max_size": 2048, "size_divisibility": 32,
     "reduce_labels": True, "ignore_index": 255},  # facebook/maskformer-swin-base-ade
    {"image_processor_type": "Mask2FormerImageProcessor", "size": 96, "max_size": 120, "do_pad": False},
    {"image_processor_type": "Mask2FormerImageProcessor", "size": None, "size_divisor": 64},
    {"image_processor_type": "Mask2FormerImageProcessor", "size": {"shortest_edge": 64, "longest_edge": None}},
]


@pytest.mark.parametrize("config", LEGACY, ids=range(len(LEGACY)))
def test_legacy_configs_match_transformers(config) -> None:
    name = (config.get("image_processor_type") or config["feature_extractor_type"]).replace(
        "FeatureExtractor", "ImageProcessor")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processor = getattr(transformers, name).from_dict(config)
    compare(processor, ImageProcessor.from_config(config), ["chelsea", "odd_333x217"])


def test_large_photo() -> None:
    processor = transformers.Mask2FormerImageProcessor(size=384)
    compare(processor, ImageProcessor.from_config(processor.to_dict()), ["large_4000x3000"])


def test_fast_type_sizes_as_detr_and_resizes_as_torch() -> None:
    """``Mask2FormerImageProcessorFast`` (torchvision, not installed here): DETR's size rule, the divisor,
    torch's antialiased resize, the fused normalisation, then the padding."""
    config = {"image_processor_type": "Mask2FormerImageProcessorFast", "size": {"shortest_edge": 300,
              "longest_edge": 400}, "size_divisor": 32, "pad_size": {"height": 448, "width": 448}}
    fast, slow = ImageProcessor.from_config(config), ImageProcessor.from_config(config, fast=False)
    assert fast.fast and not slow.fast
    # 300x451: 266x400 by either rule, then up to multiples of 32
    assert fast.output_size(300, 451) == slow.output_size(300, 451) == (288, 416)
    # 217x333: the short side 400 * 217 / 333 = 260.66, rounded by DETR's rule, truncated by torchvision's
    exact = {**config, "size_divisor": 0}
    assert ImageProcessor.from_config(exact).output_size(217, 333) == (261, 400)
    assert ImageProcessor.from_config(exact, fast=False).output_size(217, 333) == (260, 400)
    loaded = np.asarray(transformers_load_image(str(image_path("chelsea"))))
    resized = torch.nn.functional.interpolate(torch.from_numpy(loaded.transpose(2, 0, 1).copy())[None].float(),
                                              size=(288, 416), mode="bilinear", antialias=True)
    resized = resized.round().to(torch.uint8)[0].numpy().transpose(1, 2, 0)
    np.testing.assert_array_equal(torch_resize(loaded, (288, 416), 2), resized)
    want = np.zeros((448, 448, 3), np.float32)
    want[:288, :416] = fused_normalize(resized, True, 1 / 255, True, fast.image_mean, fast.image_std)
    got = fast.preprocess(str(image_path("chelsea")), 0)[0]
    np.testing.assert_array_equal(got.pixel_values, want.transpose(2, 0, 1))
    assert got.pixel_mask.sum() == 288 * 416 and got.pixel_mask[:288, :416].all()


def test_bad_configs_are_errors() -> None:
    def make(**config):
        return ImageProcessor.from_config({"image_processor_type": "Mask2FormerImageProcessor", **config}, "t")

    with pytest.raises(ValueError, match="size_divisor must be an int"):
        make(size_divisor=None)
    with pytest.raises(ValueError, match="size must contain 'height' and 'width' keys or 'shortest_edge'"):
        make(size={"shortest_edge": 300})
    with pytest.raises(ValueError, match="t: input 0: max_size = 300 must be strictly greater"):
        make(size={"shortest_edge": 300, "longest_edge": 300}).preprocess(np.zeros((10, 20, 3), np.uint8), 0)
    with pytest.raises(ValueError, match=r"t: input 1: pad_size .* is smaller than the resized image \(64x96\)"):
        make(size=64, pad_size={"height": 64, "width": 64}).preprocess(np.zeros((20, 30, 3), np.uint8), 1)


def test_the_fixture_is_fed_its_fixed_size() -> None:
    """The mask2former fixture's graph takes 64x64 only: its processor resizes within 48-64 px (each side up
    to a multiple of 32) and pads to 64x64, so every image is fed that size, and images batch."""
    folder = build("mask2former")
    expected = tuple(json.loads((folder / "fixture.json").read_text())["processor"]["pixel_values_shape"][1:])
    processor = ImageProcessor.from_repo(Repo(folder), "image-segmentation")
    assert type(processor).__name__ == "MaskFormer" and processor.fixed_size and expected == (3, 64, 64)
    hf = transformers.AutoImageProcessor.from_pretrained(str(folder))
    for name in ("chelsea", "odd_217x333", "odd_333x217", "tiny_1x1"):
        features = processor.preprocess(str(image_path(name)), 0)[0]
        assert features.pixel_values.shape == expected
        assert features.resized_size in ((64, 64), (32, 64), (64, 32)), name
    compare(hf, processor, ["chelsea", "odd_217x333", "odd_333x217", "tiny_1x1"])


def test_the_model_type_names_the_processor(tmp_path) -> None:
    folder = build("mask2former")
    for file in ("config.json", "preprocessor_config.json"):
        shutil.copy(folder / file, tmp_path / file)
    config = json.loads((tmp_path / "preprocessor_config.json").read_text())
    del config["image_processor_type"]
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(config))
    assert type(ImageProcessor.from_repo(Repo(tmp_path))).__name__ == "MaskFormer"


# ---------------------------------------------------------------- the post-processing in numpy
@pytest.mark.parametrize("seed", range(4))
def test_topk_unsorted_is_torchs(seed: int) -> None:
    """libstdc++'s nth_element (k * 64 > n) and partial_sort (k * 64 <= n) orders, as torch's CPU topk."""
    rng = np.random.default_rng(seed)
    unsorted = 0
    for trial in range(200):
        n = int(rng.integers(1, 2000)) if trial % 2 else int(rng.integers(1, 60))
        k = int(rng.integers(1, n + 1)) if trial % 3 else max(1, n // int(rng.integers(1, 130)))
        x = [rng.standard_normal(n), rng.integers(0, 4, n), np.exp(rng.standard_normal(n))][trial % 3]
        x = x.astype(np.float32)
        if trial % 7 == 0:
            x[rng.integers(0, n, 1 + n // 10)] = np.nan
        want = torch.topk(torch.from_numpy(x), k, sorted=False).indices.numpy()
        np.testing.assert_array_equal(topk_unsorted(x, k), want, err_msg=f"n={n} k={k}")
        unsorted += bool(np.any(np.diff(np.nan_to_num(x[want], nan=np.finfo(np.float32).max)) > 0))
    assert unsorted > 20, "cases whose order is not simply best first"
    with pytest.raises(ValueError, match="k must be within"):
        topk_unsorted(np.zeros(3, np.float32), 4)


@pytest.mark.parametrize("sizes", [((384, 384), (300, 451)), ((384, 384), (333, 217)), ((16, 16), (32, 33)),
                                   ((7, 5), (7, 10)), ((384, 384), (1, 1)), ((384, 384), (768, 383))])
def test_nearest_is_torchs(sizes) -> None:
    (h, w), size = sizes
    x = np.random.default_rng(h * w).standard_normal((3, h, w)).astype(np.float32)
    want = torch.nn.functional.interpolate(torch.from_numpy(x)[None], size=size, mode="nearest")[0].numpy()
    np.testing.assert_array_equal(nearest(x, size), want)
    np.testing.assert_array_equal(nearest(x > 0, size), want > 0)


def competing_queries(seed: int, queries: int, labels: int) -> tuple[np.ndarray, np.ndarray]:
    """Class logits with a few confident queries, and blobs of mask logits that overlap."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((queries, labels + 1)) * 2).astype(np.float32)
    logits[rng.permutation(queries)[:5], rng.integers(0, labels, 5)] += 6
    y, x = np.mgrid[0:12, 0:16]
    cy, cx = rng.uniform(0, 12, queries), rng.uniform(0, 16, queries)
    masks = np.stack([4 - ((y - cy[q]) ** 2 + (x - cx[q]) ** 2) / rng.uniform(4, 20) for q in range(queries)])
    return logits, masks.astype(np.float32)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("family", ["mask2former", "maskformer"])
def test_ranked_segments_are_transformers(family: str, seed: int) -> None:
    """post_process_instance_segmentation of Mask2Former (mask logits resized to 384x384 first) and MaskFormer;
    8 queries by 5 labels (torch's nth_element order) or 10 by 80 (partial_sort, best first)."""
    queries, labels = (10, 80) if seed % 3 == 0 else (8, 5)
    logits, masks = competing_queries(seed, queries, labels)
    if family == "mask2former":
        processor, size = transformers.Mask2FormerImageProcessor(), (384, 384)
    else:
        processor, size = transformers.MaskFormerImageProcessor(), None
    raw = SimpleNamespace(class_queries_logits=torch.from_numpy(logits)[None],
                          masks_queries_logits=torch.from_numpy(masks)[None])
    for threshold in (0.5, 0.1):
        want = processor.post_process_instance_segmentation(raw, threshold=threshold, target_sizes=[(37, 53)])[0]
        segmentation, info = ranked_segments(logits, masks, (37, 53), threshold, size)
        assert [(s["id"], s["label_id"]) for s in info] == [(s["id"], s["label_id"]) for s in want["segments_info"]]
        assert np.allclose([s["score"] for s in info], [s["score"] for s in want["segments_info"]], atol=1e-6)
        np.testing.assert_array_equal(segmentation, want["segmentation"].numpy())
    assert len(info) >= 2 and len({s["label_id"] for s in info}) >= 2, "segments to compare"


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("family", ["detr", "mask2former", "maskformer"])
def test_query_semantic_map_is_transformers(family: str, seed: int) -> None:
    logits, masks = competing_queries(seed, 8, 5)
    if family == "detr":
        processor, raw, size = transformers.DetrImageProcessor(), {"logits": logits, "pred_masks": masks}, None
    else:
        processor = getattr(transformers, "Mask2FormerImageProcessor" if family == "mask2former"
                            else "MaskFormerImageProcessor")()
        raw, size = {"class_queries_logits": logits, "masks_queries_logits": masks}, (384, 384)
        size = size if family == "mask2former" else None
    raw = SimpleNamespace(**{k: torch.from_numpy(v)[None] for k, v in raw.items()})
    want = processor.post_process_semantic_segmentation(raw, target_sizes=[(37, 53)])[0].numpy()
    got = query_semantic_map(logits, masks, (37, 53), size)
    assert (got == want).mean() >= 0.999 and len(np.unique(want)) >= 2


def test_label_maps_resize_a_block_of_labels_at_a_time(monkeypatch) -> None:
    logits = np.random.default_rng(0).standard_normal((7, 9, 11)).astype(np.float32)
    logits[3] = logits[5]  # a tie: the lower label wins, in a block or not
    whole = semantic_map(logits, (40, 50))
    monkeypatch.setattr(segments, "_BUDGET", 2 * 40 * 50)  # two labels per block
    np.testing.assert_array_equal(semantic_map(logits, (40, 50)), whole)
    assert 3 in whole and 5 not in whole


# ---------------------------------------------------------------- end to end
@functools.cache
def ours(fixture: str, backend: str):
    return tm.vision.image_segmentation(str(build(fixture)), backend=backend)


def test_subtasks_each_family_has() -> None:
    segment = ours("mask2former", "mlx")
    default, panoptic = (segment(image("astronaut"), threshold=0.5, **o)["segments"] for o in ({}, {"subtask": "panoptic"}))
    assert [s["score"] for s in default] == [s["score"] for s in panoptic] and len(default) == 2  # panoptic first
    semantic = tm.vision.image_segmentation(str(build("segformer")))
    with pytest.raises(ValueError, match=r"subtask 'instance' is not supported .* supports \['semantic'\]"):
        semantic(image("gray"), subtask="instance")


def test_mask2former_batches_its_fixed_size() -> None:
    """Every image is fed 64x64: batches of 2 (the last image alone) give the one-by-one results."""
    batched = tm.pipeline("image-segmentation", str(build("mask2former")), compile={"batch_size": 2})
    assert batched.batch_size == 2
    alone = [ours("mask2former", "mlx")(image(n), subtask="instance", threshold=0.3) for n in PHOTOS]
    together = batched([image(n) for n in PHOTOS], subtask="instance", threshold=0.3)
    for a, b in zip(alone, together, strict=True):
        assert [s["label"] for s in a["segments"]] == [s["label"] for s in b["segments"]]
        assert all((np.asarray(x["mask"]) == np.asarray(y["mask"])).all() for x, y in zip(a["segments"], b["segments"]))
    assert {dict(k)["pixel_values"][0] for k in batched.model.signatures()} == {(2, 3, 64, 64), (1, 3, 64, 64)}
