"""The model calls each thread has begun, and what a kernel keeps for the rest of one call.

A specialised kernel (``OpSpec.specialise``) that computes the same values in every layer of a step (the GQA
kernel's positions, rotary angles and mask) makes them in the first layer and ``keep``s them for the others. They
are kept for one call and dropped at its end (``end``): a later call makes them again, so an input changed in
place between calls is never read stale, and nothing of a dropped model stays referenced here.

>>> begin(); made = []
>>> make = lambda: made.append(1) or len(made)
>>> token = object()
>>> keep((2, 3), (token,), make), keep((2, 3), (token,), make), keep((2, 4), (token,), make)
(1, 1, 2)
>>> begin(); keep((2, 4), (token,), make)      # a new call: made again
3
>>> end()
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_LOCAL = threading.local()


def begin() -> None:
    """Start a model call on this thread (``Executable._replay``): nothing kept before it is reused."""
    _LOCAL.calls = getattr(_LOCAL, "calls", 0) + 1
    _LOCAL.kept = None


def end() -> None:
    """End the model call on this thread: drop what was kept in it."""
    _LOCAL.kept = None


def keep(facts: tuple, inputs: tuple[Any, ...], make: Callable[[], T]) -> T:
    """``make()``, or what it gave earlier in this call on this thread for equal ``facts`` (shapes, attributes) and
    the same ``inputs`` objects (arrays, compared by identity). One value is kept per thread."""
    call = getattr(_LOCAL, "calls", 0)
    last = getattr(_LOCAL, "kept", None)
    if (last is not None and last[0] == call and last[1] == facts and len(last[2]) == len(inputs)
            and all(a is b for a, b in zip(last[2], inputs))):
        return last[3]
    value = make()
    _LOCAL.kept = (call, facts, inputs, value)
    return value
