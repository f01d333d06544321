"""Model families at real shapes, the model alone: ours (mlx, torch) beside onnxruntime and PyTorch eager.

Where a family's export meets an op path of ours that PyTorch runs in fewer passes, it shows here first (this
sweep found `Resize` as gathers and `InstanceNormalization` as its formula on 2026-12-07). Each family is a
transformers model of a real checkpoint's configuration with random seeded weights, exported by optimum-onnx
(fp32, the transformers.js layout) into ``.cache/benchmarks/sweep/`` on first use; one input of the
checkpoint's usual size:

- ``segformer-b0``: ``SegformerForSemanticSegmentation`` of nvidia/mit-b0's shapes, 150 labels, 512 x 512;
- ``detr-r50``: ``DetrForObjectDetection`` of facebook/detr-resnet-50's shapes (transformers' ResNet-50
  backbone), 800 x 1066;
- ``wav2vec2-base``: ``Wav2Vec2ForSequenceClassification`` of facebook/wav2vec2-base's shapes, 10 s at 16 kHz;
- ``convnext-tiny``, ``swin-tiny``: ``ConvNextForImageClassification`` / ``SwinForImageClassification`` of
  facebook/convnext-tiny-224's and microsoft/swin-tiny-patch4-window7-224's shapes, 224 x 224;
- ``ast``: ``ASTForAudioClassification`` of MIT/ast-finetuned-audioset-10-10-0.4593's shapes (527 labels), its
  1024 frames of 128 mel bins;
- ``dinov2-small``: ``Dinov2Model`` of facebook/dinov2-small's shapes at 224 x 224 (its 37 x 37 position
  embeddings resized to 16 x 16 in the graph);
- ``mobilenet-v2``: ``MobileNetV2ForImageClassification`` of google/mobilenet_v2_1.0_224's shapes (1001 labels, its
  TensorFlow "same" padding as ``Pad`` nodes), 224 x 224.

Engines, each on the same feeds: ours ``load(onnx, backend="mlx"|"torch")``; onnxruntime (CPU provider, default
threads); PyTorch eager (the transformers model in ``inference_mode``, the "transformers" engine). Each engine runs
in a process of its own (onnxruntime's worker threads spin for tens of milliseconds after a call, and so do PyTorch's
OpenMP threads: in one process, engines called in turn slowed each other, a 14 ms MobileNetV2 call on torch to
27 ms), ``--rounds`` times in turn; a cell is the best round's median of at least ``--runs`` calls and a second of
them, after two warm-up calls, with the ratios to onnxruntime and to PyTorch, and the first output's max abs
difference to PyTorch's relative to its largest value.

    python benchmarks/model_sweep.py                          # table, and benchmarks/results/model-sweep.md
    python benchmarks/model_sweep.py --models wav2vec2-base --engines torch,transformers --output ''
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

import transmuter_mlx  # noqa: E402, F401  (first: it sets up the BLAS before mlx.core loads)
from benchmarks._report import (  # noqa: E402
    engine_cells,
    engines_arguments,
    environment,
    error_cell,
    publish,
    relative_difference,
)

CACHE = ROOT / ".cache" / "benchmarks" / "sweep"


@dataclass(frozen=True)
class Family:
    """A checkpoint's configuration: the optimum task, ``model(transformers)`` (its shapes, random weights), the
    float32 noise inputs' shapes, and where optimum's exporter reads the dummy input's size from a saved image
    processor (not from the config), ``processor(transformers)``."""

    task: str
    model: Callable[[Any], Any]
    inputs: dict[str, tuple[int, ...]]
    processor: Callable[[Any], Any] | None = None


IMAGE_224 = {"pixel_values": (1, 3, 224, 224)}
FAMILIES = {  # transformers' config defaults are the named checkpoint's shapes unless given
    "segformer-b0": Family("semantic-segmentation",  # nvidia/mit-b0
                           lambda T: T.SegformerForSemanticSegmentation(T.SegformerConfig(num_labels=150)),
                           {"pixel_values": (1, 3, 512, 512)}),
    "detr-r50": Family("object-detection",  # facebook/detr-resnet-50 on transformers' ResNet-50 (its pixel mask: ones)
                       lambda T: T.DetrForObjectDetection(T.DetrConfig(
                           use_timm_backbone=False, use_pretrained_backbone=False, backbone=None,
                           backbone_config=T.ResNetConfig(out_features=["stage4"]))),
                       {"pixel_values": (1, 3, 800, 1066)}),
    "wav2vec2-base": Family("audio-classification",  # facebook/wav2vec2-base, 10 s at 16 kHz
                            lambda T: T.Wav2Vec2ForSequenceClassification(T.Wav2Vec2Config(num_labels=10)),
                            {"input_values": (1, 160_000)}),
    "convnext-tiny": Family("image-classification",  # facebook/convnext-tiny-224
                            lambda T: T.ConvNextForImageClassification(T.ConvNextConfig()), IMAGE_224),
    "swin-tiny": Family("image-classification",  # microsoft/swin-tiny-patch4-window7-224
                        lambda T: T.SwinForImageClassification(T.SwinConfig()), IMAGE_224),
    "ast": Family("audio-classification",  # MIT/ast-finetuned-audioset-10-10-0.4593, 1024 frames of 128 mel bins
                  lambda T: T.ASTForAudioClassification(T.ASTConfig(num_labels=527)), {"input_values": (1, 1024, 128)}),
    "mobilenet-v2": Family("image-classification",  # google/mobilenet_v2_1.0_224 (its TensorFlow "same" padding)
                           lambda T: T.MobileNetV2ForImageClassification(T.MobileNetV2Config(num_labels=1001)),
                           IMAGE_224),
    "dinov2-small": Family("feature-extraction",  # facebook/dinov2-small: its 37 x 37 positions resized to 16 x 16
                           lambda T: T.Dinov2Model(T.Dinov2Config(image_size=518, hidden_size=384, num_hidden_layers=12,
                                                                  num_attention_heads=6)),
                           IMAGE_224,
                           processor=lambda T: T.BitImageProcessor(size={"shortest_edge": 256},
                                                                   crop_size={"height": 224, "width": 224})),
}


def _noise(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _export_source() -> str:
    """The source an export depends on: the families' definitions and ``build`` (not the timing code below it)."""
    text = Path(__file__).read_text()
    return text[text.index("FAMILIES = {"):text.index("def runner(")]


