"""The image processor protocol: one image -> :class:`ImageFeatures`; a batch of them -> the model's feeds.

>>> import numpy as np
>>> processor = ImageProcessor.from_config({"image_processor_type": "ViTImageProcessor", "size": 32})
>>> features = processor.preprocess(np.zeros((40, 50, 3), np.uint8), index=0)[0]
>>> features.pixel_values.shape, features.original_size, features.resized_size
((3, 32, 32), (40, 50), (32, 32))
>>> processor.collate([features, features], processor.bucket(features))["pixel_values"].shape
(2, 3, 32, 32)

A processor reads ``preprocessor_config.json`` with the keys, defaults and legacy forms of the
transformers 4.57.6 *slow* processor class it names (``image_processor_type``, else
``feature_extractor_type`` with ``FeatureExtractor`` read as ``ImageProcessor``, else the model type of
config.json) and gives that class's ``pixel_values`` (and ``pixel_mask``) for an image loaded as
:func:`transmuter_mlx.images.load_image` loads it, bit for bit. One deliberate difference: transformers
guesses the channel axis, and reads an image 1 or 3 pixels high as channels-first (then fails or
returns nonsense); here every image is channels-last, which equals transformers told
``input_data_format="channels_last"``. A ``...Fast`` type resizes, crops and normalises as transformers'
torchvision processor does instead (transformers itself falls back on the slow class when torchvision is
not installed; ``fast=False`` does the same).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...images import load_image
from ..config import ConfigReader, prefix, registrar
from .ops import fused_normalize, normalize, rescale

if TYPE_CHECKING:
    from ...hub import Repo

__all__ = ["REGISTRY", "ImageFeatures", "ImageProcessor", "size_dict"]

Bucket = tuple[int, ...]

#: transformers' slow processor class name -> our class (filled by ``register``)
REGISTRY: dict[str, type[ImageProcessor]] = {}

IMAGENET_DEFAULT = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
IMAGENET_STANDARD = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
OPENAI_CLIP = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])

_SIZE_KEYS = ({"height", "width"}, {"shortest_edge"}, {"shortest_edge", "longest_edge"}, {"longest_edge"},
              {"max_height", "max_width"})


@dataclass
class ImageFeatures:
    """One image, ready for the model."""

    pixel_values: np.ndarray  # float32 (channels, height, width), what the model takes
    original_size: tuple[int, int]  # (height, width) of the loaded image
    resized_size: tuple[int, int]  # (height, width) after resize, before crop/pad
    pixel_mask: np.ndarray | None = None  # int64 (height, width), 1 on image pixels (DETR-style processors)
    owner: int = 0  # the input index


def size_dict(value: Any, default_to_square: bool = True, max_size: int | None = None, what: str = "size") -> dict:
    """``get_size_dict``: a config's ``size`` as a dict; an int is a square (or the shortest edge, with
    ``default_to_square=False``), a list is (height, width)."""
    if isinstance(value, dict):
        result = dict(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        if default_to_square:
            result = {"height": value, "width": value}
        else:
            result = {"shortest_edge": value} | ({"longest_edge": max_size} if max_size is not None else {})
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        result = {"height": value[0], "width": value[1]}
    elif value is None and max_size is not None and not default_to_square:
        result = {"longest_edge": max_size}
    else:
        raise ValueError(f"{what} {value!r} is not a size (an int, [height, width] or a dict)")
    if set(result) not in _SIZE_KEYS:
        raise ValueError(f"{what} {value!r} must have the keys of one of {[sorted(k) for k in _SIZE_KEYS]}")
    return result


register = registrar(REGISTRY)


class ImageProcessor(ConfigReader):
    """An image processor of one transformers type: ``preprocess`` an image, ``collate`` a batch.

    Subclasses set the defaults of the keys they read and implement :meth:`transform`;
    ``fixed_size`` tells whether every image gives the same ``pixel_values`` shape (then images batch).
    """

    kind = "image"
    names: ClassVar[tuple[str, ...]] = ()
    MEAN_STD: ClassVar[tuple[list[float], list[float]]] = IMAGENET_STANDARD
    RESAMPLE: ClassVar[int] = 2  # BILINEAR

    def __init__(self, config: Mapping[str, Any], task: str = "", fast: bool = False,
                 bilinear_uint8: bool = False) -> None:
        self.config = dict(config)
        self.task = task
        self.fast = fast
        self.bilinear_uint8 = bilinear_uint8  # the fast processors' bilinear on AVX2 CPUs (see resize.py)
        self.feed_names: tuple[str, ...] = ("pixel_values",)
        self.do_rescale = self.flag("do_rescale", True)
        self.rescale_factor = self.config.get("rescale_factor", 1 / 255)
        if self.do_rescale and self.rescale_factor is None:
            raise self.error("rescale_factor must be a number when do_rescale is set")
        self.do_normalize = self.flag("do_normalize", True)
        mean, std = self.MEAN_STD
        self.image_mean = self.value("image_mean", mean)
        self.image_std = self.value("image_std", std)
        resample = self.config.get("resample", self.RESAMPLE)
        if resample is not None and resample not in range(6):
            raise self.error(f"resample {resample!r} is not a Pillow filter (0-5)")
        self.resample = None if resample is None else int(resample)

    # ------------------------------------------------------------------ config
    @classmethod
    def from_config(cls, config: Mapping[str, Any], task: str = "", *, fast: bool | None = None,
                    bilinear_uint8: bool = False) -> ImageProcessor:
        """The processor a preprocessor_config.json names (``ImageProcessor.from_config(json.load(f))``);
        a subclass builds itself. ``fast`` overrides what a ``...Fast`` type name asks for."""
        if cls is not ImageProcessor:
            return cls(config, task, fast=bool(fast), bilinear_uint8=bilinear_uint8)
        name = type_name(config)
        if name is None:
            raise ValueError(f"{prefix(task)}the image processor config names no image_processor_type or "
                             f"feature_extractor_type; supported: {', '.join(sorted(REGISTRY))}")
        base = name.removesuffix("Fast")
        if base not in REGISTRY:
            raise ValueError(f"{prefix(task)}image processor {name!r} is not supported; supported: "
                             f"{', '.join(sorted(REGISTRY))} (and their ...Fast variants)")
        use_fast = name.endswith("Fast") if fast is None else fast
        return REGISTRY[base](config, task, fast=use_fast, bilinear_uint8=bilinear_uint8)

    @classmethod
    def from_repo(cls, repo: Repo, task: str = "", *, fast: bool | None = None) -> ImageProcessor:
        """The processor of a repository's preprocessor_config.json: ``ImageProcessor.from_repo(open_repo(id))``."""
        from ...hub import RepoFileNotFoundError

        config = repo.read_json("preprocessor_config.json")
        if config is None:
            raise RepoFileNotFoundError(f"{prefix(task)}{repo.name} has no preprocessor_config.json, which "
                                        "an image task needs (the image processor's settings)")
        if type_name(config) is None and repo.exists("config.json"):  # transformers falls back on the model's
            from ... import zoo

            name = zoo.image_processor(repo.config)
            config = {**config, "image_processor_type": name} if name else config
        return cls.from_config(config, task, fast=fast)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.names[0] if self.names else ''}{'Fast' if self.fast else ''})"

    # ------------------------------------------------------------------ one image
    @property
    def fixed_size(self) -> bool:
        """Whether every image gives one ``pixel_values`` shape."""
        return False

    def transform(self, image: np.ndarray) -> tuple[np.ndarray, tuple[int, int], np.ndarray | None]:
        """A uint8 RGB ``(height, width, 3)`` image -> its ``(height, width, channels)`` pixels, the size after
        the resize, and its pixel mask (or None)."""
        raise NotImplementedError

    def finish(self, image: np.ndarray) -> np.ndarray:
        """Rescale and normalise (or the fast processors' fused equivalent)."""
        if self.fast and image.dtype == np.uint8:
            return fused_normalize(image, self.do_rescale, self.rescale_factor, self.do_normalize,
                                   self.image_mean, self.image_std)
        if self.do_rescale:
            image = rescale(image, self.rescale_factor)
        if self.do_normalize:
            image = normalize(image, self.image_mean, self.image_std)
        return image

    def preprocess(self, item: Any, index: int) -> list[ImageFeatures]:
        """The features of input ``index`` (anything :func:`~transmuter_mlx.images.load_image` takes)."""
        image = np.asarray(load_image(item, self.task, index))
        try:
            pixels, resized, mask = self.transform(image)
        except ValueError as error:
            raise ValueError(f"{prefix(self.task, index)}{error}") from error
        pixels = np.ascontiguousarray(pixels.transpose(2, 0, 1), dtype=np.float32)
        return [ImageFeatures(pixels, image.shape[:2], tuple(resized), mask, index)]

    # ------------------------------------------------------------------ a batch
    def bucket(self, features: ImageFeatures) -> Bucket:
        return tuple(features.pixel_values.shape)

    def collate(self, batch: Sequence[ImageFeatures], bucket: Bucket) -> dict[str, np.ndarray]:
        """``pixel_values`` float32 (batch, channels, height, width) [+ ``pixel_mask`` int64 (batch, h, w)]."""
        shapes = {f.pixel_values.shape for f in batch}
        if shapes != {tuple(bucket)}:
            raise ValueError(f"images of shapes {sorted(shapes)} cannot share the batch of shape {bucket}")
        feeds = {"pixel_values": np.stack([f.pixel_values for f in batch])}
        if "pixel_mask" in self.feed_names:
            feeds["pixel_mask"] = np.stack([f.pixel_mask for f in batch]).astype(np.int64, copy=False)
        return feeds

    def cut(self, value: np.ndarray, features: ImageFeatures, bucket: Bucket) -> np.ndarray:
        return value


def type_name(config: Mapping[str, Any]) -> str | None:
    """The processor class a config names, as ``AutoImageProcessor`` reads it."""
    name = config.get("image_processor_type")
    if not name and config.get("feature_extractor_type"):
        name = str(config["feature_extractor_type"]).replace("FeatureExtractor", "ImageProcessor")
    return name or None
