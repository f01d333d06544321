"""The image pipeline base: an image in, its pixels through one encoder graph, a result per image.

>>> import transmuter_mlx as tm
>>> classify = tm.vision.image_classification("Xenova/vit-base-patch16-224")
>>> isinstance(classify, ImagePipeline), classify.processor.kind
(True, 'image')

``preprocess`` loads an input as transformers' ``load_image`` does (a PIL image, a path, bytes or a
``uint8`` array; EXIF orientation applied, RGB) and turns it into :class:`ImageFeatures` with the
repository's image processor (``preprocessor_config.json``); ``forward`` runs the pixels in batches
of ``compile.batch_size`` when the processor gives every image one size (``fixed_size``), and one
image per call otherwise (the graph then compiles once per image size); ``postprocess`` is the
task's own. The loaded image is kept as ``Prepared.data`` for tasks whose result is sized to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..images import IMAGE_TYPES, load_image
from ..processors import Processor
from ..processors.image import ImageFeatures, ImageProcessor
from .base import EncoderPipeline, Prepared

__all__ = ["ImageFeatures", "ImagePipeline", "image_rows"]


class ImagePipeline(EncoderPipeline):
    """A task on one image graph (the family's ``FILES["model"]``) and the repository's image processor."""

    per_position = False
    single_types = IMAGE_TYPES

    def build_processor(self) -> Processor:
        """The image processor of ``preprocessor_config.json`` (or the ``featurizer=`` option)."""
        featurizer = self.options.featurizer
        return featurizer if featurizer is not None else ImageProcessor.from_repo(self.repo, self.task)

    def preprocess(self, index: int, item: Any, options: Mapping[str, Any]) -> Prepared:
        image = load_image(item, self.task, index)
        return Prepared(self.processor.preprocess(image, index), data=image)

    @property
    def batch_size(self) -> int:
        """Images per call: ``compile.batch_size`` for one image size, else 1 (each size compiles once)."""
        return self.options.compile.batch_size if getattr(self.processor, "fixed_size", False) else 1

    def run_model(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model on one batch; each feed cast to the dtype the graph declares (fp16 files take fp16)."""
        return super().run_model(self.declared_feeds(feeds, "the image processor"))


def image_rows(prepared: list[Prepared]) -> list[ImageFeatures]:
    """The features of every input of a call, in order."""
    return [row for p in prepared for row in p.rows]
