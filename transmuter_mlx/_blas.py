"""Give MLX a fast BLAS on Linux, before ``mlx.core`` is first imported.

The Linux ``mlx[cpu]`` wheel links the reference BLAS/LAPACK that auditwheel bundles
(``mlx_cpu.libs/libblas-*.so``): ``libmlx.so`` imports ``cblas_sgemm`` and the LAPACK
``sgetrf_``-style symbols without versions, and the bundled ``cblas_sgemm`` calls ``sgemm_``
through its PLT. The dynamic linker resolves those symbols in the global scope first, so a
library that exports them and is loaded with ``RTLD_GLOBAL`` *before* ``mlx.core`` takes over
every GEMM and LAPACK call. That needs no ``LD_PRELOAD`` and no restart: ``ctypes.CDLL(path,
RTLD_GLOBAL)`` from Python is enough, as long as it happens first (``libmlx.so`` binds now).

Candidates, in order: ``TRANSMUTER_MLX_BLAS`` (a library path, or ``off``), Intel MKL from the ``mkl``
wheel (a dependency of the package on Linux x86-64, so ``pip install transmuter-mlx`` brings a fast BLAS),
a system OpenBLAS (Debian/Ubuntu ``libopenblas0-pthread``, Fedora ``openblas``; the choice on ARM).

The library lands in the global scope, so a PyTorch loaded after it calls it too (``libtorch_cpu.so`` binds
its own ``sgemm_`` through that scope), and an OpenBLAS's pthreads then fight torch's spinning OpenMP workers
for the cores (transformers decoded 3x slower). So where torch is installed and not loaded yet,
``libtorch_cpu.so`` is loaded first (0.16 s; ``import torch`` later reuses it): a library loaded before the
BLAS keeps binding its own symbols, and torch keeps its GEMMs. (The previous remedy, ``OMP_WAIT_POLICY=PASSIVE``,
made every small torch op wait for sleeping workers: SmolLM2's fp32 decode on the torch backend ran 12 tokens/s
at batch 1 and 64 at batch 8, against 21 and 97 now.)
The PyPI ``scipy-openblas32``/``64`` wheels and numpy's bundled OpenBLAS prefix their symbols
(``scipy_cblas_sgemm``), so they cannot stand in. macOS uses Accelerate and is left alone.

>>> from transmuter_mlx._blas import blas_info
>>> {"library", "platform", "status"} <= set(blas_info()), blas_info()["platform"] in ("linux", "darwin", "win32")
(True, True)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from pathlib import Path

ENV = "TRANSMUTER_MLX_BLAS"
_SYSTEM_OPENBLAS = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)
_info: dict[str, object] = {"platform": sys.platform, "library": None, "status": "not set up"}


def _candidates() -> list[str]:
    # the mkl wheel (a dependency on Linux x86-64) first: MLX decodes 1.3-2.7x faster on it than on Debian's
    # OpenBLAS at real model sizes (docs/performance.md); a system OpenBLAS where there is no MKL (ARM)
    found = []
    prefixes = {sys.prefix, sys.base_prefix, os.environ.get("CONDA_PREFIX", "")}
    for prefix in filter(None, prefixes):
        found += sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
    name = ctypes.util.find_library("openblas")
    if name:
        found.append(name)
    found += [p for p in _SYSTEM_OPENBLAS if os.path.exists(p)]
    return list(dict.fromkeys(found))


def _exports_gemm(lib: ctypes.CDLL) -> bool:
    return all(hasattr(lib, sym) for sym in ("cblas_sgemm", "sgemm_"))


def setup_blas() -> dict[str, object]:
    """Load a fast BLAS globally for MLX (Linux only); returns what was done (see ``blas_info``)."""
    if _info["status"] != "not set up":
        return _info
    choice = os.environ.get(ENV, "").strip()
    if not sys.platform.startswith("linux"):
        _info["status"] = (
            "not needed (MLX uses Accelerate on macOS)" if sys.platform == "darwin" else "not Linux"
        )
        return _info
    if choice.lower() in ("off", "0", "none", "reference"):
        _info["status"] = f"off ({ENV}={choice})"
        return _info
    if "mlx.core" in sys.modules:
        _info["status"] = "too late: mlx.core was imported before transmuter_mlx"
        return _info
    _load_torch_first()
    tried = []
    for path in [choice] if choice else _candidates():
        try:
            lib = _load_global(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        if _exports_gemm(lib):
            _info.update(library=_resolved_path(path), status="loaded")
            if hasattr(lib, "MKL_Set_Threading_Layer"):
                _info["mkl_threading"] = _mkl_threading(lib, path)
            return _info
        tried.append(f"{path}: exports no cblas_sgemm/sgemm_")
    _info["status"] = "reference BLAS (slow): " + ("; ".join(tried) if tried else "no OpenBLAS or MKL found")
    return _info


def _load_global(path: str) -> ctypes.CDLL:
    """dlopen ``path`` into the global scope; OpenBLAS gets a core type it may not detect itself."""
    coretype = (
        _openblas_coretype()
        if "openblas" in Path(path).name and "OPENBLAS_CORETYPE" not in os.environ
        else None
    )
    if coretype:
        os.environ["OPENBLAS_CORETYPE"] = coretype  # read once, while the library initialises
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    finally:
        if coretype:
            del os.environ["OPENBLAS_CORETYPE"]
    if coretype:
        _info["openblas_coretype"] = coretype
    return lib


def _load_torch_first() -> None:
    """``libtorch_cpu.so`` before the BLAS, where torch is installed and not loaded: it then binds its own
    ``sgemm_`` (its MKL) instead of the global BLAS's."""
    if "torch" in sys.modules:
        return
    try:
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            return
        lib = Path(spec.origin).parent / "lib" / "libtorch_cpu.so"
        if lib.is_file():
            ctypes.CDLL(str(lib))
            _info["torch_loaded_first"] = str(lib)
    except (OSError, ImportError, ValueError) as e:  # torch then binds the global BLAS: slower, still right
        _info["torch_loaded_first"] = f"failed: {e}"


