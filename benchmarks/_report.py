"""Pieces every benchmark report shares: an engine's error cell, the machine it ran on, memory and weight sizes, and
the timed passes of engines side by side (each in a process of its own, or interleaved in one) with their table
rows."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any


def error_cell(e: Exception, verbose: bool) -> str:
    """A failed engine's table cell ("error: ..."), so the other engines' numbers still print."""
    if verbose:
        traceback.print_exc()
    text = f"{type(e).__name__}: {e}".replace("\n", " ").replace("|", "/")
    return "error: " + (text[:160] + "..." if len(text) > 160 else text)


def cpu_name() -> str:
    """The CPU's model name, and on x86 whether it has AVX-512 (a VM may hide it: MKL and oneDNN then take their
    AVX2 paths), e.g. "AMD EPYC, AVX2"; the machine's architecture where the name cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        info = ""
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    if not name and sys.platform == "darwin":
        import subprocess

        name = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True).stdout.strip()
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    if flags:
        name += ", AVX-512" if "avx512f" in flags else ", AVX2" if "avx2" in flags else ", no AVX2"
    return name or platform.machine()


def environment(packages: Iterable[str]) -> dict:
    """Python, CPU, load average (other jobs skew every number), MLX's BLAS and package versions."""
    from transmuter_mlx._blas import blas_info

    env = {"python": platform.python_version(), "machine": platform.machine(), "cpu": cpu_name(),
           "cpus": os.cpu_count()}
    env["load_average_1min"] = round(os.getloadavg()[0], 2)
    env["mlx_blas"] = blas_info()
    for name in packages:
        try:
            env[name] = __import__("mlx.core").core.__version__ if name == "mlx" else __import__(name).__version__
        except Exception:  # noqa: BLE001 - a missing package is reported as None
            env[name] = None
    return env


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: Linux's ``VmHWM``, the high-water mark of the memory this program
    has mapped (``ru_maxrss`` survives exec: a worker started by a parent of 2.6 GB, which had just built a fixture,
    read 2.6 GB whatever it used); elsewhere ``ru_maxrss`` (bytes on macOS)."""
    import resource

    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 2**10
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)


def weights_mb(onnx_file: Path | None = None, safetensors_in: Path | None = None) -> float:
    """MB of the weight files an engine reads: an ONNX file with its external data, or a folder's safetensors."""
    if safetensors_in is not None:
        files = list(safetensors_in.glob("*.safetensors"))
    else:
        files = [onnx_file, *onnx_file.parent.glob(onnx_file.name + "_data")]
    return sum(f.stat().st_size for f in files if f.is_file()) / 2**20


#: the engines of ``interleaved_passes``' tables: ours on each backend, onnxruntime sessions in our pipeline's loop
LABELS = {"mlx": "ours: mlx", "torch": "ours: torch", "onnxruntime": "onnxruntime (our loop)",
          "transformers": "transformers"}


def relative_difference(reference: Any, output: Any) -> float:
    """max |output - reference| / max |reference| (arrays): how far an engine's output is from the reference's, in
    the reference's own scale."""
    import numpy as np

    return float(np.abs(output - reference).max() / max(float(np.abs(reference).max()), 1e-30))


def interleaved_passes(engines: Iterable[str], make: Callable[[str], Callable[[], Any]], runs: int,
                       verbose: bool, agree: Callable[[Any, Any], Any] | None = None) -> dict[str, dict]:
    """Each engine's cell: ``make(kind)`` gives its runner, called once to warm up (plans every shape), then ``runs``
    timed passes of every engine in turn (each round from the next engine on), so that other jobs on a shared
    machine slow them alike; the cells are ``engine_cells``. For passes of seconds: one engine's worker threads still
    spin for tens of milliseconds after its call and slow the next engine's start (a 14 ms MobileNetV2 call on torch
    took 27 ms right after onnxruntime's), so a short call wants a process to itself (``model_sweep.py``)."""
    engines = list(engines)
    runners, outputs, times, errors = {}, {}, {e: [] for e in engines}, {}
    for kind in engines:
        try:
            runners[kind] = make(kind)
            outputs[kind] = runners[kind]()
        except Exception as e:  # noqa: BLE001 - one engine's failure leaves the others' numbers
            errors[kind] = error_cell(e, verbose)
    kinds = list(runners)
    for r in range(runs):
        # each round starts one engine later: an engine's call right after another's (MLX's worker threads winding
        # down, caches full of its buffers) is not always the same engine's lot
        for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
            run = runners[kind]
            if kind in errors:
                continue
            t0 = time.perf_counter()
            try:
                outputs[kind] = run()
            except Exception as e:  # noqa: BLE001
                errors[kind] = error_cell(e, verbose)
                continue
            times[kind].append(time.perf_counter() - t0)
    medians = {kind: statistics.median(times[kind]) for kind in engines if kind not in errors}
    return engine_cells(engines, medians, outputs, errors, agree)


def engine_cells(engines: Iterable[str], medians: Mapping[str, float], outputs: Mapping[str, Any],
                 errors: Mapping[str, str], agree: Callable[[Any, Any], Any] | None = None) -> dict[str, dict]:
    """Each engine's cell from its median ``seconds`` and last output: ``output_equals_transformers`` (None without a
    transformers engine; with ``agree``, that function of transformers' output and the engine's instead of ``==``)
    and ``vs_onnxruntime`` / ``vs_transformers`` (above 1: faster), or ``error`` for an engine that failed."""
    cells: dict[str, dict] = {}
    compare = agree or (lambda ref, got: ref == got)
    # ratios of the unrounded medians: a tiny test model's call can take less than the half millisecond that
    # rounding to 3 decimals keeps (a division by zero in CI once mlx ran the tiny SegFormer faster)
    for kind in engines:
        if kind in errors:
            cells[kind] = {"error": errors[kind]}
            continue
        same = compare(outputs["transformers"], outputs[kind]) if "transformers" in outputs else None
        cells[kind] = {"seconds": round(medians[kind], 6), "output_equals_transformers": same}
        for ref in ("onnxruntime", "transformers"):
            if ref in medians:
                cells[kind][f"vs_{ref}"] = round(medians[ref] / medians[kind], 2)
    return cells


