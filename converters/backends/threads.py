"""MLX's per-thread streams, released when a thread that ran a model ends.

MLX keeps streams per thread and, since 0.31, expects ``mx.clear_streams()`` at the end of every
thread that evaluated arrays: left to the thread's C++ teardown, they abort the process at exit
("terminate called without an active exception"; ml-explore/mlx#3126, #4110, #4327). ``Model``
calls ``track_thread()`` before each run on the mlx backend, so a caller's own threads (a thread
pool, a web server's workers) are released without any call of theirs; ``release_thread()`` does it
at once, for a thread that hands its last result to a consumer that may end the process next.
"""

from __future__ import annotations

import atexit
import sys
import threading

__all__ = ["release_thread", "track_thread"]

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