def _mkl_threading(lib: ctypes.CDLL, path: str) -> str:
    """Runs MKL's threads on TBB (one shared pool) where the wheel's ``libtbb`` is there, before MKL's first call.

    Left to choose, MKL takes GNU OpenMP, as torch's libgomp is loaded already: libgomp keeps a team of workers
    for each thread that ever ran a GEMM (the main thread, a ``Serving`` worker, a second pipeline's), and once
    those teams outnumber the cores every GEMM sleeps and wakes its team. SmolLM2-135M's fp32 decode on mlx, two
    pipelines in one process: batch 1 19 -> 25 tokens/s, batch 8 81 -> 94 (docs/performance.md).
    ``MKL_THREADING_LAYER`` (``GNU``, ``INTEL``, ``SEQUENTIAL``, ``TBB``), where set, is MKL's to read.
    """
    if os.environ.get("MKL_THREADING_LAYER"):
        return f"{os.environ['MKL_THREADING_LAYER']} (MKL_THREADING_LAYER)"
    tbb = sorted(glob.glob(os.path.join(os.path.dirname(os.path.realpath(path)), "libtbb.so.*")))
    try:
        ctypes.CDLL(tbb[0], mode=ctypes.RTLD_GLOBAL)  # by path: the wheel's folder is not on the loader's path
    except (IndexError, OSError):
        return "MKL's choice (no libtbb beside it)"
    lib.MKL_Set_Threading_Layer(ctypes.c_int(_MKL_THREADING_TBB))
    return "TBB"


_MKL_THREADING_TBB = 4  # mkl_service.h: INTEL 0, SEQUENTIAL 1, PGI 2, GNU 3, TBB 4


def _openblas_coretype() -> str | None:
    """A kernel family from the CPU flags. Older OpenBLAS (Debian 12's 0.3.21) falls back to its
    SSE3 "Prescott" kernels on CPUs newer than itself, about 5x slower than SkylakeX's here."""
    try:
        flags = set(next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")).split(":")[1].split())
    except (OSError, StopIteration):
        return None
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "SKYLAKEX"
    if {"avx2", "fma"} <= flags:
        return "HASWELL"
    return None


def _resolved_path(path: str) -> str:
    """The file behind a soname, as /proc/self/maps shows it."""
    try:
        stem = Path(path).name.split(".so")[0]
        for line in Path("/proc/self/maps").read_text().splitlines():
            if stem in line and "/" in line:
                return line[line.index("/") :]
    except OSError:
        pass
    return path


def blas_info() -> dict[str, object]:
    """Which BLAS MLX's CPU matmuls use: ``{"platform", "library", "status"}``."""
    return dict(_info)


setup_blas()
