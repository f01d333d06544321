"""Text generation: decoding helpers shared by the generation pipelines.

>>> from transmuter_mlx.generation import TextStream
>>> TextStream(lambda ids: "ab"[: len(ids)], skip_prompt=False).push([0])
[]
"""

from __future__ import annotations

from .beam import BeamSearch
from .config import GenerationConfig
from .loop import DecoderSession, Generated, generate
from .sessions import open_session
from .streaming import TextStream

__all__ = ["BeamSearch", "DecoderSession", "GenerationConfig", "Generated", "TextStream", "generate", "open_session"]
