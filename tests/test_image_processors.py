"""Image processors against transformers 4.57.6's slow processors, and the fast resize against torch.

Each case builds a transformers processor with some kwargs, hands its ``to_dict()`` (or a raw legacy
config) to ours, and compares ``pixel_values`` (and ``pixel_mask``) on the test images loaded as the
pipelines load them (``transformers.image_utils.load_image``). Slow processors are exact (0 difference);
OWLv2's scipy resize is reproduced exactly too. The ``...Fast`` types resize as torch does: compared with
``torch.nn.functional.interpolate`` directly (torchvision, which transformers' fast processors call, is
not installed).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.fixtures.images import NAMES, image, image_path
from transmuter_mlx.hub import Repo, RepoFileNotFoundError
from transmuter_mlx.processors import Processor
from transmuter_mlx.processors.image import REGISTRY, ImageFeatures, ImageProcessor
from transmuter_mlx.processors.image.ops import (
    center_crop,
    center_crop_fast,
    fused_normalize,
    normalize,
    rescale,
)
from transmuter_mlx.processors.image.processors import shortest_edge_size
from transmuter_mlx.processors.image.resize import torch_resize

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
from transformers.image_utils import load_image as transformers_load_image  # noqa: E402

ALL = [n for n in NAMES if n != "large_4000x3000"]  # tiny_1x1 is compared with channels_last stated
FEW = ["chelsea", "odd_217x333", "rgba"]


def reference(processor, name: str) -> dict[str, np.ndarray]:
    """transformers' outputs for test image ``name``, loaded as its pipelines load it."""
    loaded = transformers_load_image(str(image_path(name)))
    # transformers reads a 1-pixel-high image as channels-first; a pipeline would fail on it
    layout = {"input_data_format": "channels_last"} if name == "tiny_1x1" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dict(processor(loaded, return_tensors="np", **layout))


def compare(processor, ours: ImageProcessor, names: list[str]) -> float:
    worst = 0.0
    if isinstance(processor, transformers.Owlv2ImageProcessor):
        # its pad and resize infer the layout again, so transformers reads a 1x1 image as 3 channels of 1x1
        # even when told channels_last (ours: a gray square, as any other 1x1 image)
        names = [n for n in names if n != "tiny_1x1"]
    for name in names:
        want = reference(processor, name)
        got = ours.preprocess(str(image_path(name)), 3)[0]
        assert isinstance(got, ImageFeatures) and got.owner == 3
        assert got.pixel_values.dtype == np.float32
        assert got.pixel_values.shape == want["pixel_values"].shape[1:], name
        worst = max(worst, float(np.abs(got.pixel_values - want["pixel_values"][0]).max()))
        if "pixel_mask" in want:
            assert "pixel_mask" in ours.feed_names and got.pixel_mask.dtype == np.int64
            np.testing.assert_array_equal(got.pixel_mask, want["pixel_mask"][0])
        else:
            assert got.pixel_mask is None and ours.feed_names == ("pixel_values",)
    return worst


