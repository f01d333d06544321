"""The vision benchmark's models: real shapes, random seeded weights, in the transformers.js layout.

- ``vit-base``: ``ViTForImageClassification`` shaped as google/vit-base-patch16-224 (224 px, patch
  16, hidden 768, 12 layers, 12 heads, 1000 labels) with its ``ViTImageProcessor`` (224x224,
  bilinear, mean/std 0.5);
- ``clip-b32``: ``CLIPModel`` shaped as openai/clip-vit-base-patch32 (transformers' defaults: vision
  768 x 12 layers at 224 px, patch 32; text 512 x 12 layers, 77 positions, vocabulary 49408;
  projection 512) with its ``CLIPImageProcessor`` and a CLIP-style BPE tokenizer trained offline
  (512 pieces, as the tiny clip fixture's).
- ``depth-anything-small``: ``DepthAnythingForDepthEstimation`` shaped as LiheYoung/depth-anything-small-hf
  (a DINOv2-S/14 backbone, 384 x 12 layers, its last four layers into the DPT neck and head of transformers'
  defaults) with its ``DPTImageProcessor`` (fit in 518 x 518 keeping the aspect ratio, sides multiples of
  14, bicubic, ImageNet mean/std); the head's last convolution made positive, as the tiny fixture's.

Each is built once into ``.cache/benchmarks/<name>-<hash>/`` with the fixtures' lock and cache
(:func:`tests.fixtures.bert.build`) and exported by optimum-onnx to ``onnx/model.onnx`` (fp32 only),
checked against PyTorch in onnxruntime like every vision fixture (``tests/fixtures/vision_models.py``,
whose export, check and tokenizer helpers this module reuses). The hash covers the spec, this file
and the package versions. About 2 minutes and 1 GB the first time.

    python benchmarks/vision_models.py [vit-base clip-b32 depth-anything-small]   # build, print the folders
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures import bert  # noqa: E402
from tests.fixtures import vision_models as vm  # noqa: E402
from tests.fixtures.cli import build_log  # noqa: E402
from tests.fixtures.export import check_file, complete  # noqa: E402
from tests.fixtures.text_models import _io_names  # noqa: E402

CACHE = ROOT / ".cache" / "benchmarks"


@dataclass(frozen=True)
class BenchSpec:
    """A benchmark model: its name, family (``vit`` or ``clip``) and the seed of its weights."""

    name: str
    family: str
    seed: int = 0


SPECS = {s.name: s for s in (BenchSpec("vit-base", "vit", seed=1), BenchSpec("clip-b32", "clip", seed=2),
                            BenchSpec("depth-anything-small", "depth_anything", seed=3))}


def key(spec: BenchSpec) -> str:
    """The cache folder's hash: spec, bert.py and package versions (bert.fixture_key) and this file. Not the
    vision fixtures' module, which changes with every fixture: delete the folder to rebuild after a change
    to the helpers taken from it."""
    h = hashlib.sha256(bert.fixture_key(spec).encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:12]


def build(name: str, cache: Path | None = None) -> Path:
    """The folder of benchmark model ``name`` (see ``SPECS``), built if not cached."""
    spec = SPECS[name]
    return bert.build(spec, cache or CACHE, key=key(spec), fill=_fill, complete=complete)


def _vit(spec: BenchSpec) -> vm.Parts:
    import transformers as T

    config = T.ViTConfig(num_labels=1000)  # the defaults are vit-base-patch16-224's sizes
    processor = T.ViTImageProcessor()  # 224x224, bilinear, rescale, mean/std 0.5: google's
    return vm.Parts(T.ViTForImageClassification(config), processor, "image-classification", vm._image_feeds)


def _clip(spec: BenchSpec) -> vm.Parts:
    import transformers as T

    tok = vm._clip_tokenizer(77)
    config = T.CLIPConfig(text_config=vm._special_ids(tok), vision_config={})  # defaults: ViT-B/32's sizes
    processor = T.CLIPProcessor(image_processor=T.CLIPImageProcessor(), tokenizer=tok)
    return vm.Parts(T.CLIPModel(config), processor, "zero-shot-image-classification", vm._text_image_feeds)


def _depth_anything(spec: BenchSpec) -> vm.Parts:
    import types

    import transformers as T
    from optimum.exporters.onnx.model_configs import DptOnnxConfig

    backbone = T.Dinov2Config(image_size=518, patch_size=14, hidden_size=384, num_hidden_layers=12,
                              num_attention_heads=6, out_indices=[9, 10, 11, 12], reshape_hidden_states=False)
    config = T.DepthAnythingConfig(backbone_config=backbone)  # the neck and head defaults are the small model's
    config.image_size, config.num_channels = 518, 3  # read by optimum's dummy image generator
    processor = T.DPTImageProcessor(size={"height": 518, "width": 518}, keep_aspect_ratio=True, ensure_multiple_of=14,
                                    image_mean=vm.IMAGENET_MEAN, image_std=vm.IMAGENET_STD)
    model = T.DepthAnythingForDepthEstimation(config)
    model.head.forward = types.MethodType(vm._depth_anything_head_forward, model.head)  # the size traced
    return vm.Parts(model, processor, "depth-estimation", vm._one_image_feeds,
                    custom_onnx_configs={"model": DptOnnxConfig(config, task="depth-estimation")},
                    adjust=vm._positive_depth)


FAMILIES = {"vit": _vit, "clip": _clip, "depth_anything": _depth_anything}


def _fill(spec: BenchSpec, out: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    t0 = time.time()
    torch.manual_seed(spec.seed)
    parts = FAMILIES[spec.family](spec)
    if parts.adjust is not None:
        parts.adjust(parts.model)
    model = parts.model.eval()
    model.save_pretrained(out)
    parts.processor.save_pretrained(out)
    model.config._name_or_path = str(out)
    feeds = parts.feeds(parts.processor)
    onnx_dir = out / "onnx"
    vm._export(parts, onnx_dir)
    for f in onnx_dir.iterdir():  # only ONNX files under onnx/
        if not f.name.endswith((".onnx", ".onnx_data")):
            f.unlink()
    meta = {
        "spec": dataclasses.asdict(spec),
        "key": key(spec),
        "task": parts.task,
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "onnx": {"model.onnx": _io_names(onnx_dir / "model.onnx")},
        "check": {"model": check_file(onnx_dir / "model.onnx", model, feeds, vm.TOLERANCE,
                                      _io_names(onnx_dir / "model.onnx")["inputs"])},
        "seconds": round(time.time() - t0, 1),
    }
    (out / "fixture.json").write_text(json.dumps(meta, indent=1))


def main(argv: list[str] | None = None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(SPECS)
    for name in names:
        t0 = time.time()
        with build_log(CACHE / f"{name}.build.log"):  # the export's library logs go to a file
            folder = build(name)
        print(f"{name:10} {time.time() - t0:6.1f} s  {folder}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
