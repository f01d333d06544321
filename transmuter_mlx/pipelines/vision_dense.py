"""The dense image tasks: a value for each pixel of the image (depth, a label, a matte) or a new image.

Results follow transformers' pipelines (transformers.js's for background removal): an image result is
a PIL image (``np.asarray`` gives its uint8 pixels), a float map is an array of the pipeline's backend
(``mx.array`` on mlx, ``torch.Tensor`` on torch). The model's outputs are resized to the image's size
on the host, in numpy: PyTorch's bicubic and bilinear ``interpolate`` (``resize.py``), Pillow's bilinear
resize for a matte.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
from PIL import Image

from .base import Prepared
from .resize import interpolate
from .segments import mask_segments, query_semantic_map, ranked_segments, semantic_map
from .vision import ImagePipeline

__all__ = ["BackgroundRemoval", "DepthEstimation", "ImageSegmentation", "ImageToImage", "cutout", "depth_image"]

SUBTASKS = ("panoptic", "instance", "semantic")  # transformers' order when no subtask is given


class DepthEstimation(ImagePipeline):
    """A depth map of the image: ``{"predicted_depth": array (height, width), "depth": PIL image "L"}``.

    >>> import transmuter_mlx as tm
    >>> from tests.fixtures.images import image
    >>> estimate = tm.vision.depth_estimation("onnx-community/depth-anything-v2-small")
    >>> result = estimate(image("chelsea"))
    >>> tuple(result["predicted_depth"].shape) == result["depth"].size[::-1] == image("chelsea").size[::-1]
    True
    >>> result["depth"].mode, int(np.asarray(result["depth"]).max())
    ('L', 255)

    As transformers' depth-estimation pipeline: ``predicted_depth`` is the model's depth resized to
    the image's size with PyTorch's bicubic interpolation (``align_corners=False``), float32;
    ``depth`` is that map scaled to 0..255 (nearest 255, farthest 0) and truncated to 8 bits.
    """

    task = "depth-estimation"

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        depth = self.output(outputs[0], self.family.DEPTH_OUTPUT)
        depth = interpolate(depth.reshape(depth.shape[-2:]), prepared.rows[0].original_size, "bicubic")
        return {"predicted_depth": self.model.backend.asarray(depth), "depth": depth_image(depth)}


def depth_image(depth: np.ndarray) -> Image.Image:
    """The 8-bit image of a depth map as transformers' pipeline makes it: ``(d - min) / (max - min) * 255``
    in float32, truncated (a flat map, which transformers turns into NaNs, gives zeros)."""
    depth = np.asarray(depth, dtype=np.float32)
    low, spread = depth.min(), depth.max() - depth.min()
    scaled = (depth - low) / spread * 255 if spread > 0 else np.zeros_like(depth)
    return Image.fromarray(scaled.astype(np.uint8), mode="L")


class ImageSegmentation(ImagePipeline):
    """The segments of an image: ``{"segments": [{"label", "score", "mask": PIL image "L"}, ...]}``.

    >>> import transmuter_mlx as tm
    >>> from tests.fixtures.images import image
    >>> segment = tm.vision.image_segmentation("Xenova/segformer-b0-finetuned-ade-512-512")
    >>> segments = segment(image("chelsea"))["segments"]
    >>> segments[0]["score"], segments[0]["mask"].mode, segments[0]["mask"].size == image("chelsea").size
    (None, 'L', True)
    >>> sum(int((np.asarray(s["mask"]) == 255).sum()) for s in segments) == 451 * 300  # each pixel once
    True

    As transformers' image-segmentation pipeline, by the subtasks of the model's family (the first of
    panoptic, instance, semantic it has, or ``subtask``). Semantic: a map per label (SegFormer, DPT: the
    logits; DETR, Mask2Former: each query's label probabilities times its mask) resized to the image's
    size with PyTorch's bilinear interpolation (``align_corners=False``), each pixel given the label of
    its largest value, one segment per label present in the order of the label ids, the score None.
    Panoptic (DETR, Mask2Former) and instance (DETR): ``post_process_panoptic_segmentation`` with
    ``threshold`` (0.9), ``mask_threshold`` (0.5) and ``overlap_mask_area_threshold`` (0.5), one segment
    per query kept, in query order, with its score. Instance (Mask2Former): its
    ``post_process_instance_segmentation``, the best (query, label) pairs scoring at least ``threshold``
    (the two other options unused), in the order of torch's unsorted ``topk``, a later mask over an
    earlier one. A mask is 255 on the segment's pixels, 0 elsewhere (a segment painted over is all 0).
    """

    task = "image-segmentation"
    defaults = MappingProxyType(
        {"subtask": None, "threshold": 0.9, "mask_threshold": 0.5, "overlap_mask_area_threshold": 0.5}
    )

    def prepare_options(self, options: dict[str, Any]) -> dict[str, Any]:
        served = getattr(self.family, "SEGMENTATION_SUBTASKS", ())
        subtask = options["subtask"]
        if subtask is not None and subtask not in SUBTASKS:
            raise ValueError(f"{self.task}: subtask must be one of {SUBTASKS} or None, got {subtask!r}")
        chosen = next((s for s in SUBTASKS if s in served and subtask in (s, None)), None)
        if chosen is None:
            raise ValueError(f"{self.task}: subtask {subtask!r} is not supported for {self.repo.name} "
                             f"(it supports {list(served)})")
        return {**options, "subtask": chosen}

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        size, subtask = prepared.rows[0].original_size, options["subtask"]
        queries = getattr(self.family, "SEGMENTATION_OUTPUTS", None)  # a class and a mask per query
        if queries is None:  # a logit map per label (SegFormer, DPT)
            logits = self.output(outputs[0], "logits")
            if logits.ndim != 3:
                raise ValueError(f"{self.task}: {self.repo.name} gives logits of shape {logits.shape}, "
                                 "not (labels, height, width) of a segmentation head")
            segmentation = semantic_map(logits, size)
            found = [(c, c, None) for c in np.unique(segmentation)]
        else:
            classes, masks = (self.output(outputs[0], name) for name in queries)
            mask_size = self.family.MASK_LOGITS_SIZE
            if subtask == "semantic":
                segmentation = query_semantic_map(classes, masks, size, mask_size)
                found = [(c, c, None) for c in np.unique(segmentation)]
            else:
                if subtask == "instance" and self.family.INSTANCE_SEGMENTS == "ranked":
                    segmentation, info = ranked_segments(classes, masks, size, options["threshold"], mask_size)
                else:
                    segmentation, info = mask_segments(
                        classes, masks, size, options["threshold"], options["mask_threshold"],
                        options["overlap_mask_area_threshold"], mask_size,
                    )  # fmt: skip
                found = [(s["id"], s["label_id"], s["score"]) for s in info]
        return {"segments": [
            {"label": self.args.id2label[int(label)], "score": score,
             "mask": Image.fromarray(np.where(segmentation == key, 255, 0).astype(np.uint8), mode="L")}
            for key, label, score in found
        ]}


class BackgroundRemoval(ImagePipeline):
    """The foreground's matte: ``{"mask": PIL image "L"}`` of the image's size (255: foreground).

    >>> import transmuter_mlx as tm
    >>> from tests.fixtures.images import image
    >>> remove = tm.vision.background_removal("onnx-community/ormbg-ONNX")
    >>> result = remove(image("chelsea"), return_image=True)
    >>> result["mask"].mode, result["mask"].size == image("chelsea").size, result["image"].mode
    ('L', True, 'RGBA')

    As transformers.js's background-removal pipeline: the model's first output, through a sigmoid
    when a value is outside 0..1, times 255 truncated to 8 bits, resized to the image's size with
    Pillow's bilinear filter (transformers.js resizes with sharp, which can differ at the foreground's
    edges). ``return_image=True`` adds ``"image"``: the RGBA cut-out, the image with the mask as its
    alpha (what transformers.js returns; :func:`cutout` makes it from a result).
    """

    task = "background-removal"
    defaults = MappingProxyType({"return_image": False})
    EPSILON = 1e-5  # transformers.js: values this far outside 0..1 are logits (onnxruntime issue 23943)

    @property
    def batch_size(self) -> int:
        """One image per call when the graph fixes its batch at 1 (``onnx-community/ormbg-ONNX``)."""
        batch = self.model.inputs[0].shape[0] if self.model.inputs[0].shape else None
        return 1 if batch == 1 else super().batch_size

    def run_model(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The pixels go to the graph's one input whatever its name, as transformers.js feeds them."""
        names = [i.name for i in self.model.inputs]
        if "pixel_values" not in names and len(names) == 1 and "pixel_values" in feeds:
            feeds = {names[0]: feeds["pixel_values"]}
        return super().run_model(feeds)

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        matte = self.output(outputs[0], self.model.outputs[0].name)
        mask = matte_image(matte.reshape(matte.shape[-2:]), prepared.rows[0].original_size, self.EPSILON)
        result = {"mask": mask}
        if options["return_image"]:
            result["image"] = cutout(prepared.data, mask)
        return result


