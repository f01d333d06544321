"""Encoder throughput: our mlx and torch backends beside onnxruntime and PyTorch eager.

The model is a random BERT of a real model's shape (``--shape minilm``: all-MiniLM-L6-v2, 6 layers of
384; ``--shape bge-base``: BAAI/bge-base-en-v1.5, 12 layers of 768), built offline once, or any HF ONNX
repository folder with ``--model``. Each backend runs in a process of its own (one engine's BLAS and
OpenMP threads cannot slow the next, and its peak memory is its own). Each cell is the median of at least
``--runs`` timed runs and one second of them, after a warm-up, in tokens per second, the best of ``--rounds``
rounds of every backend in turn (the VM is shared: a slow spell must not decide a ratio), with its ratio to
onnxruntime; "first call" is what a user waits for the first result of a shape: convert (+ compile) + run.
A backend that fails shows ``error: ...`` in its cell and the others go on.

    python benchmarks/encoder.py                      # table, and benchmarks/results/encoder.md
    python benchmarks/encoder.py --shape bge-base     # benchmarks/results/encoder-bge-base.md
    python benchmarks/encoder.py --json               # the same numbers as JSON on stdout
    python benchmarks/encoder.py --shapes 1x16 --runs 3 --backends mlx,onnxruntime
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from _report import environment, error_cell, peak_rss_mb, weights_mb  # noqa: E402

import transmuter_mlx as tm  # noqa: E402  (first: it sets up the BLAS before mlx.core loads)

BACKENDS = ("mlx", "torch", "onnxruntime", "pytorch")
LABELS = {
    "mlx": "ours: mlx",
    "torch": "ours: torch",
    "onnxruntime": "onnxruntime",
    "pytorch": "PyTorch eager",
}


def feeds_for(batch: int, seq: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, size=(batch, seq), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


class Runner:
    """One engine: ``load()`` once, then ``run(feeds) -> last_hidden_state`` as numpy."""

    def __init__(self, kind: str, folder: Path, onnx_file: str):
        self.kind, self.folder, self.path = kind, folder, folder / "onnx" / onnx_file
        self.fn: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None

    def load(self) -> None:
        if self.kind in ("mlx", "torch"):
            model = tm.load(self.path, backend=self.kind)
            names = {i.name for i in model.inputs}
            to_numpy = model.backend.to_numpy
            self.fn = lambda f: np.asarray(
                to_numpy(model({k: v for k, v in f.items() if k in names})["last_hidden_state"])
            )
        elif self.kind == "onnxruntime":
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.log_severity_level = 3
            session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
            names = {i.name for i in session.get_inputs()}
            self.fn = lambda f: session.run(
                ["last_hidden_state"], {k: v for k, v in f.items() if k in names}
            )[0]
        elif self.kind == "pytorch":
            import torch
            from transformers import AutoModel

            device = "cuda" if torch.cuda.is_available() else "cpu"  # the GPU script's machine
            model = AutoModel.from_pretrained(self.folder).eval().to(device)

            def run(f):
                with torch.inference_mode():
                    feeds = {k: torch.from_numpy(v).to(device) for k, v in f.items()}
                    return model(**feeds).last_hidden_state.cpu().numpy()

            self.fn = run
        else:
            raise ValueError(f"unknown backend {self.kind!r}")


def time_cell(runner: Runner, feeds: dict, runs: int, budget_s: float, min_s: float = 1.0) -> dict:
    """Median seconds of a call: the first call (convert, compile), warm-up calls (at least 3 and 0.2 s: a replay
    is written at its second call, caches fill), then at least ``runs`` timed calls and ``min_s`` seconds of them
    (a 5 ms call timed 5 times is noise), fewer when one call is slower than the budget."""
    t0 = time.perf_counter()
    out = runner.fn(feeds)
    first = time.perf_counter() - t0
    per_call = first
    if first * 3 < budget_s:
        warm, t0 = 0, time.perf_counter()
        while warm < 3 or time.perf_counter() - t0 < 0.2:
            runner.fn(feeds)
            warm += 1
        per_call = (time.perf_counter() - t0) / warm
    n = max(1, min(int(budget_s / max(per_call, 1e-6)), max(runs, int(min_s / max(per_call, 1e-6)))))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        runner.fn(feeds)
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "runs": n, "first_call_s": first, "output": out}


def run_backend(kind: str, folder: Path, args: argparse.Namespace, outputs: Path) -> dict:
    """One backend in this process: load, then each shape's cell; outputs saved to ``outputs`` (.npz)."""
    config = json.loads((folder / "config.json").read_text())
    result: dict = {"shapes": {}}
    runner = Runner(kind, folder, args.file)
    try:
        t0 = time.perf_counter()
        runner.load()
        result["load_s"] = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001  (a failing engine is reported in its cells)
        return {"error": error_cell(e, args.verbose)}
    saved = {}
    for batch, seq in shapes_of(args):
        feeds = feeds_for(batch, seq, config.get("vocab_size", 30522))
        try:
            cell = time_cell(runner, feeds, args.runs, args.budget)
            saved[f"{batch}x{seq}"] = cell.pop("output")
            cell["tokens_per_s"] = batch * seq / cell["median_s"]
            result["shapes"][f"{batch}x{seq}"] = cell
        except Exception as e:  # noqa: BLE001
            result["shapes"][f"{batch}x{seq}"] = {"error": error_cell(e, args.verbose)}
    np.savez(outputs, **saved)
    result["peak_rss_mb"] = peak_rss_mb()
    return result