# (transformers class, kwargs): the defaults, then settings real repositories use and odd ones
CASES = [
    ("ViTImageProcessor", {}),
    ("ViTImageProcessor", {"size": {"height": 96, "width": 128}, "resample": 3, "image_mean": [0.4, 0.5, 0.6],
                           "image_std": [0.2, 0.3, 0.25], "rescale_factor": 0.004}),
    ("ViTImageProcessor", {"size": 64, "do_normalize": False}),
    ("ViTImageProcessor", {"do_rescale": False, "image_mean": 127.5, "image_std": 64.0}),
    ("DeiTImageProcessor", {}),
    ("DeiTImageProcessor", {"size": {"height": 100, "width": 90}, "crop_size": 80, "resample": 2}),
    ("BeitImageProcessor", {}),
    ("BeitImageProcessor", {"do_center_crop": False, "size": 128}),
    ("CLIPImageProcessor", {}),
    ("CLIPImageProcessor", {"size": 128, "crop_size": {"height": 96, "width": 112}}),
    ("CLIPImageProcessor", {"size": {"height": 96, "width": 80}, "do_center_crop": False}),
    ("CLIPImageProcessor", {"size": {"shortest_edge": 96}, "use_square_size": True}),
    ("CLIPImageProcessor", {"size": 63, "crop_size": 99}),  # a crop larger than the image: zero padding
    ("BitImageProcessor", {}),
    ("BitImageProcessor", {"size": {"shortest_edge": 256}, "crop_size": 224, "resample": 3}),  # DINOv2's
    ("SiglipImageProcessor", {}),
    ("SiglipImageProcessor", {"size": {"height": 384, "width": 300}, "resample": 2}),
    ("ConvNextImageProcessor", {}),
    ("ConvNextImageProcessor", {"size": {"shortest_edge": 224}}),
    ("ConvNextImageProcessor", {"size": 160, "crop_pct": 0.95, "resample": 3}),
    ("MobileNetV1ImageProcessor", {}),
    ("MobileNetV2ImageProcessor", {"size": 200, "crop_size": 180}),
    ("OwlViTImageProcessor", {}),
    ("OwlViTImageProcessor", {"do_center_crop": True, "size": 200, "crop_size": 180}),
    ("SegformerImageProcessor", {}),
    ("SegformerImageProcessor", {"size": {"height": 128, "width": 160}}),
    ("DPTImageProcessor", {}),
    ("DPTImageProcessor", {"size": {"height": 518, "width": 518}, "keep_aspect_ratio": True,  # Depth Anything
                           "ensure_multiple_of": 14}),
    ("DPTImageProcessor", {"size": 200, "keep_aspect_ratio": True, "ensure_multiple_of": 32, "do_pad": True,
                           "size_divisor": 32}),
    ("Swin2SRImageProcessor", {}),
    ("Swin2SRImageProcessor", {"size_divisor": 16}),
    ("DetrImageProcessor", {}),
    ("DetrImageProcessor", {"size": {"shortest_edge": 300, "longest_edge": 400}}),
    ("DetrImageProcessor", {"size": {"max_height": 300, "max_width": 320}}),
    ("DetrImageProcessor", {"size": {"height": 200, "width": 250}, "do_pad": False}),
    ("DetrImageProcessor", {"size": {"shortest_edge": 300, "longest_edge": 500}, "pad_size": {"height": 520, "width": 540}}),
    ("ConditionalDetrImageProcessor", {"size": {"shortest_edge": 256, "longest_edge": 300}}),
    ("YolosImageProcessor", {}),
    ("YolosImageProcessor", {"size": {"shortest_edge": 512, "longest_edge": 864}}),
    ("RTDetrImageProcessor", {}),
    ("RTDetrImageProcessor", {"size": {"height": 320, "width": 480}, "do_normalize": True, "do_pad": True,
                              "pad_size": {"height": 330, "width": 500}}),
    ("GroundingDinoImageProcessor", {}),
    ("GroundingDinoImageProcessor", {"size": {"shortest_edge": 320, "longest_edge": 480}}),
    ("Owlv2ImageProcessor", {}),
    ("Owlv2ImageProcessor", {"size": {"height": 256, "width": 256}, "image_mean": [0.5, 0.5, 0.5]}),
    ("Owlv2ImageProcessor", {"do_pad": False, "size": 200}),
]


def case_id(case):
    name, kwargs = case
    return f"{name.removesuffix('ImageProcessor')}-{'-'.join(sorted(kwargs)) or 'defaults'}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_slow_processors_match_transformers(case):
    name, kwargs = case
    processor = getattr(transformers, name)(**kwargs)
    config = processor.to_dict()
    ours = ImageProcessor.from_config(config, "test")
    assert type(ours) is REGISTRY[name] and not ours.fast
    assert compare(processor, ours, ALL if not kwargs else FEW) == 0.0


# legacy configs as old repositories have them (read by from_dict on the transformers side)
LEGACY = [
    {"feature_extractor_type": "ViTFeatureExtractor", "size": 96, "resample": 2},
    {"feature_extractor_type": "CLIPFeatureExtractor", "size": 224, "crop_size": 224, "do_center_crop": True},
    {"feature_extractor_type": "ConvNextFeatureExtractor", "size": 224, "crop_pct": 0.875},
    {"feature_extractor_type": "DeiTFeatureExtractor", "size": 256, "crop_size": 224, "resample": 3},
    {"feature_extractor_type": "DetrFeatureExtractor", "size": 400, "max_size": 600},
    {"feature_extractor_type": "DetrFeatureExtractor", "size": 300, "pad_and_return_pixel_mask": False},
    {"feature_extractor_type": "YolosFeatureExtractor", "size": 400, "max_size": 700},
    {"feature_extractor_type": "OwlViTFeatureExtractor", "size": 96, "crop_size": 80, "do_center_crop": True,
     "rescale": False},
    {"feature_extractor_type": "SegformerFeatureExtractor", "size": 128, "resample": 2},
    {"feature_extractor_type": "DPTFeatureExtractor", "size": 96, "keep_aspect_ratio": True, "ensure_multiple_of": 32},
    {"image_processor_type": "Swin2SRImageProcessor", "pad_size": 16},
    {"image_processor_type": "Swin2SRImageProcessor", "pad_size": 16, "size_divisor": None},
    {"image_processor_type": "Owlv2ImageProcessor", "size": 128},
    {"image_processor_type": "ViTImageProcessor", "do_normalize": None, "image_mean": None},
    {"image_processor_type": "DeiTImageProcessor", "do_center_crop": None, "crop_size": None, "size": None},
]


