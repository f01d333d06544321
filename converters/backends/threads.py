"""What a thread that ran a model holds: MLX's streams, and the OpenMP thread pool torch made for it.

MLX keeps streams per thread and, since 0.31, expects ``mx.clear_streams()`` at the end of every
thread that evaluated arrays: left to the thread's C++ teardown, they abort the process at exit
("terminate called without an active exception"; ml-explore/mlx#3126, #4110, #4327). ``Model``
calls ``track_thread()`` before each run on the mlx backend, so a caller's own threads (a thread
pool, a web server's workers) are released without any call of theirs; ``release_thread()`` does it
at once, for a thread that hands its last result to a consumer that may end the process next.

torch's CPU kernels run on OpenMP, and GNU libgomp (torch's on Linux) keeps an idle pool of worker
threads for each thread that ever ran a parallel region. When those pools together outnumber the
cores, libgomp stops spinning and every parallel region sleeps and wakes its team: a worker thread
then runs small torch ops 3-4x slower than the thread that loaded the model (an empty region 0.73 us
vs 37-50 us; a 135M model's decoding at half speed). ``release_openmp_pool()`` lets a thread that hands
its model to a worker (``Serving``, the continuous batcher, a streamed generation) drop its own pool first.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
from functools import cache
from pathlib import Path

__all__ = ["release_openmp_pool", "release_thread", "track_thread"]

_state = threading.local()


def release_thread() -> None:
    """Free what MLX holds for the calling thread (its streams). Imports nothing: torch-only runs."""
    clear = getattr(sys.modules.get("mlx.core"), "clear_streams", None)
    if clear is not None:
        clear()


class _ReleaseAtThreadEnd:
    """Held in a ``threading.local``: CPython drops it in the ending thread, before C++'s teardown."""

    def __del__(self) -> None:
        release_thread()


def track_thread() -> None:
    """Release the calling thread's MLX streams when it ends (once per thread; the main thread at exit)."""
    if getattr(_state, "tracked", False):
        return
    _state.tracked = True
    if threading.current_thread() is threading.main_thread():
        atexit.register(release_thread)
    else:
        _state.release = _ReleaseAtThreadEnd()


def _torch_libgomp() -> ctypes.CDLL | None:
    """The GNU OpenMP runtime torch loaded (bundled in its ``lib`` on Linux), or None (torch not imported yet,
    or LLVM's libomp as on macOS, whose pools are shared, not per thread)."""
    torch = sys.modules.get("torch")
    if torch is None or sys.platform != "linux":
        return None  # not cached: torch may be imported later
    return _libgomp_in(Path(torch.__file__).parent / "lib")


@cache
def _libgomp_in(folder: Path) -> ctypes.CDLL | None:
    for path in sorted(folder.glob("libgomp*.so*")):
        try:
            return ctypes.CDLL(str(path), mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:  # not the copy this process loaded
            continue
    return None


def release_openmp_pool() -> bool:
    """Free the calling thread's idle OpenMP worker threads (torch's, on Linux); True when it had a runtime
    to ask. Harmless anywhere: a later torch op on this thread makes a new pool."""
    gomp = _torch_libgomp()
    if gomp is None:
        return False
    gomp.omp_pause_resource_all(1)  # omp_pause_soft: this thread's pool only, libgomp's meaning
    return True