def matte_image(matte: np.ndarray, size: tuple[int, int], epsilon: float = 1e-5) -> Image.Image:
    """A (height, width) matte as transformers.js's pipeline makes its mask: a sigmoid (float64, stored as
    float32) when a value is outside 0..1 by more than ``epsilon``, ``* 255`` truncated to uint8, then
    Pillow's bilinear resize to ``size`` (height, width)."""
    matte = np.asarray(matte, dtype=np.float32)
    if (matte < -epsilon).any() or (matte > 1 + epsilon).any():
        matte = (1 / (1 + np.exp(-matte.astype(np.float64)))).astype(np.float32)
    scaled = matte * np.float32(255)  # a Float32Array: the product rounded to float32, then truncated
    mask = Image.fromarray(np.clip(np.trunc(scaled), 0, 255).astype(np.uint8), mode="L")
    return mask.resize((size[1], size[0]), Image.Resampling.BILINEAR)


def cutout(image: Image.Image, mask: Image.Image) -> Image.Image:
    """The RGBA image whose alpha is ``mask`` (a background-removal result's): the foreground cut out."""
    rgba = image.convert("RGBA")
    rgba.putalpha(mask)
    return rgba


class ImageToImage(ImagePipeline):
    """A new image made from the image (super-resolution): ``{"image": PIL image "RGB"}``.

    >>> import transmuter_mlx as tm
    >>> from tests.fixtures.images import image
    >>> upscale = tm.vision.image_to_image("Xenova/swin2SR-classical-sr-x2-64")
    >>> larger = upscale(image("chelsea"))["image"]
    >>> larger.mode, image("chelsea").size, larger.size
    ('RGB', (451, 300), (902, 600))

    As transformers' image-to-image pipeline: the output clipped to 0..1, times 255, rounded to 8 bits.
    The processor pads the image at the bottom and the right to a multiple of its size divisor;
    transformers keeps the upscaled padding in its image, this pipeline crops it away, so the image
    is exactly the model's factor (``upscale``) times the input's size.
    """

    task = "image-to-image"

    def postprocess(self, prepared: Prepared, outputs: list[dict[str, np.ndarray]],
                    options: Mapping[str, Any]) -> dict[str, Any]:
        output = self.output(outputs[0], self.family.IMAGE_OUTPUT)
        output = output.reshape(output.shape[-3:])
        row = prepared.rows[0]
        (height, width), (fed_h, fed_w) = row.original_size, row.pixel_values.shape[-2:]
        # the factor from the sizes, so any upscaler (x2, x4, ...) crops right without reading config.json
        crop = (height * output.shape[-2] // fed_h, width * output.shape[-1] // fed_w)
        return {"image": to_image(output[:, : crop[0], : crop[1]])}


def to_image(chw: np.ndarray) -> Image.Image:
    """A (3, H, W) float image in 0..1 as transformers' image-to-image pipeline turns it into 8 bits."""
    pixels = np.moveaxis(np.clip(chw.astype(np.float32), 0, 1), 0, -1)
    return Image.fromarray((pixels * np.float32(255.0)).round().astype(np.uint8), mode="RGB")