@pytest.mark.parametrize("config", LEGACY, ids=[f"{c.get('feature_extractor_type') or c['image_processor_type']}"
                                                f"-{'-'.join(k for k in c if not k.endswith('_type'))}" for c in LEGACY])
def test_legacy_configs_match_transformers(config):
    name = (config.get("image_processor_type") or config["feature_extractor_type"]).replace(
        "FeatureExtractor", "ImageProcessor")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processor = getattr(transformers, name).from_dict(config)
    assert compare(processor, ImageProcessor.from_config(config), FEW) == 0.0


@pytest.mark.parametrize("resample", range(6), ids=["nearest", "lanczos", "bilinear", "bicubic", "box", "hamming"])
def test_every_pillow_filter(resample):
    processor = transformers.ViTImageProcessor(size={"height": 150, "width": 170}, resample=resample)
    ours = ImageProcessor.from_config(processor.to_dict())
    assert compare(processor, ours, ["chelsea", "odd_333x217", "tiny_1x1"]) == 0.0


@pytest.mark.parametrize("name", ["ViTImageProcessor", "DetrImageProcessor", "Owlv2ImageProcessor"])
def test_large_photo(name):
    processor = getattr(transformers, name)()
    assert compare(processor, ImageProcessor.from_config(processor.to_dict()), ["large_4000x3000"]) == 0.0


def test_input_kinds_give_the_same_pixels():
    ours = ImageProcessor.from_config(transformers.CLIPImageProcessor().to_dict())
    path = image_path("exif_rotated")
    want = ours.preprocess(str(path), 0)[0]
    assert want.original_size == (120, 80) and want.resized_size == (336, 224)  # EXIF-rotated, then resized
    loaded = np.asarray(transformers_load_image(str(path)))
    for item in (path, path.read_bytes(), image("exif_rotated"), loaded):
        np.testing.assert_array_equal(ours.preprocess(item, 0)[0].pixel_values, want.pixel_values)


# ------------------------------------------------------------------------------------------ fast types
def torch_reference(image: np.ndarray, size: tuple[int, int], resample: int) -> np.ndarray:
    """torchvision's uint8 resize on a CPU: bicubic and nearest in uint8, bilinear through float32 (the
    native uint8 bilinear only on AVX2 CPUs)."""
    tensor = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))[None]
    if resample == 0:
        out = torch.nn.functional.interpolate(tensor, size=size, mode="nearest-exact")
    elif resample == 3:
        out = torch.nn.functional.interpolate(tensor, size=size, mode="bicubic", antialias=True)
    else:
        out = torch.nn.functional.interpolate(tensor.float(), size=size, mode="bilinear", antialias=True)
        out = out.round().to(torch.uint8)
    return out[0].numpy().transpose(1, 2, 0)


RESIZES = [((300, 451), (224, 224)), ((217, 333), (500, 640)), ((1, 1), (224, 224)), ((1200, 1600), (224, 298)),
           ((512, 512), (512, 300)), ((97, 61), (96, 61)), ((33, 700), (33, 7))]


@pytest.mark.parametrize("resample", [0, 2, 3], ids=["nearest-exact", "bilinear", "bicubic"])
@pytest.mark.parametrize("sizes", RESIZES, ids=[f"{a[0]}x{a[1]}-{b[0]}x{b[1]}" for a, b in RESIZES])
def test_torch_resize_equals_torch(sizes, resample):
    (height, width), size = sizes
    source = np.random.default_rng(height).integers(0, 256, (height, width, 3), dtype=np.uint8)
    np.testing.assert_array_equal(torch_resize(source, size, resample), torch_reference(source, size, resample))
    if resample == 2:  # the native uint8 bilinear kernel of AVX2 CPUs
        native = torch.nn.functional.interpolate(torch.from_numpy(source.transpose(2, 0, 1).copy())[None], size=size,
                                                 mode="bilinear", antialias=True)[0].numpy().transpose(1, 2, 0)
        np.testing.assert_array_equal(torch_resize(source, size, 2, bilinear_uint8=True), native)


