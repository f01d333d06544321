"""image_classification and image_embedding: a classifier head, or the pooled features, of an image."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..zoo._base import score
from .base import Prepared
from .text_embedding import PROCESSORS, TextEmbedding
from .vision import ImagePipeline

__all__ = ["ImageClassification", "ImageEmbedding"]


class ImageClassification(ImagePipeline):
    """Labels of an image, best first: ``{"predictions": [{"label", "score"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> from tests.fixtures.images import photo
    >>> classify = tm.vision.image_classification("Xenova/vit-base-patch16-224")
    >>> classify(photo("chelsea"), top_k=2)["predictions"]
    [{'label': ..., 'score': ...}, {'label': ..., 'score': ...}]

    As transformers' image-classification pipeline: labels from ``id2label``; scores a softmax, a
    sigmoid for one label or ``problem_type`` multi_label_classification (``function_to_apply``
    overrides: ``"softmax"``, ``"sigmoid"``, ``"none"``); ``top_k`` (default 5, at most the number of
    labels; None for all).
    """

    task = "image-classification"
    defaults = MappingProxyType({"top_k": 5, "function_to_apply": None})
    count_options = MappingProxyType({"top_k": (1, True)})

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        name = options["function_to_apply"] or self.args.score_function
        scores = score(self.output(outputs[0], "logits").reshape(-1), name.lower())
        order = np.argsort(-scores, kind="stable")
        top_k = options["top_k"]
        order = order if top_k is None else order[:top_k]
        return {"predictions": [{"label": self.args.id2label[int(i)], "score": float(scores[i])} for i in order]}


class ImageEmbedding(ImagePipeline):
    """An image's embedding: ``{"embedding": array}``.

    >>> import transmuter_mlx as tm
    >>> from tests.fixtures.images import photo
    >>> embed = tm.vision.image_embedding("Xenova/clip-vit-base-patch32", embedding_processor="l2_norm")
    >>> vector = embed(photo("chelsea"))["embedding"]
    >>> vector.ndim, round(float((vector * vector).sum()), 4)
    (1, 1.0)

    The graph is the repository's vision tower when it has one (``vision_model.onnx`` of CLIP and
    SigLIP), else its ``model.onnx``. The embedding is its ``image_embeds`` output, else
    ``pooler_output``, else the first token of ``last_hidden_state``;
    ``embedding_processor="l2_norm"`` normalizes it. Like ``text_embedding``, the embedding is an
    array of the pipeline's backend (``mx.array`` on mlx; ``np.asarray`` converts it).
    """

    task = "image-embedding"
    defaults = MappingProxyType({"embedding_processor": None})
    OUTPUTS = ("image_embeds", "pooler_output", "last_hidden_state")

    def load_file(self, role: str) -> Any:
        """The vision tower stands in for the model when the repository has one."""
        return super().load_file("vision" if role == "model" and self.has_file("vision") else role)

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        if options["embedding_processor"] not in PROCESSORS:
            raise ValueError(f"{self.task}: embedding_processor must be one of {PROCESSORS}, "
                             f"got {options['embedding_processor']!r}")
        return options

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        found = next((n for n in self.OUTPUTS if n in outputs[0]), None)
        if found is None:
            self.output(outputs[0], self.OUTPUTS[0])  # raises, naming the graph's outputs
        vector = outputs[0][found]
        if found == "last_hidden_state":
            vector = vector[0]
        normalize = options["embedding_processor"] == "l2_norm"
        return TextEmbedding.embedding(vector.reshape(-1), None, normalize, self.model.backend)
