"""Vision pipelines' throughput: ours (mlx, torch) beside onnxruntime and the transformers pipeline.

Models of real shapes with random seeded weights (``benchmarks/vision_models.py``): a ViT-base image
classifier (``image_classification``), a CLIP ViT-B/32 scoring 5 candidate labels
(``zero_shot_image_classification``) and, on request, Depth Anything small (``depth_estimation``, one
image a call: its sizes follow each image's), all optimum-onnx exports in the transformers.js layout. The
images are scikit-image's photographs (``tests/fixtures/images.py``), by path, cycled to fill the
batch. Engines, side by side in one process:

- ``mlx``, ``torch``: ``tm.vision.<task>(folder, backend=..., compile={"batch_size": B})``;
- ``onnxruntime``: the same pipeline of ours with an ``InferenceSession`` on ``onnx/model.onnx`` as its
  model (``model=``), so the same image loading, image processor, batching and postprocessing;
- ``transformers``: ``transformers.pipeline(task, folder)`` on the PyTorch weights, with its slow image
  processor (the saved one; torchvision, which the fast ones need, is not installed), ``batch_size=B``.

Each cell is the median of ``--runs`` timed passes after a warm-up pass, in images per second, with
its ratio to onnxruntime and to transformers. The engines of a batch size are loaded together and
their passes interleaved (a round is one pass of each), so that other jobs on a shared machine
slow them alike and the ratios hold. At batch 1 every image is its own call (latency, ms
per image); at batch 16 each engine gets ``--images`` paths in one call. Reported apart: the model
alone on a preprocessed batch (ours: ``pipe.run_model``; transformers: its PyTorch model), and the
image loading and preprocessing per image (ours vs transformers' slow image processor), from which
the breakdown table splits each pipeline's time into preprocessing, model and the rest.

    python benchmarks/vision.py                # table, and benchmarks/results/vision.md
    python benchmarks/vision.py --json         # the same numbers as JSON on stdout
    python benchmarks/vision.py --models vit-base --batches 1 --runs 1 --engines mlx,onnxruntime --output ''
    python benchmarks/vision.py --models depth-anything-small --batches 1 --output benchmarks/results/vision-depth.md
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

import transmuter_mlx as tm  # noqa: E402  (first: it sets up the BLAS before mlx.core loads)
from benchmarks._report import environment, error_cell, relative_difference  # noqa: E402
from parity.ort_model import OrtModel  # noqa: E402

ENGINES = ("mlx", "torch", "onnxruntime", "transformers")
MORE_ENGINES = ("mlx-cache",)  # on request: ours on mlx with MLX's buffer cache raised (see Engine)
LABELS = {"mlx": "ours: mlx", "torch": "ours: torch", "onnxruntime": "onnxruntime", "transformers": "transformers",
          "mlx-cache": "ours: mlx, 2 GB MLX cache"}
MLX_CACHE_BYTES = 2 << 30
BUSY_LOAD = 3.0  # a 1-minute load average above this at the end: other jobs ran (this one makes ~2)
MODELS = {  # benchmark model -> (task, its output the model-only cells compare)
    "vit-base": ("image-classification", "logits"),
    "clip-b32": ("zero-shot-image-classification", "logits_per_image"),
    "depth-anything-small": ("depth-estimation", "predicted_depth"),
}
DEFAULT_MODELS = ("vit-base", "clip-b32")
ONE_IMAGE_A_CALL = {"depth-estimation"}  # each image keeps its own size: no batch of several
DESCRIPTIONS = {
    "vit-base": "ViT-base (google/vit-base-patch16-224's shapes, 1000 labels) through `image_classification`",
    "clip-b32": "CLIP ViT-B/32 (openai/clip-vit-base-patch32's) scoring {n} candidate labels through "
                "`zero_shot_image_classification`",
    "depth-anything-small": "Depth Anything small (LiheYoung/depth-anything-small-hf's shapes: DINOv2-S/14, images "
                            "fit in 518 x 518) through `depth_estimation`",
}
CANDIDATES = ["tabby cat", "golden retriever", "coffee mug", "espresso", "astronaut"]  # the zero-shot labels


# ---------------------------------------------------------------------------------- engines
class Engine:
    """One engine for one model and batch size: ``predict(paths)`` (batched as the engine batches at ``batch``:
    ``{label: score}`` an image, or its depth map as numpy), ``run_model(feeds) -> the compared output`` (numpy) and
    the pipeline.

    ``mlx-cache`` is ``mlx`` with ``mx.set_cache_limit(2 GB)`` while it runs (``active()``): MLX's CPU
    allocator keeps only 32 MB of freed buffers by default, so the larger activations of a batch go back
    to the OS and every call page-faults them in again.
    """

    def __init__(self, kind: str, name: str, folder: Path, batch: int):
        self.kind, self.name, self.batch = kind, name, batch
        self.task, self.output = MODELS[name]
        backend = "mlx" if kind == "mlx-cache" else kind
        if kind == "transformers":
            import transformers

            self.pipe = transformers.pipeline(self.task, model=str(folder), device="cpu")
        else:
            options: dict[str, Any] = {"compile": {"batch_size": batch}}
            if kind == "onnxruntime":
                options["model"] = OrtModel(folder / "onnx" / "model.onnx", threads=0, exact=False)
            else:
                options["backend"] = backend
            if self.task == "zero-shot-image-classification":
                options["labels"] = CANDIDATES
            self.pipe = tm.pipeline(self.task, str(folder), **options)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Around each call: ``mlx-cache`` raises MLX's cache limit (process-wide), and puts it back after."""
        if self.kind != "mlx-cache":
            yield
            return
        import mlx.core as mx

        previous = mx.set_cache_limit(MLX_CACHE_BYTES)
        try:
            yield
        finally:
            mx.set_cache_limit(previous)

    def predict(self, paths: list[str]) -> list[Any]:
        if self.kind == "transformers":
            extra = {"candidate_labels": CANDIDATES} if self.task == "zero-shot-image-classification" else {}
            if self.batch == 1:
                results = [self.pipe(p, **extra) for p in paths]
            else:
                results = self.pipe(paths, batch_size=self.batch, **extra)
        elif self.batch == 1:
            results = [self.pipe(p) for p in paths]
        else:
            results = self.pipe(paths)
        if self.task == "depth-estimation":
            return [np.asarray(r["predicted_depth"], np.float32) for r in results]
        if self.kind == "transformers":
            return [{r["label"]: r["score"] for r in result} for result in results]
        return [{r["label"]: r["score"] for r in result["predictions"]} for result in results]

    def run_model(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        if self.kind == "transformers":
            import torch

            with torch.inference_mode():
                out = self.pipe.model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
            return getattr(out, self.output).numpy()
        return self.pipe.run_model(feeds)[self.output]


def model_feeds(name: str, folder: Path, paths: list[str]) -> dict[str, np.ndarray]:
    """The model's feeds for ``paths`` as our pipeline makes them (pixels, and the labels' texts for CLIP),
    from a pipeline that only preprocesses (an ``OrtModel`` it never calls)."""
    task, _ = MODELS[name]
    options = {"labels": CANDIDATES} if task == "zero-shot-image-classification" else {}
    model = OrtModel(folder / "onnx" / "model.onnx", threads=0, exact=False)
    pipe = tm.pipeline(task, str(folder), model=model, **options)
    rows = [row for i, p in enumerate(paths) for row in pipe.preprocess(i, p, {}).rows]
    feeds = pipe.processor.collate(rows, pipe.processor.bucket(rows[0]))
    return feeds | pipe.prepare_options(pipe.call_options({})).get("text_feeds", {})


# ---------------------------------------------------------------------------------- timing
def timed(fn: Callable[[], Any], runs: int, budget_s: float) -> dict:
    """A warm-up call (``first_call_s``), then up to ``runs`` timed calls while their sum is under the
    budget; the median and the warm-up's result (``_out``)."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    times: list[float] = []
    while len(times) < runs and (not times or sum(times) < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "runs": len(times), "first_call_s": first, "_out": out}


def interleaved(calls: dict[str, Callable[[], Any]], engines: dict[str, Engine], runs: int, budget_s: float,
                verbose: bool) -> dict[str, dict]:
    """Each engine's warm-up call (``first_call_s``, its result ``_out``), then rounds of one timed call of
    every engine in turn, so that a change in the machine's load (other jobs) hits them alike: up to
    ``runs`` rounds while the slowest engine's timed total is under ``budget_s``; each engine's median."""
    cells: dict[str, dict] = {}
    times: dict[str, list[float]] = {k: [] for k in calls}

    def call(kind: str) -> tuple[float, Any]:
        with engines[kind].active():
            t0 = time.perf_counter()
            out = calls[kind]()
            return time.perf_counter() - t0, out

    for kind in calls:
        try:
            first, out = call(kind)
            cells[kind] = {"first_call_s": first, "_out": out}
        except Exception as e:  # noqa: BLE001  (a failing engine is reported in its cell)
            cells[kind] = {"error": error_cell(e, verbose)}
    live = [k for k in calls if "error" not in cells[k]]
    while live and len(times[live[0]]) < runs and (not times[live[0]] or max(sum(times[k]) for k in live) < budget_s):
        for kind in list(live):
            try:
                times[kind].append(call(kind)[0])
            except Exception as e:  # noqa: BLE001
                cells[kind] = {"error": error_cell(e, verbose)}
                live.remove(kind)
    for kind in live:
        cells[kind] |= {"median_s": statistics.median(times[kind]), "runs": len(times[kind])}
    return cells


def preprocessing(name: str, folder: Path, photos: list[str], runs: int) -> dict:
    """ms per image: decoding the file (ours ``load_image`` and transformers') and the image processor on
    the decoded image (ours and transformers' slow one), each the median of ``runs`` passes over ``photos``."""
    import transformers
    from transformers.image_utils import load_image as hf_load_image

    from transmuter_mlx.hub import open_repo
    from transmuter_mlx.images import load_image
    from transmuter_mlx.processors.image import ImageProcessor

    task, _ = MODELS[name]
    ours = ImageProcessor.from_repo(open_repo(str(folder)), task)
    theirs = transformers.AutoImageProcessor.from_pretrained(str(folder), use_fast=False)
    images = [load_image(p) for p in photos]

    def per_image(fn: Callable[[Any], Any], items: list) -> float:
        def one_pass() -> None:
            for item in items:
                fn(item)
        return 1000 * timed(one_pass, runs, 30.0)["median_s"] / len(items)

    ours_pixels = [ours.preprocess(i, 0)[0].pixel_values for i in images]
    their_pixels = [theirs(images=i, return_tensors="np")["pixel_values"][0] for i in images]
    return {
        "processor": type(theirs).__name__,
        "decode_ms": {"ours": per_image(load_image, photos), "transformers": per_image(hf_load_image, photos)},
        "preprocess_ms": {
            "ours": per_image(lambda i: ours.preprocess(i, 0), images),
            "transformers": per_image(lambda i: theirs(images=i, return_tensors="np"), images),
        },
        "pixel_values_max_abs_diff": max(float(np.abs(a - b).max()) for a, b in zip(ours_pixels, their_pixels, strict=True)),
    }


def agreement(task: str, got: list[Any], ref: list[Any]) -> str:
    """How ``got`` agrees with transformers' ``ref``, image by image: the max |score difference| over the labels
    both report and how many images agree on the top label; for depth maps, the max |difference| relative to each
    reference map's largest value (the spec's measure)."""
    if task in ONE_IMAGE_A_CALL:
        worst = max(relative_difference(r, g) for g, r in zip(got, ref, strict=True))
        return f"depth {worst:.1e} of the largest"
    diffs = [abs(g[k] - r[k]) for g, r in zip(got, ref, strict=True) for k in g.keys() & r.keys()]
    top = sum(max(g, key=g.get) == max(r, key=r.get) for g, r in zip(got, ref, strict=True))
    return (f"scores {max(diffs):.1e}, " if diffs else "") + f"top-1 {top}/{len(ref)}"


def bench(args: argparse.Namespace) -> dict:
    from benchmarks.vision_models import build as build_model
    from tests.fixtures.images import PHOTOS, photo

    photos = [photo(p) for p in PHOTOS]
    kinds = [k for k in args.engines.split(",") if k]
    batches = [int(b) for b in args.batches.split(",") if b]
    result: dict[str, Any] = {"environment": _environment(), "photos": list(PHOTOS), "models": {}}
    result["environment"]["waited_for_quiet_s"] = _wait_quiet(args.quiet_load, args.quiet_wait)
    result["environment"]["load_average_1min"] = round(os.getloadavg()[0], 2)
    for name in [m for m in args.models.split(",") if m]:
        folder = build_model(name)
        meta = json.loads((folder / "fixture.json").read_text())
        entry: dict[str, Any] = {"folder": str(folder), "parameters": meta.get("parameters"), "batches": {}}
        entry["preprocessing"] = preprocessing(name, folder, photos, args.runs)
        print(f"  {name}: preprocessing done", file=sys.stderr, flush=True)
        for batch in batches:
            if batch > 1 and MODELS[name][0] in ONE_IMAGE_A_CALL:
                print(f"  {name}: batch {batch} skipped (one image a call)", file=sys.stderr, flush=True)
                continue
            count = args.latency_images if batch == 1 else args.images
            paths = [photos[i % len(photos)] for i in range(count)]
            feeds = model_feeds(name, folder, paths[:batch])
            row: dict[str, dict] = {}
            engines: dict[str, Engine] = {}
            for kind in kinds:
                try:
                    t0 = time.perf_counter()
                    engines[kind] = Engine(kind, name, folder, batch)
                    row[kind] = {"load_s": time.perf_counter() - t0}
                except Exception as e:  # noqa: BLE001  (a failing engine is reported in its cells)
                    row[kind] = {"error": error_cell(e, args.verbose)}
            pipes = interleaved({k: lambda e=e, p=paths: e.predict(p) for k, e in engines.items()}, engines,
                                args.runs, args.budget, args.verbose)
            print(f"  {name} batch {batch}: pipelines done", file=sys.stderr, flush=True)
            models = interleaved({k: lambda e=e, f=feeds: e.run_model(f) for k, e in engines.items()}, engines,
                                 args.runs, args.budget, args.verbose)
            print(f"  {name} batch {batch}: models done", file=sys.stderr, flush=True)
            outs = {k: c.pop("_out") for k, c in pipes.items() if "_out" in c}
            model_outs = {k: np.asarray(c.pop("_out"), np.float32) for k, c in models.items() if "_out" in c}
            for kind, cell in pipes.items():
                if "error" in cell:
                    row[kind] = cell
                    continue
                row[kind] |= cell | {"images": count, "images_per_s": count / cell["median_s"],
                                     "ms_per_image": 1000 * cell["median_s"] / count}
                model = models[kind]
                row[kind]["model"] = model if "error" in model else model | {"images_per_s": batch / model["median_s"]}
            del engines
            gc.collect()
            _compare(MODELS[name][0], row, outs, model_outs)
            entry["batches"][str(batch)] = row
        result["models"][name] = entry
    result["environment"]["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    return result


def _compare(task: str, row: dict[str, dict], outs: dict[str, list], model_outs: dict[str, np.ndarray]) -> None:
    """Ratios to onnxruntime and transformers; scores against transformers, model outputs against onnxruntime."""
    for kind, cell in row.items():
        if "images_per_s" not in cell:
            continue
        model = cell["model"]
        for base in ("onnxruntime", "transformers"):
            if "images_per_s" in row.get(base, {}):
                cell[f"ratio_to_{base}"] = cell["images_per_s"] / row[base]["images_per_s"]
            if "images_per_s" in model and "images_per_s" in row.get(base, {}).get("model", {}):
                model[f"ratio_to_{base}"] = model["images_per_s"] / row[base]["model"]["images_per_s"]
        if "transformers" in outs:
            cell["vs_transformers"] = agreement(task, outs[kind], outs["transformers"])
        if "onnxruntime" in model_outs and kind in model_outs:
            model["max_abs_diff_vs_onnxruntime"] = float(np.abs(model_outs[kind] - model_outs["onnxruntime"]).max())


def _wait_quiet(threshold: float, max_wait_s: float) -> float | None:
    """Seconds spent waiting for the 1-minute load average to drop under ``threshold`` (None: it never did
    within ``max_wait_s``; 0 when not asked)."""
    if threshold <= 0:
        return 0.0
    t0 = time.time()
    while os.getloadavg()[0] >= threshold:
        if time.time() - t0 > max_wait_s:
            return None
        print(f"  load {os.getloadavg()[0]:.2f} >= {threshold}: waiting", file=sys.stderr, flush=True)
        time.sleep(30)
    return round(time.time() - t0)


def _environment() -> dict:
    env = environment(("mlx", "torch", "onnxruntime", "transformers", "numpy", "PIL"))
    env["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    try:
        env["torch_threads"] = __import__("torch").get_num_threads()
    except Exception:  # noqa: BLE001
        env["torch_threads"] = None
    return env


# ---------------------------------------------------------------------------------- report
def _ratios(c: dict) -> str:
    parts = [f"{c[f'ratio_to_{b}']:.2f}x {short}" for b, short in (("onnxruntime", "ort"), ("transformers", "tf"))
             if f"ratio_to_{b}" in c]
    return f" ({', '.join(parts)})" if parts else ""


def markdown(result: dict, runs: int) -> str:
    env = result["environment"]
    blas = env["mlx_blas"].get("library") or env["mlx_blas"].get("status")
    waited = env.get("waited_for_quiet_s")
    models = "; ".join(DESCRIPTIONS[m].format(n=len(CANDIDATES)) for m in result["models"])
    lines = [
        "# Vision benchmark",
        "",
        f"Random-weight models of real shapes (`benchmarks/vision_models.py`): {models}; `onnx/model.onnx` "
        f"fp32 from optimum-onnx. Images: scikit-image's photographs {', '.join(result['photos'])} (by path, "
        "cycled). Batch 1: one call per image; a larger batch B: one call with all the images, each engine "
        "batching B.",
        "",
        "Engines in one process: ours `tm.vision.<task>(folder, backend=..., compile={\"batch_size\": B})`; "
        "onnxruntime (CPU provider, default threads) as the model of the same pipeline of ours (same image "
        "loading, image processor, batching, postprocessing); transformers 4.57 `pipeline(task, folder)` on the "
        "PyTorch weights with its slow image processor, `batch_size=B`.",
        "",
        f"Machine: {env['machine']} ({env['cpu']}), {env['cpus']} CPUs (load average {env['load_average_1min']} at start, "
        f"{env.get('load_average_1min_end')} at end), Python {env['python']}; mlx {env.get('mlx')}, "
        f"torch {env.get('torch')} ({env.get('torch_threads')} threads), onnxruntime {env.get('onnxruntime')}, "
        f"transformers {env.get('transformers')}, Pillow {env.get('PIL')}, numpy {env.get('numpy')}. "
        f"MLX BLAS: {blas}.",
        "",
        "PyTorch (ours: torch, transformers) runs in the process that imported transmuter_mlx, whose BLAS for MLX "
        "leaves PyTorch its own (`libtorch_cpu.so` is loaded first); OpenMP's wait policy is the environment's: "
        f"`OMP_WAIT_POLICY` {env.get('omp_wait_policy') or 'unset'} (see benchmarks/README.md).",
    ]
    if waited is None:
        lines += ["", "**The machine never got quiet** (load average >= the threshold for the whole wait): "
                      "other jobs shared the 2 cores, so the numbers are low and noisy; compare ratios."]
    elif (env.get("load_average_1min_end") or 0) > BUSY_LOAD:
        lines += ["", f"**Other jobs ran during the run** (load average {env['load_average_1min_end']} at the end; "
                      f"this benchmark alone makes about 2): absolute numbers are low and noisy. The passes are "
                      "interleaved, so compare ratios; PyTorch's two OpenMP threads at batch 1 (ours: torch, "
                      "transformers) suffer most from a busy machine."]
    for name, entry in result["models"].items():
        kinds = list(next(iter(entry["batches"].values())).keys()) if entry["batches"] else []
        header = " | ".join(LABELS.get(k, k) for k in kinds)
        rule = "|---|" + "---|" * len(kinds)
        params = f", {entry['parameters'] / 1e6:.1f} M parameters" if entry.get("parameters") else ""
        lines += ["", f"## {name}{params}", "",
                  f"Pipeline, images/s (median of up to {runs} interleaved passes after a warm-up), ratio to "
                  "onnxruntime (ort) and "
                  "to transformers (tf); at batch 1 also ms per image.", "",
                  f"| batch | {header} |", rule]
        for batch, row in entry["batches"].items():
            cells = []
            for k in kinds:
                c = row[k]
                if "error" in c:
                    cells.append(c["error"])
                    continue
                text = f"{c['images_per_s']:.2f}{_ratios(c)}"
                text += f", {c['ms_per_image']:.0f} ms" if batch == "1" else ""
                text += f", {c['runs']} runs" if c["runs"] < runs else ""
                cells.append(text)
            n = next((c["images"] for c in row.values() if "images" in c), "?")
            lines.append(f"| {batch} ({n} images) | " + " | ".join(cells) + " |")
        lines += ["", "Model alone on a preprocessed batch, images/s (ours: `pipe.run_model`; transformers: its "
                      "PyTorch model, eager, `inference_mode`):", "", f"| batch | {header} |", rule]
        for batch, row in entry["batches"].items():
            cells = []
            for k in kinds:
                m = row[k].get("model", row[k])
                cells.append(m.get("error", "-") if "images_per_s" not in m else
                             f"{m['images_per_s']:.2f}{_ratios(m)}" + (f", {m['runs']} runs" if m["runs"] < runs else ""))
            lines.append(f"| {batch} | " + " | ".join(cells) + " |")
        lines += _breakdown(entry, kinds)
        lines += ["", f"| load + first call (s) | {header} |", rule]
        for batch, row in entry["batches"].items():
            cells = [f"{row[k]['load_s']:.2f} + {row[k]['first_call_s']:.2f}" if "load_s" in row[k] else "-"
                     for k in kinds]
            lines.append(f"| batch {batch} | " + " | ".join(cells) + " |")
        lines += ["", f"| agreement | {header} |", rule]
        for batch, row in entry["batches"].items():
            cells = []
            for k in kinds:
                text, m = row[k].get("vs_transformers"), row[k].get("model", {})
                if text is None:
                    cells.append("-")
                    continue
                if "max_abs_diff_vs_onnxruntime" in m and k != "onnxruntime":
                    text += f"; {MODELS[name][1]} {m['max_abs_diff_vs_onnxruntime']:.1e} vs ort"
                cells.append(text)
            lines.append(f"| batch {batch} | " + " | ".join(cells) + " |")
        lines.append("")
        lines.append("(scores: max abs difference to transformers' over the labels both return; depth: max abs "
                     "difference to transformers' map, relative to its largest value; "
                     f"{MODELS[name][1]}: the model-alone output's max abs difference to onnxruntime's)")
    return "\n".join(lines) + "\n"


def _breakdown(entry: dict, kinds: list[str]) -> list[str]:
    """Per image: loading + preprocessing (measured alone), the model (model-alone cell) and the rest of the
    pipeline's time (batching, postprocessing, per-call overhead; negative: noise)."""
    p = entry["preprocessing"]
    lines = ["", f"Preprocessing per image (ms; {p['processor']}, max abs diff of the pixels "
                 f"{p['pixel_values_max_abs_diff']:.1e}):", "",
             "| | ours | transformers (slow) |", "|---|---|---|",
             f"| decode (load_image) | {p['decode_ms']['ours']:.1f} | {p['decode_ms']['transformers']:.1f} |",
             f"| image processor | {p['preprocess_ms']['ours']:.1f} | {p['preprocess_ms']['transformers']:.1f} |",
             "", "Where a pipeline's time goes, ms per image: decode + preprocess / model / the rest:", "",
             "| batch | " + " | ".join(LABELS.get(k, k) for k in kinds) + " |", "|---|" + "---|" * len(kinds)]
    for batch, row in entry["batches"].items():
        cells = []
        for k in kinds:
            c = row[k]
            if "images_per_s" not in c.get("model", {}):
                cells.append("-")
                continue
            who = "transformers" if k == "transformers" else "ours"
            prep = p["decode_ms"][who] + p["preprocess_ms"][who]
            model = 1000 * c["model"]["median_s"] / int(batch)
            cells.append(f"{prep:.0f} / {model:.0f} / {c['ms_per_image'] - prep - model:.0f}")
        lines.append(f"| {batch} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"a comma-separated subset of {','.join(MODELS)}")
    p.add_argument("--batches", default="1,16", help="batch sizes, comma-separated (1: one call per image)")
    p.add_argument("--engines", default=",".join(ENGINES),
                   help=f"a comma-separated subset of {','.join(ENGINES + MORE_ENGINES)}")
    p.add_argument("--images", type=int, default=16, help="images per pass at batch > 1; default 16")
    p.add_argument("--latency-images", type=int, default=6, help="images per pass at batch 1; default 6")
    p.add_argument("--runs", type=int, default=5, help="timed passes per cell (median); default 5")
    p.add_argument("--budget", type=float, default=60.0, help="timed seconds per cell after which no more runs start")
    p.add_argument("--quiet-load", type=float, default=0.0,
                   help="wait first until the 1-minute load average is under this (0: don't wait)")
    p.add_argument("--quiet-wait", type=float, default=1800.0, help="seconds to wait for that at most; default 1800")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    p.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "vision.md"),
                   help="markdown file ('' for none)")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failing engines")
    args = p.parse_args(argv)
    result = bench(args)
    text = markdown(result, args.runs)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
    print(json.dumps(result, indent=1) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