def test_torch_resize_refuses_other_filters():
    with pytest.raises(ValueError, match="nearest, bilinear or bicubic only, not lanczos"):
        torch_resize(np.zeros((4, 4, 3), np.uint8), (2, 2), 1)


def test_fused_normalize_is_torchs_arithmetic():
    x = np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    mean, std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    tensor = torch.from_numpy(x.transpose(2, 0, 1).copy()).float()
    scale = torch.tensor(mean) * (1.0 / (1 / 255)), torch.tensor(std) * (1.0 / (1 / 255))
    want = ((tensor - scale[0][:, None, None]) / scale[1][:, None, None]).numpy().transpose(1, 2, 0)
    got = fused_normalize(x, True, 1 / 255, True, mean, std)
    np.testing.assert_array_equal(got, want)
    slow = normalize(rescale(x, 1 / 255), mean, std)
    assert np.abs(got - slow).max() < 2e-6  # the slow processors' float64 rescale, then float32 normalise


def test_dpt_fast_pads_before_normalising():
    config = {"image_processor_type": "DPTImageProcessorFast", "size": 50, "do_pad": True, "size_divisor": 32,
              "keep_aspect_ratio": True}
    fast, slow = ImageProcessor.from_config(config), ImageProcessor.from_config(config, fast=False)
    a, b = (p.preprocess(np.full((40, 60, 3), 255, np.uint8), 0)[0].pixel_values for p in (fast, slow))
    assert a.shape == b.shape == (3, 64, 64)  # 33x50 (the scale closer to 1), padded to multiples of 32
    assert a[0, 0, 0] == -1.0 and b[0, 0, 0] == 0.0 and a[0, 32, 32] == b[0, 32, 32] == 1.0


@pytest.mark.parametrize("name, kwargs", [
    ("ViTImageProcessor", {}),
    ("CLIPImageProcessor", {"size": 63, "crop_size": 99}),
    ("ConvNextImageProcessor", {"size": 224}),
])
def test_fast_types_resize_crop_and_normalise_as_torch(name, kwargs):
    """A ``...Fast`` type: torch's resize, the fast crop, the fused normalisation; the rest as the slow one."""
    config = {**getattr(transformers, name)(**kwargs).to_dict(), "image_processor_type": f"{name}Fast"}
    fast, slow = ImageProcessor.from_config(config), ImageProcessor.from_config(config, fast=False)
    assert fast.fast and not slow.fast
    for photo in FEW:
        a, b = fast.preprocess(str(image_path(photo)), 0)[0], slow.preprocess(str(image_path(photo)), 0)[0]
        assert a.pixel_values.shape == b.pixel_values.shape and a.resized_size == b.resized_size
        # Pillow's and torch's filters differ by a few levels of 255 (normalised: about 0.1); a crop that
        # pads puts its odd column on the other side
        assert 0 < np.abs(a.pixel_values - b.pixel_values).max() < (4 if "crop_size" in kwargs else 0.25)
    loaded = np.asarray(transformers_load_image(str(image_path("chelsea"))))
    size = fast.output_size(*loaded.shape[:2])
    if name == "ConvNextImageProcessor":  # the shortest edge to 224 / crop_pct, then a crop of 224
        size = shortest_edge_size(*loaded.shape[:2], int(224 / fast.crop_pct))
    resized = torch_reference(loaded, size, fast.resample)
    want = fused_normalize(resized, True, fast.rescale_factor, True, fast.image_mean, fast.image_std)
    if name == "CLIPImageProcessor":  # crop 99x99 of 63x94: zero rows 18 above, 18 below; columns 2 left, 3 right
        assert resized.shape[:2] == (63, 94)
        want = fused_normalize(np.pad(resized, ((18, 18), (2, 3), (0, 0))), True, fast.rescale_factor,
                               True, fast.image_mean, fast.image_std)
    elif name == "ConvNextImageProcessor":  # 256x384: torchvision's anchor round(80.0) is 80
        assert resized.shape[:2] == (256, 384)
        want = want[16:240, 80:304]
    np.testing.assert_array_equal(fast.preprocess(str(image_path("chelsea")), 0)[0].pixel_values,
                                  want.transpose(2, 0, 1))