def shapes_of(args: argparse.Namespace) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]  # type: ignore[misc]


def bench(args: argparse.Namespace) -> dict:
    folder = Path(args.model) if args.model else _fixture(args.shape)
    kinds = [b for b in args.backends.split(",") if b]
    result = {"model": str(folder), "file": args.file, "environment": _environment(), "shapes": {}, "load_s": {},
              "peak_rss_mb": {}, "weights_mb": {}, "rounds": args.rounds}
    rows: dict[str, dict] = {f"{b}x{s}": {} for b, s in shapes_of(args)}
    outputs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # rounds of every backend in turn: a cell keeps its best round, so a spell of the shared VM's slowness
        # that falls on one backend's process does not decide its ratio
        for round_ in range(args.rounds):
            for kind in kinds:
                if any("error" in row.get(kind, {}) for row in rows.values()):
                    continue
                out = Path(tmp) / f"{kind}.npz"
                cmd = [sys.executable, __file__, "--worker", kind, "--model", str(folder), "--file", args.file,
                       "--shapes", args.shapes, "--runs", str(args.runs), "--budget", str(args.budget),
                       "--worker-outputs", str(out)] + (["--verbose"] if args.verbose else [])
                done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=7200)
                lines = done.stdout.strip().splitlines()
                got = json.loads(lines[-1]) if done.returncode == 0 and lines else {
                    "error": f"error: worker exited {done.returncode}"}
                if "error" in got:
                    for row in rows.values():
                        row[kind] = {"error": got["error"]}
                    continue
                result["load_s"][kind] = min(got["load_s"], result["load_s"].get(kind, got["load_s"]))
                result["peak_rss_mb"][kind] = max(got["peak_rss_mb"], result["peak_rss_mb"].get(kind, 0))
                result["weights_mb"][kind] = (weights_mb(safetensors_in=folder) if kind == "pytorch"
                                              else weights_mb(folder / "onnx" / args.file))
                with np.load(out) as saved:
                    outputs[kind] = {k: saved[k] for k in saved.files}
                for shape, cell in got["shapes"].items():
                    best = rows[shape].get(kind, {})
                    if "tokens_per_s" not in best or cell.get("tokens_per_s", 0) > best["tokens_per_s"]:
                        rows[shape][kind] = cell
                print(f"  {kind} done (round {round_ + 1} of {args.rounds})", file=sys.stderr, flush=True)
    for shape, row in rows.items():
        ref = outputs.get("onnxruntime", {}).get(shape)
        base = row.get("onnxruntime", {}).get("tokens_per_s")
        for kind, cell in row.items():
            out = outputs.get(kind, {}).get(shape)
            if ref is not None and out is not None and kind != "onnxruntime":
                cell["max_abs_diff_vs_onnxruntime"] = float(np.max(np.abs(out - ref)))
            if base and "tokens_per_s" in cell:
                cell["ratio_to_onnxruntime"] = cell["tokens_per_s"] / base
        result["shapes"][shape] = row
    return result


def _fixture(shape: str) -> Path:
    from tests.fixtures import MINILM_BERT, build
    from tests.fixtures.bert import BertSpec

    # BAAI/bge-base-en-v1.5's config.json: 12 layers of 768, 12 heads, MLP 3072
    spec = BertSpec("bert-bge-base", 768, 12, 12, 3072, 30522, 512) if shape == "bge-base" else MINILM_BERT
    try:
        import optimum.exporters.onnx  # noqa: F401
    except ImportError:  # the GPU machine: transformers 5, which optimum-onnx does not support
        return _exported_by_torch(spec)
    return build(spec)


def _exported_by_torch(spec) -> Path:
    """The spec's random BertModel (safetensors) and its ONNX export by ``torch.onnx`` (the TorchScript exporter)."""
    import torch
    import transformers

    folder = ROOT / ".cache" / "fixtures" / f"{spec.name}-torch-{torch.__version__}"
    if (folder / "onnx" / "model.onnx").is_file():
        return folder
    torch.manual_seed(spec.seed)
    config = transformers.BertConfig(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads, intermediate_size=spec.intermediate_size,
        max_position_embeddings=spec.max_position_embeddings)
    model = transformers.BertModel(config).eval()
    model.save_pretrained(folder)

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]

    names = ["input_ids", "attention_mask", "token_type_ids"]
    ids = torch.ones(2, 16, dtype=torch.long)
    (folder / "onnx").mkdir(exist_ok=True)
    torch.onnx.export(LastHiddenState().eval(), (ids, torch.ones_like(ids), torch.zeros_like(ids)),
                      str(folder / "onnx" / "model.onnx"), input_names=names, output_names=["last_hidden_state"],
                      dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
                      opset_version=17, dynamo=False)
    return folder


