"""Backends: one class per array library, all implementing ``base.Backend``."""

from __future__ import annotations

from functools import cache

from .base import Backend
from .numpy import NumpyBackend

HOST = NumpyBackend()


@cache
def get_backend(name: str = "mlx", device: str | None = None) -> Backend:
    """The backend called ``name`` (``"mlx"``, ``"torch"`` or ``"numpy"``)."""
    if name == "mlx":
        from .mlx import MlxBackend

        return MlxBackend()
    if name == "torch":
        from .torch import TorchBackend

        return TorchBackend(device)
    if name == "numpy":
        return HOST
    raise ValueError(f"unknown backend {name!r}: expected 'mlx', 'torch' or 'numpy'")


__all__ = ["Backend", "HOST", "NumpyBackend", "get_backend"]