# ------------------------------------------------------------------------------------------ the protocol
def test_names_map_as_transformers_maps_them():
    for name, cls in [("ViTFeatureExtractor", "ViT"), ("CLIPFeatureExtractor", "CLIP"), ("DeiTImageProcessorFast", "DeiT"),
                      ("ConvNextFeatureExtractor", "ConvNext"), ("DetrFeatureExtractor", "Detr"),
                      ("GroundingDinoImageProcessorFast", "Detr"), ("Owlv2ImageProcessor", "Owlv2")]:
        key = "feature_extractor_type" if "FeatureExtractor" in name else "image_processor_type"
        processor = ImageProcessor.from_config({key: name})
        assert type(processor).__name__ == cls and processor.fast == name.endswith("Fast")
    assert not ImageProcessor.from_config({"image_processor_type": "ViTImageProcessorFast"}, fast=False).fast
    assert type(ImageProcessor.from_config({"image_processor_type": "BitImageProcessor"})).__name__ == "Bit"


def test_unknown_types_are_errors():
    with pytest.raises(ValueError, match=r"t: image processor 'LlavaImageProcessor' is not supported; supported: .*"
                                         r"BeitImageProcessor.*ViTImageProcessor"):
        ImageProcessor.from_config({"image_processor_type": "LlavaImageProcessor"}, "t")
    with pytest.raises(ValueError, match="names no image_processor_type or feature_extractor_type"):
        ImageProcessor.from_config({"size": 224})


def test_bad_configs_are_errors():
    with pytest.raises(ValueError, match="ViT: size must have height and width"):
        ImageProcessor.from_config({"image_processor_type": "ViTImageProcessor", "size": {"shortest_edge": 3}})
    with pytest.raises(ValueError, match="resample 9 is not a Pillow filter"):
        ImageProcessor.from_config({"image_processor_type": "ViTImageProcessor", "resample": 9})
    with pytest.raises(ValueError, match="resample must be a Pillow filter .* got null"):
        ImageProcessor.from_config({"image_processor_type": "ViTImageProcessor", "resample": None})
    with pytest.raises(ValueError, match="do_pad needs a size_divisor"):
        ImageProcessor.from_config({"image_processor_type": "DPTImageProcessor", "do_pad": True})
    with pytest.raises(ValueError, match="must have the keys of one of"):
        ImageProcessor.from_config({"image_processor_type": "CLIPImageProcessor", "size": {"edge": 3}})
    with pytest.raises(ValueError, match="image_mean must have 3 values"):
        ImageProcessor.from_config({"image_processor_type": "ViTImageProcessor", "image_mean": [0.5]}).preprocess(
            np.zeros((4, 4, 3), np.uint8), 0)


def test_bad_images_name_the_input():
    ours = ImageProcessor.from_config({"image_processor_type": "ViTImageProcessor"}, "image-classification")
    with pytest.raises(TypeError, match="image-classification: input 4: an image array must be uint8"):
        ours.preprocess(np.zeros((4, 4, 3), np.float32), 4)
    small = ImageProcessor.from_config({"image_processor_type": "DetrImageProcessor",
                                        "pad_size": {"height": 10, "width": 10}}, "object-detection")
    with pytest.raises(ValueError, match=r"object-detection: input 2: pad_size .* is smaller than the resized image"):
        small.preprocess(np.zeros((4, 4, 3), np.uint8), 2)


def test_protocol_bucket_collate_cut():
    detr = ImageProcessor.from_config(transformers.DetrImageProcessor(size={"height": 64, "width": 80}).to_dict())
    assert isinstance(detr, Processor) and detr.kind == "image" and detr.fixed_size
    rows = [detr.preprocess(np.zeros((30 + i, 40, 3), np.uint8), i)[0] for i in range(3)]
    bucket = detr.bucket(rows[0])
    assert bucket == (3, 64, 80) and {detr.bucket(r) for r in rows} == {bucket}
    feeds = detr.collate(rows, bucket)
    assert feeds["pixel_values"].shape == (3, 3, 64, 80) and feeds["pixel_values"].dtype == np.float32
    assert feeds["pixel_mask"].shape == (3, 64, 80) and feeds["pixel_mask"].dtype == np.int64
    value = np.ones((100, 92))
    assert detr.cut(value, rows[0], bucket) is value
    swin2sr = ImageProcessor.from_config({"image_processor_type": "Swin2SRImageProcessor"})
    assert not swin2sr.fixed_size
    a, b = (swin2sr.preprocess(np.zeros((9, w, 3), np.uint8), i)[0] for i, w in enumerate((9, 17)))
    assert a.pixel_values.shape == (3, 16, 16) and b.pixel_values.shape == (3, 16, 24)
    with pytest.raises(ValueError, match="cannot share the batch"):
        swin2sr.collate([a, b], swin2sr.bucket(a))