def worker_passes(run: Callable[[], Any], runs: int) -> int:
    """An engine's side of ``isolated_passes``, in the worker process: a warm-up pass, ``runs`` timed passes, then
    their median seconds and the last output as one JSON line on stdout."""
    out = run()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"seconds": statistics.median(times), "output": out}))
    return 0


def isolated_passes(engines: Iterable[str], worker: Callable[[str], list[str]], verbose: bool) -> dict[str, dict]:
    """Each engine's cell (``engine_cells``) with the engine in a process of its own: ``worker(kind)`` is the command
    line of a process that runs ``worker_passes`` for it. In one process, an engine's worker threads (onnxruntime's,
    PyTorch's OpenMP ones) spin for tens of milliseconds after its call and slow the next engine's start; a process
    of its own also gives each engine its own heap and its own MLX cache."""
    engines = list(engines)
    medians, outputs, errors = {}, {}, {}
    for kind in engines:
        done = subprocess.run(worker(kind), capture_output=True, text=True, timeout=7200)
        try:
            if done.returncode != 0:
                raise RuntimeError(f"worker exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
        except Exception as e:  # noqa: BLE001 - one engine's failure leaves the others' numbers
            errors[kind] = error_cell(e, verbose)
            continue
        medians[kind], outputs[kind] = result["seconds"], result["output"]
    return engine_cells(engines, medians, outputs, errors)


def passes_per_batch(engines: Iterable[str], batches: Iterable[int], make: Callable[[str, int], Callable[[], Any]],
                     runs: int, verbose: bool, figures: Callable[[float], dict],
                     worker: Callable[[str, int], list[str]] | None = None) -> dict:
    """The engines' cells at each batch, each with the ``figures`` of its seconds added (tokens/s, × real time), and
    the environment: ``{"batches": ..., "environment": ...}``. With ``worker`` (``worker(kind, batch)``: a worker's
    command line) each engine runs in a process of its own (``isolated_passes``); without, ``interleaved_passes`` in
    this process (``make(kind, batch)`` gives a runner)."""
    engines, results = list(engines), {}
    for batch in batches:
        if worker is not None:
            cells = isolated_passes(engines, lambda kind, b=batch: worker(kind, b), verbose)
        else:
            cells = interleaved_passes(engines, lambda kind, b=batch: make(kind, b), runs, verbose)
        for cell in cells.values():
            if "seconds" in cell:
                cell.update(figures(cell["seconds"]))
        results[batch] = cells
        if verbose:
            print(f"batch {batch}: {json.dumps(cells)}", file=sys.stderr)
    return {"batches": results, "environment": environment(["mlx", "torch", "onnxruntime", "transformers", "numpy"])}


def engines_table(results: dict, labels: Mapping[str, str], column: str, value: Callable[[dict], str]) -> list[str]:
    """The lines of a table of ``interleaved_passes``' cells for each batch (``results["batches"]``), with ``column``
    (a cell's ``value``) between the seconds and the ratios, then the environment line."""
    lines = [f"| B | engine | seconds | {column} | vs onnxruntime | vs transformers | text = transformers' |",
             "|---|---|---|---|---|---|---|"]
    for batch, cells in results["batches"].items():
        for kind, cell in cells.items():
            if "error" in cell:
                lines.append(f"| {batch} | {labels[kind]} | {cell['error']} | | | | |")
                continue
            same = cell["output_equals_transformers"]
            lines.append(f"| {batch} | {labels[kind]} | {cell['seconds']:.2f} | {value(cell)} | "
                         f"{cell.get('vs_onnxruntime', '')} | {cell.get('vs_transformers', '')} | "
                         f"{'' if same is None else 'yes' if same else 'no'} |")
    env = results["environment"]
    return [*lines, "", "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()) + "."]


def engines_arguments(doc: str, output: Path, batches: str = "1,4") -> argparse.ArgumentParser:
    """The options of a benchmark of engines side by side: --engines, --batches, --runs, --json, --output, --verbose."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--engines", default="mlx,torch,onnxruntime,transformers")
    parser.add_argument("--batches", default=batches)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--output", default=str(output))
    parser.add_argument("--verbose", action="store_true")
    return parser


def worker_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with the options of ``passes_per_batch``'s workers: --one-process, and the worker's own --worker."""
    parser.add_argument("--one-process", action="store_true",
                        help="every engine in this process, passes interleaved (default: each in a process of its own)")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "BATCH"), help=argparse.SUPPRESS)
    return parser


def worker_command(script: str, argv: list[str]) -> Callable[[str, int], list[str]]:
    """``(kind, batch) -> the command line`` of ``script``'s worker for one engine at one batch, with the options of
    this run (``argv``) but its engines, batches and output."""
    keep, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--engines", "--batches", "--output"):
            skip = True
        elif not arg.startswith(("--engines=", "--batches=", "--output=", "--json")):
            keep.append(arg)
    return lambda kind, batch: [sys.executable, script, *keep, "--worker", kind, str(batch)]


def publish(results: dict, text: str, args: argparse.Namespace) -> int:
    """Print the results (and their JSON with --json) and write the table to --output unless it is empty."""
    if args.json:
        print(json.dumps(results, indent=1))
    print(text)
    if args.output:
        Path(args.output).write_text(text)
    return 0
