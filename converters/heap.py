"""Freed heap memory given back to the system after a heavy planning walk (glibc's ``malloc_trim``).

A signature's first call plans it by running every node once, eagerly: on a q8 encoder that makes and frees
thousands of arrays of a few MB (a layer's int32 products, its quantized inputs) between arrays that stay.
glibc keeps such freed memory in its heap, resident: BGE-base's q8 file at 32x128 on torch stayed at 5.1 GB
after its first call, against 1.4 GB for its later calls alone. ``malloc_trim(0)`` returns the heap's free
pages (0.3 s there, once), so ``Model`` calls it after a planning walk that grew the process by more than
``GROWTH`` bytes; the small signatures of a growing cache (a new one per decoding step) do not pay for it.
Where the C library has no ``malloc_trim`` (macOS, musl, Windows) nothing is called.

>>> release_if_grown(None)  # nothing measured before: nothing to do
False
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

GROWTH = 256 << 20  # bytes of resident growth over a planning walk that call for a trim


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc
        return None


def resident() -> int | None:
    """This process's resident bytes where a trim can follow (glibc on Linux), else None."""
    if _malloc_trim() is None:
        return None
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release_if_grown(before: int | None) -> bool:
    """Trim the heap if the process grew by more than ``GROWTH`` since ``before`` (``resident()``); whether it did."""
    if before is None:
        return False
    now = resident()
    if now is None or now - before <= GROWTH:
        return False
    _malloc_trim()(0)
    return True