def test_fixed_size():
    def fixed(name, **config):
        return ImageProcessor.from_config({"image_processor_type": name, **config}).fixed_size

    assert fixed("ViTImageProcessor") and fixed("CLIPImageProcessor") and fixed("Owlv2ImageProcessor")
    assert not fixed("CLIPImageProcessor", do_center_crop=False) and fixed("DPTImageProcessor")
    assert not fixed("DPTImageProcessor", keep_aspect_ratio=True) and not fixed("DetrImageProcessor")
    assert fixed("DetrImageProcessor", pad_size={"height": 800, "width": 1333}) and fixed("RTDetrImageProcessor")
    assert not fixed("YolosImageProcessor") and not fixed("Swin2SRImageProcessor")


def test_from_repo(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "dinov2"}')
    with pytest.raises(RepoFileNotFoundError, match="t: folder .* has no preprocessor_config.json"):
        ImageProcessor.from_repo(Repo(tmp_path), "t")
    (tmp_path / "preprocessor_config.json").write_text('{"size": {"shortest_edge": 256}, "crop_size": 224}')
    processor = ImageProcessor.from_repo(Repo(tmp_path), "t")  # no type: the model type's (BiT for DINOv2)
    assert type(processor).__name__ == "Bit" and processor.size == {"shortest_edge": 256}
    (tmp_path / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="preprocessor_config.json is not valid JSON"):
        ImageProcessor.from_repo(Repo(tmp_path), "t")


def test_crops_place_odd_pixels_as_transformers():
    column = np.arange(1, 9, dtype=np.uint8).reshape(8, 1, 1)  # rows 1..8
    crop = transformers.image_transforms.center_crop(column, (5, 1), input_data_format="channels_last")
    assert center_crop(column, (5, 1))[:, 0, 0].tolist() == crop[:, 0, 0].tolist() == [2, 3, 4, 5, 6]
    assert center_crop_fast(column, (5, 1))[:, 0, 0].tolist() == [2, 3, 4, 5, 6]  # int(1.5): 1
    assert center_crop_fast(column, (5, 1), rounded=True)[:, 0, 0].tolist() == [3, 4, 5, 6, 7]  # round(1.5): 2
    small = np.ones((2, 1, 1), np.uint8)
    padded = transformers.image_transforms.center_crop(small, (5, 1), input_data_format="channels_last")
    assert center_crop(small, (5, 1))[:, 0, 0].tolist() == padded[:, 0, 0].tolist() == [0, 0, 1, 1, 0]
    assert center_crop_fast(small, (5, 1))[:, 0, 0].tolist() == [0, 1, 1, 0, 0]  # torchvision pads after


def test_transformers_js_generic_image_feature_extractor():
    """transformers.js's ImageFeatureExtractor (background removal; no Python class): Pillow's resize, then
    JavaScript's arithmetic (a double product stored float32, a double normalisation stored float32)."""
    config = {"feature_extractor_type": "ImageFeatureExtractor", "do_resize": True, "size": {"width": 64, "height": 48},
              "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
              "image_mean": [0.5, 0.5, 0.5], "image_std": [1, 1, 1]}
    ours = ImageProcessor.from_config(config, "background-removal")
    assert type(ours).__name__ == "Generic" and ours.fixed_size
    loaded = transformers_load_image(str(image_path("rgba")))
    resized = np.asarray(loaded.resize((64, 48), 2)).astype(np.float64)
    want = (((resized * (1 / 255)).astype(np.float32) - np.array([0.5] * 3)) / np.array([1.0] * 3)).astype(np.float32)
    np.testing.assert_array_equal(ours.preprocess(str(image_path("rgba")), 0)[0].pixel_values, want.transpose(2, 0, 1))
    unresized = ImageProcessor.from_config({"feature_extractor_type": "ImageFeatureExtractor"})
    assert not unresized.fixed_size
    assert unresized.preprocess(np.full((5, 7, 3), 255, np.uint8), 0)[0].pixel_values.max() == 1.0
    with pytest.raises(ValueError, match="do_pad .* is not supported"):
        ImageProcessor.from_config({**config, "do_pad": True})
