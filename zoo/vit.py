"""Image encoders: ViT and the families that run the same way (one ONNX graph, ``pixel_values`` in).

>>> from transmuter_mlx import zoo
>>> vit = zoo.family("convnext")
>>> vit.__name__, sorted(vit.TASKS)
('transmuter_mlx.zoo.vit', ['image-classification', 'image-embedding'])
>>> vit.ModelArgs.from_dict({"model_type": "vit", "id2label": {"0": "cat", "1": "dog"}}).num_labels
2

Serves the model types of ``REMAP`` in zoo/__init__.py that map here (DeiT, BEiT, Swin, ConvNeXt,
MobileNet, DINOv2, BiT, ResNet, ...): their graphs give ``logits`` (a classifier) or
``last_hidden_state``/``pooler_output`` (a backbone), and what differs between them is in
preprocessor_config.json, which the image processor reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._base import HeadArgs

#: the ONNX files by role (``onnx/model.onnx`` and its variants)
FILES = {"model": ("model",)}
TASKS = frozenset({"image-classification", "image-embedding"})
DEFAULT_VARIANT = None


@dataclass
class ModelArgs(HeadArgs):
    """The config.json keys the image pipelines read: the labels of a classifier head (``HeadArgs``)."""