def build(name: str) -> tuple[Any, Path, dict[str, np.ndarray]]:
    """The family's PyTorch model (seeded), its ONNX file (exported once, cached by this file's and the packages'
    versions) and its feeds."""
    import torch
    import transformers
    from optimum.exporters.onnx import onnx_export_from_model

    from tests.fixtures.bert import PACKAGES

    family = FAMILIES[name]
    torch.manual_seed(0)
    model = family.model(transformers).eval()
    feeds = {k: _noise(shape) for k, shape in family.inputs.items()}
    key = hashlib.sha256(_export_source().encode())
    key.update(" ".join([name, *(f"{p}={importlib.metadata.version(p)}" for p in PACKAGES)]).encode())
    folder = CACHE / f"{name}-{key.hexdigest()[:12]}"
    path = folder / "model.onnx"
    if not path.exists():
        from tests.fixtures.cli import build_log

        folder.mkdir(parents=True, exist_ok=True)
        if family.processor is not None:
            family.processor(transformers).save_pretrained(folder)
            model.config._name_or_path = str(folder)
        with build_log(folder / "build.log"):  # the exporter's library logs go to a file
            onnx_export_from_model(model, folder, task=family.task, do_validation=False)
        model.eval()  # torch.onnx.export leaves a module in train mode
    return model, path, feeds


def runner(kind: str, model: Any, path: Path, feeds: dict[str, np.ndarray]) -> Callable[[], np.ndarray]:
    """``() -> the first output`` (numpy) of one engine on ``feeds``."""
    if kind == "transformers":
        import torch

        def eager() -> np.ndarray:
            with torch.inference_mode():
                out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
            return out[0].numpy()

        return eager
    if kind == "onnxruntime":
        from parity.ort_model import OrtModel

        engine = OrtModel(path, threads=0, exact=False)  # threads=0: one a core, as ours and PyTorch use
    else:
        from transmuter_mlx.converters.model import load

        engine = load(path, backend=kind)
    first = engine.outputs[0].name
    feeds = {k: v for k, v in feeds.items() if k in {i.name for i in engine.inputs}}
    return lambda: np.asarray(engine.backend.to_numpy(engine(feeds)[first]))


