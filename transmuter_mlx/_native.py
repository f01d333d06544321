"""Errors of native libraries: a Rust panic (tokenizers' ``pyo3_runtime.PanicException``) is a
``BaseException``, not an ``Exception``, so ``except Exception`` lets it through and it ends the thread
that called the library. The callers of native code turn it into an ordinary error here.

>>> class PanicException(BaseException): ...
>>> as_exception(PanicException("index out of bounds"), "tokenizer")
RuntimeError('tokenizer: a native library panicked (PanicException: index out of bounds)')
"""

from __future__ import annotations

# what stops a thread or a process on purpose: never turned into an error of a call
STOPPING = (KeyboardInterrupt, SystemExit, GeneratorExit)


def native_message(error: BaseException) -> str:
    """The first line of a native error's message (a panic's message is followed by a backtrace).

    >>> native_message(ValueError("stride too large\\nstack backtrace: ..."))
    'stride too large'
    """
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def as_exception(error: BaseException, context: str) -> Exception:
    """``error`` if it is an Exception, else (a native panic: not one of :data:`STOPPING`, which callers
    let through) a RuntimeError saying where it came from."""
    if isinstance(error, Exception):
        return error
    wrapped = RuntimeError(f"{context}: a native library panicked ({type(error).__name__}: "
                           f"{native_message(error)})")
    wrapped.__cause__ = error
    return wrapped
