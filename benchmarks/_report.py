"""Pieces every benchmark report shares: an engine's error cell, the machine it ran on, memory and weight sizes."""

from __future__ import annotations

import os
import platform
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path


def error_cell(e: Exception, verbose: bool) -> str:
    """A failed engine's table cell ("error: ..."), so the other engines' numbers still print."""
    if verbose:
        traceback.print_exc()
    text = f"{type(e).__name__}: {e}".replace("\n", " ").replace("|", "/")
    return "error: " + (text[:160] + "..." if len(text) > 160 else text)


def environment(packages: Iterable[str]) -> dict:
    """Python, CPU, load average (other jobs skew every number), MLX's BLAS and package versions."""
    from transmuter_mlx._blas import blas_info

    env = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
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