def engine_median(name: str, kind: str, runs: int, min_s: float = 1.0) -> tuple[float, np.ndarray]:
    """One engine on one family in this process: the median seconds of at least ``runs`` calls and ``min_s`` seconds
    of them (a 5 ms call timed 6 times is noise), after two warm-up calls (the first plans the signature, the second
    writes its replay), and its output."""
    model, path, feeds = build(name)
    run = runner(kind, model, path, feeds)
    out = run()
    run()
    times: list[float] = []
    while len(times) < runs or sum(times) < min_s:
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _in_worker(name: str, kind: str, runs: int, folder: Path) -> tuple[float, np.ndarray]:
    """``engine_median`` in a process of its own (``--worker``): its output comes back through ``folder``."""
    out = folder / f"{kind}.npy"
    cmd = [sys.executable, __file__, "--worker", name, kind, "--runs", str(runs), "--worker-output", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    if done.returncode != 0:
        raise RuntimeError(f"worker exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return float(done.stdout.strip().splitlines()[-1]), np.load(out)


def measure(names: list[str], engines: list[str], runs: int, verbose: bool, rounds: int = 2,
            isolated: bool = True) -> dict:
    """Each family's cells (``engine_cells``): every engine in a process of its own (``isolated``; the worker threads
    of onnxruntime and of PyTorch's OpenMP spin for tens of milliseconds after a call, and in one process they
    doubled a MobileNetV2 call on torch), ``rounds`` times in turn, each cell its best round's median."""
    results: dict[str, Any] = {"models": {}, "environment": environment(["mlx", "torch", "onnxruntime", "transformers"]),
                               "runs": runs, "rounds": rounds}
    for name in names:
        build(name)  # the export, once, before any worker
        medians: dict[str, float] = {}
        outputs: dict[str, np.ndarray] = {}
        errors: dict[str, str] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(rounds):
                for kind in engines:
                    if kind in errors:
                        continue
                    try:
                        seconds, outputs[kind] = (_in_worker(name, kind, runs, Path(tmp)) if isolated
                                                  else engine_median(name, kind, runs))
                    except Exception as e:  # noqa: BLE001 - one engine's failure leaves the others' numbers
                        errors[kind] = error_cell(e, verbose)
                        continue
                    medians[kind] = min(seconds, medians.get(kind, seconds))
        results["models"][name] = engine_cells(engines, medians, outputs, errors, agree=relative_difference)
        print(f"  {name} done", file=sys.stderr, flush=True)
    return results


def markdown(results: dict) -> str:
    env = results["environment"]
    lines = ["# Model families at real shapes, the model alone", "",
             f"Milliseconds a call (each engine in a process of its own: the best of {results.get('rounds', 1)} rounds' "
             f"medians of at least {results.get('runs', '?')} calls and 1 s of them, after two warm-up calls), ratio to "
             "onnxruntime (ort) and to PyTorch eager (pt); the first output's max abs difference to PyTorch's, "
             "relative to its largest value. `benchmarks/model_sweep.py`.", "",
             f"Machine: {env['machine']} ({env['cpu']}), {env['cpus']} CPUs (load average {env['load_average_1min']} "
             f"at start), Python {env['python']}; mlx {env.get('mlx')}, torch {env.get('torch')}, onnxruntime "
             f"{env.get('onnxruntime')}, transformers {env.get('transformers')}.", ""]
    kinds = list(next(iter(results["models"].values())).keys()) if results["models"] else []
    labels = {"mlx": "ours: mlx", "torch": "ours: torch", "onnxruntime": "onnxruntime", "transformers": "PyTorch eager"}
    lines += ["| model | " + " | ".join(labels.get(k, k) for k in kinds) + " |", "|---|" + "---|" * len(kinds)]
    for name, cells in results["models"].items():
        row = []
        for kind in kinds:
            c = cells[kind]
            if "error" in c:
                row.append(c["error"])
                continue
            ratios = ", ".join(f"{c[f'vs_{r}']:.2f}x {short}" for r, short in (("onnxruntime", "ort"),
                                                                              ("transformers", "pt")) if f"vs_{r}" in c)
            agree = c["output_equals_transformers"]
            row.append(f"{1000 * c['seconds']:.0f} ms ({ratios})" + ("" if agree is None else f", {agree:.1e}"))
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = engines_arguments(__doc__, ROOT / "benchmarks" / "results" / "model-sweep.md")
    parser.add_argument("--models", default=",".join(FAMILIES), help=f"a comma-separated subset of {','.join(FAMILIES)}")
    parser.add_argument("--rounds", type=int, default=2, help="every engine's process this many times in turn")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "ENGINE"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-output", help=argparse.SUPPRESS)
    parser.set_defaults(runs=6)
    args = parser.parse_args(argv)
    if args.worker:
        seconds, out = engine_median(*args.worker, args.runs)
        np.save(args.worker_output, out)
        print(seconds)
        return 0
    results = measure([m for m in args.models.split(",") if m], [e for e in args.engines.split(",") if e],
                      args.runs, args.verbose, args.rounds)
    return publish(results, markdown(results), args)


if __name__ == "__main__":
    sys.exit(main())