def _environment() -> dict:
    return environment(("mlx", "torch", "onnxruntime", "transformers", "numpy"))


def markdown(result: dict) -> str:
    env = result["environment"]
    kinds = list(next(iter(result["shapes"].values())).keys()) if result["shapes"] else []
    lines = [
        "# Encoder benchmark",
        "",
        f"Model: `{result['model']}` (`onnx/{result['file']}`). Throughput in tokens/s (median of at least 1 s of "
        f"calls; the best of {result.get('rounds', 1)} rounds of every backend in turn), ratio to onnxruntime in "
        "brackets; first call = that shape's first run (ours: convert + compile). Each backend ran in a process "
        "of its own; peak memory is that process's peak resident set.",
        "",
        f"Machine: {env['machine']} ({env.get('cpu')}), {env['cpus']} CPUs (load average {env['load_average_1min']} at start), "
        f"Python {env['python']}; mlx {env.get('mlx')}, "
        f"torch {env.get('torch')}, onnxruntime {env.get('onnxruntime')}, transformers {env.get('transformers')}. "
        f"MLX BLAS: {env['mlx_blas'].get('library') or env['mlx_blas'].get('status')}.",
        "",
        "| batch x seq | " + " | ".join(LABELS.get(k, k) for k in kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    for shape, row in result["shapes"].items():
        cells = []
        for k in kinds:
            c = row[k]
            if "error" in c:
                cells.append(c["error"])
                continue
            ratio = f" ({c['ratio_to_onnxruntime']:.2f}x)" if "ratio_to_onnxruntime" in c else ""
            runs = f", {c['runs']} runs" if c["runs"] < 5 else ""
            cells.append(f"{c['tokens_per_s']:,.0f}{ratio}{runs}")
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| first call (s) | " + " | ".join(LABELS.get(k, k) for k in kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    load = result["load_s"]
    lines.append("| load | " + " | ".join(f"{load[k]:.2f}" if k in load else "-" for k in kinds) + " |")
    for key, label in (("weights_mb", "weights MB"), ("peak_rss_mb", "peak memory MB (process)")):
        values = result.get(key, {})
        lines.append(f"| {label} | " + " | ".join(f"{values[k]:.0f}" if k in values else "-" for k in kinds) + " |")
    for shape, row in result["shapes"].items():
        lines.append(
            f"| {shape} | "
            + " | ".join(f"{row[k]['first_call_s']:.2f}" if "first_call_s" in row[k] else "-" for k in kinds)
            + " |"
        )
    lines += ["", "| max abs diff vs onnxruntime | " + " | ".join(LABELS.get(k, k) for k in kinds) + " |"]
    lines.append("|---|" + "---|" * len(kinds))
    for shape, row in result["shapes"].items():
        diffs = [
            f"{row[k]['max_abs_diff_vs_onnxruntime']:.1e}" if "max_abs_diff_vs_onnxruntime" in row[k] else "-"
            for k in kinds
        ]
        lines.append(f"| {shape} | " + " | ".join(diffs) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", help="an HF ONNX repository folder (default: the --shape fixture)")
    p.add_argument("--shape", default="minilm", choices=("minilm", "bge-base"),
                   help="the random BERT to build and run when no --model is given")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # one backend, in the process bench() starts
    p.add_argument("--worker-outputs", help=argparse.SUPPRESS)
    p.add_argument(
        "--file", default="model.onnx", help="the ONNX file under onnx/ (model_quantized.onnx, model_q4.onnx)"
    )
    p.add_argument("--shapes", default="1x16,8x128,32x128", help="batch x sequence pairs, comma-separated")
    p.add_argument(
        "--backends", default=",".join(BACKENDS), help=f"a comma-separated subset of {','.join(BACKENDS)}"
    )
    p.add_argument("--runs", type=int, default=5, help="timed runs per cell (median); default 5")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of every backend in turn; a cell keeps its best round's median; default 3")
    p.add_argument("--budget", type=float, default=60.0, help="seconds per cell before fewer runs are taken")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    p.add_argument(
        "--output",
        default=None,
        help="markdown file ('' for none; default benchmarks/results/encoder.md, or encoder-SHAPE.md)",
    )
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failing engines")
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(run_backend(args.worker, Path(args.model), args, Path(args.worker_outputs))))
        return 0
    if args.output is None:
        args.output = str(ROOT / "benchmarks" / "results" / (
            "encoder.md" if args.shape == "minilm" or args.model else f"encoder-{args.shape}.md"))
    result = bench(args)
    text = markdown(result)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
    print(json.dumps(result, indent=1) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
