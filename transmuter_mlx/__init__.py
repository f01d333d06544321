"""transmuter-mlx: Hugging Face ONNX model repositories on MLX, with transformers-exact pipelines.

>>> import transmuter_mlx as tm
>>> embed = tm.pipeline("text-embedding", "Xenova/all-MiniLM-L6-v2")
>>> embed("The cat sat on the mat.")["embedding"].shape
(384,)
>>> model = tm.load(embed.repo.onnx_path())             # the ONNX file alone, called like a function
>>> [i.name for i in model.inputs]
['input_ids', 'attention_mask', 'token_type_ids']
"""

from __future__ import annotations

from . import _blas  # noqa: F401  (first: gives MLX a fast BLAS on Linux, before mlx.core loads)
from ._layout import mount_sibling_packages

mount_sibling_packages(__name__, __file__)

from . import audio, text, vision
from .converters.errors import (
    ConverterError,
    DynamicShapeError,
    IndexOutOfRangeError,
    InputError,
    ModelLoadError,
    OpError,
    UnsupportedOpError,
)
from .converters.model import Model, TensorInfo, load
from .hub import MalformedFileError
from .pipelines import pipeline
from .serving import Serving, ServingClosedError, ServingStats

__version__ = "0.1.0"

__all__ = [
    "ConverterError",
    "DynamicShapeError",
    "IndexOutOfRangeError",
    "InputError",
    "MalformedFileError",
    "Model",
    "ModelLoadError",
    "OpError",
    "TensorInfo",
    "UnsupportedOpError",
    "load",
    "pipeline",
    "Serving",
    "ServingClosedError",
    "ServingStats",
    "audio",
    "text",
    "vision",
]
