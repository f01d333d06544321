"""Image processors: an image -> the pixels (and pixel mask) its model takes, as transformers makes them.

>>> import numpy as np
>>> from transmuter_mlx.processors.image import ImageProcessor
>>> vit = ImageProcessor.from_config({"image_processor_type": "ViTImageProcessor"})
>>> vit.preprocess(np.zeros((300, 451, 3), np.uint8), index=0)[0].pixel_values.shape
(3, 224, 224)

- ``base.py``: :class:`ImageFeatures`, the :class:`ImageProcessor` protocol (``preprocess``, ``bucket``,
  ``collate``, ``cut``), the dispatch on a config's processor type;
- ``processors.py``: the classifiers' and dense tasks' types (ViT, DeiT, BEiT, CLIP, BiT, SigLIP,
  ConvNeXT, MobileNet, OWL-ViT, Segformer, DPT, Swin2SR, and transformers.js's generic
  ``ImageFeatureExtractor``); ``detection.py``: DETR's family, YOLOS, RT-DETR, OWLv2;
  ``segmentation.py``: MaskFormer's and Mask2Former's;
- ``resize.py``: the resizes (Pillow's, torch's antialiased one of the ``...Fast`` types, OWLv2's
  scikit-image one); ``ops.py``: crop, pad, rescale, normalise.
"""

from __future__ import annotations

from . import detection, processors, segmentation  # noqa: F401 - registers the processor types
from .base import REGISTRY, ImageFeatures, ImageProcessor

__all__ = ["REGISTRY", "ImageFeatures", "ImageProcessor"]
