"""Text generation: decoding helpers shared by the generation pipelines.

>>> from transmuter_mlx.generation import TextStream
>>> TextStream(lambda ids: "ab"[: len(ids)], skip_prompt=False).push([0])
[]
"""

from __future__ import annotations

from .streaming import TextStream

__all__ = ["TextStream"]
