"""AST (Audio Spectrogram Transformer): a ViT over a fixed window of log-mel frames (audio classification).

>>> from transmuter_mlx import zoo
>>> ast = zoo.family("audio-spectrogram-transformer")
>>> ast.__name__, sorted(ast.TASKS)
('transmuter_mlx.zoo.ast', ['audio-classification'])
>>> ast.ModelArgs.from_dict({"id2label": {"0": "Speech", "1": "Music"}}).id2label
{0: 'Speech', 1: 'Music'}

One graph, ``onnx/model.onnx``: ``input_values`` (batch, ``max_length`` frames, mel bins) in,
``logits`` out. ``ASTFeatureExtractor`` (``preprocessor_config.json``) pads or cuts every clip to
``max_length`` frames (1024, about 10 s), so clips of any length run in batches.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import HeadArgs

__all__ = ["DEFAULT_VARIANT", "FILES", "TASKS", "ModelArgs"]

#: the ONNX files by role (``onnx/model.onnx`` and its variants)
FILES = {"model": ("model",)}
TASKS = frozenset({"audio-classification"})
DEFAULT_VARIANT = None


@dataclass
class ModelArgs(HeadArgs):
    """The labels of the classifier head (``HeadArgs``)."""
