"""References of the vision tasks, and the normal form in which their results are compared.

>>> embedding_items({"embedding": [3.0, 4.0]})[0][0]
((2,),)

fp32: transformers 4.57.6 pipelines (and models, where the pipeline has no such output) on the
fixture's PyTorch weights, the images read from the same files; where the spec says so, onnxruntime on
the same ONNX file with transformers' (or transformers.js's) post-processing. The rows of parity/tasks.py
pick, per task, one reference and one normal form from here (and from parity/text_reference.py). A
reference is computed once per task, fixture, inputs and options (both backends compare with it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from .exact_int8 import reference_source
from .text_reference import Items, Reference

__all__ = [
    "DegenerateReference", "NearTies", "classification", "detection_items", "embedding_items", "image_classification",
    "image_embeddings", "object_detection", "once", "onnx_detections", "transformers_pipeline", "zero_shot",
    "zero_shot_image_classification", "zero_shot_object_detection",
]

BOX_KEYS = ("xmin", "ymin", "xmax", "ymax")


class DegenerateReference(ValueError):
    """A reference whose values are all alike (ties, zeros, one label): agreeing with it proves little."""


def embedding_items(result: dict) -> Items:
    """An image embedding: its shape must agree, every element is compared."""
    vector = np.asarray(result["embedding"], dtype=np.float32)
    return [((tuple(vector.shape),), vector)]


@functools.cache
def _pipeline(task: str, folder: Path) -> Any:
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers.pipeline(task, model=str(folder), device="cpu")


def once(reference: Reference) -> Reference:
    """``reference`` computed once per task, fixture, inputs and options (the backends share it)."""

    @functools.cache
    def cached(task: str, folder: Path, inputs: tuple, options: str) -> list[dict]:
        return reference(task, folder, list(inputs), json.loads(options))

    @functools.wraps(reference)
    def run(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
        return cached(task, Path(folder), tuple(inputs), json.dumps(options, sort_keys=True))

    return run


def transformers_pipeline(convert: Callable[[Any, Any, dict], dict], hf_task: str | None = None) -> Reference:
    """The reference that runs transformers' pipeline of the task (``hf_task`` when transformers names it
    otherwise) on each input and gives ``convert(pipe, input, options)``, our result."""

    def run(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
        pipe = _pipeline(hf_task or task, folder)
        return [convert(pipe, x, options) for x in inputs]

    return run


def classification(pipe: Any, image: Any, options: dict) -> dict:
    top_k = options.get("top_k", 5)
    extra = {k: options[k] for k in ("function_to_apply",) if k in options}
    out = pipe(image, top_k=pipe.model.config.num_labels if top_k is None else top_k, **extra)
    return {"predictions": [{"label": p["label"], "score": float(p["score"])} for p in out]}


def zero_shot(pipe: Any, image: Any, options: dict) -> dict:
    extra = {k: options[k] for k in ("hypothesis_template",) if k in options}
    out = pipe(image, candidate_labels=options["labels"], **extra)
    return {"predictions": [{"label": p["label"], "score": float(p["score"])} for p in out]}


@once
def image_embeddings(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """CLIP and SigLIP: ``get_image_features`` (what vision_model.onnx's ``image_embeds`` is); other models:
    ``pooler_output`` (the image-feature-extraction pipeline's ``pool=True``), else the first token of
    ``last_hidden_state`` (its first row without it)."""
    import torch
    from transformers.image_utils import load_image

    pipe = _pipeline("image-feature-extraction", folder)
    results = []
    for image in inputs:
        pixels = pipe.image_processor(images=load_image(image), return_tensors="pt")
        with torch.no_grad():
            if hasattr(pipe.model, "get_image_features"):
                vector = pipe.model.get_image_features(**pixels)[0]
            else:
                out = pipe.model(**pixels)
                pooled = getattr(out, "pooler_output", None)
                vector = pooled[0] if pooled is not None else out.last_hidden_state[0, 0]
        vector = vector.numpy().astype(np.float32)
        if options.get("embedding_processor") == "l2_norm":
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        results.append({"embedding": vector})
    return results


@once
def zero_shot_image_classification(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' zero-shot-image-classification pipeline, its tokenizer giving only the text inputs that
    model.onnx takes: SigLIP's export has no ``attention_mask`` (SigLIP was trained attending to its padding,
    hence its padding to 64 tokens), where the pipeline would give PyTorch one."""
    import onnx

    graph_inputs = {i.name for i in onnx.load(str(folder / "onnx" / "model.onnx"), load_external_data=False).graph.input}
    pipe = _pipeline(task, folder)
    pipe.tokenizer.model_input_names = [n for n in pipe.tokenizer.model_input_names if n in graph_inputs]
    return [zero_shot(pipe, x, options) for x in inputs]


image_classification = once(transformers_pipeline(classification))


# ---------------------------------------------------------------- object detection
def detection_items(
    result: dict, score: Mapping[str, float], box: Mapping[str, float], onnx_score: Mapping[str, float] = {}
) -> Items:
    """A detection as ``(label,)`` and ``[score, xmin, ymin, xmax, ymax]`` with its tolerances by variant
    (``score``, ``box`` in pixels); a reference of onnxruntime (``result["reference"]``) takes ``onnx_score``."""
    if result.get("reference") == "onnxruntime":
        score = {**score, **onnx_score}
    limits = {v: np.array([score[v], *[box[v]] * 4]) for v in score}
    return [((d["label"],), np.array([d["score"], *(d["box"][k] for k in BOX_KEYS)], np.float64), limits)
            for d in result["detections"]]


def _untruncated(task: str, folder: Path) -> Any:
    """transformers' pipeline, its boxes the floats of ``post_process_object_detection`` (the pipeline's
    ``_get_bounding_box`` truncates them to ints)."""
    pipe = _pipeline(task, folder)
    pipe._get_bounding_box = lambda box: dict(zip(BOX_KEYS, box.tolist(), strict=True))
    return pipe


def _spread(detections: list[dict], threshold: float) -> list[dict]:
    """``detections``, checked worth comparing where ``threshold`` keeps every candidate: several, their
    scores and boxes apart."""
    scores, xmax = [d["score"] for d in detections], [d["box"]["xmax"] for d in detections]
    if threshold == 0 and (len(detections) < 4 or np.ptp(scores) < 1e-3 or np.ptp(xmax) < 1.0):
        raise DegenerateReference(f"{len(detections)} detections, scores {np.ptp(scores):.1e} apart, "
                                  f"xmax {np.ptp(xmax):.1e} px apart")
    return detections


@once
def object_detection(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' object-detection pipeline (boxes untruncated) at the case's ``threshold`` (its 0.5)."""
    if options.get("top_k") is not None:
        raise ValueError("transformers' object-detection pipeline has no top_k")
    pipe, threshold = _untruncated(task, folder), options.get("threshold", 0.5)
    return [{"detections": _spread(pipe(image, threshold=threshold), threshold)} for image in inputs]


@once
def zero_shot_object_detection(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' zero-shot-object-detection pipeline (boxes untruncated); Grounding DINO: onnxruntime on
    model.onnx with that pipeline's post-processing (``onnx_detections``), as the spec says, since the
    pipeline would give the PyTorch model each label alone where the exports take a label and a period."""
    labels = options.get("labels") or options.get("candidate_labels")
    threshold, top_k = options.get("threshold", 0.1), options.get("top_k")
    if json.loads((folder / "config.json").read_text())["model_type"] == "grounding-dino":
        return [{"detections": _spread(found[:top_k] if top_k else found, threshold), "reference": "onnxruntime"}
                for found in onnx_detections(folder, "model.onnx", inputs, threshold, labels)]
    pipe = _untruncated(task, folder)
    return [{"detections": _spread(pipe(image, candidate_labels=labels, threshold=threshold,
                                        **({"top_k": top_k} if top_k else {})), threshold)} for image in inputs]


@functools.cache
def _session(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(reference_source(path), providers=["CPUExecutionProvider"])


def onnx_detections(folder: Path, file: str, inputs: list, threshold: float, labels: list[str]) -> list[list[dict]]:
    """Grounding DINO's detections of onnxruntime on ``onnx/file`` between transformers' image processor and
    tokenizer and its ``post_process_object_detection``, as the zero-shot-object-detection pipeline runs
    them: one run per label, its text the label in lowercase and a period, sorted by score (stable)."""
    import torch
    import transformers

    processor = transformers.AutoImageProcessor.from_pretrained(folder, use_fast=False)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    session = _session(folder / "onnx" / file)
    names = [i.name for i in session.get_inputs()]
    results = []
    for image in inputs:
        picture = transformers.image_utils.load_image(image)
        target = torch.tensor([[picture.height, picture.width]], dtype=torch.int32)
        found = []
        for label in labels:
            feeds = {**processor(images=picture, return_tensors="np"),
                     **tokenizer(label.strip().lower() + ".", return_tensors="np")}
            feeds = {n: np.asarray(feeds[n]) for n in names}
            feeds = {n: v.astype(np.int64) if v.dtype.kind in "iub" else v.astype(np.float32) for n, v in feeds.items()}
            logits, boxes = session.run(["logits", "pred_boxes"], feeds)
            out = SimpleNamespace(logits=torch.from_numpy(logits), pred_boxes=torch.from_numpy(boxes))
            raw = processor.post_process_object_detection(out, threshold, target)[0]
            found += [{"score": raw["scores"][i].item(), "label": label,
                       "box": dict(zip(BOX_KEYS, raw["boxes"][i][0].tolist()))} for i in raw["scores"].nonzero()]
        results.append(sorted(found, key=lambda d: d["score"], reverse=True))
    return results


# ---------------------------------------------------------------- dense tasks
#: two best (resized) logits this close may take either order in float32: the pixel's label may flip
TIE = 1e-4


def _picture(image: str) -> Any:
    from transformers.image_utils import load_image

    return load_image(image)


def _pixels(value: Any) -> np.ndarray:
    """An image (PIL) or an array (numpy, mlx, torch) as float64 numpy."""
    return np.asarray(value, np.float64)


@once
def depth_estimation(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' depth-estimation pipeline: predicted_depth (bicubic-resized) and the 8-bit depth image."""
    pipe = _pipeline(task, folder)
    results = [pipe(image) for image in inputs]
    for r in results:
        depth = r["predicted_depth"].numpy()
        if np.ptp(depth) <= 0.1 * np.abs(depth).max():
            raise DegenerateReference(f"a depth map {np.ptp(depth):.1e} deep (largest {np.abs(depth).max():.1e})")
    return [{"predicted_depth": r["predicted_depth"].numpy(), "depth": r["depth"]} for r in results]


def depth_items(result: dict, relative: Mapping[str, float], steps: Mapping[str, float]) -> Items:
    """The depth map within ``relative`` of its largest value (the reference's), the 8-bit image ``steps``."""
    depth = _pixels(result["predicted_depth"])
    largest = float(np.abs(depth).max(initial=0.0))
    image = result["depth"]
    return [(("predicted_depth", depth.shape), depth, {v: r * largest for v, r in relative.items()}),
            (("depth", image.mode, image.size), _pixels(image), steps)]


@once
def image_to_image(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' image-to-image pipeline, its image cropped to ``upscale`` times the input: the upscaled
    padding (Swin2SR pads to a multiple of its window) removed, as ours removes it."""
    pipe = _pipeline(task, folder)
    upscale = pipe.model.config.upscale
    results = []
    for image in inputs:
        picture = _picture(image)
        out = pipe(picture).crop((0, 0, upscale * picture.width, upscale * picture.height))
        if np.ptp(np.asarray(out)) <= 10:
            raise DegenerateReference("a flat image")
        results.append({"image": out})
    return results


def image_items(result: dict, steps: Mapping[str, float], key: str = "image") -> Items:
    """An 8-bit image (``result[key]``): its mode and size must agree, each value within ``steps``."""
    image = result[key]
    return [((key, image.mode, image.size), _pixels(image), steps)]


def transformers_js_mask(output: np.ndarray, size: tuple[int, int]) -> Any:
    """transformers.js's ImageSegmentationPipeline without a subtask (background-removal): the first output of
    the image, sigmoid_() when a value is outside 0..1 by over 1e-5, mul_(255).to('uint8') (a Float32Array
    into a Uint8Array: truncation), resized to the image (here Pillow's bilinear, as the spec says)."""
    from PIL import Image

    item = output[0].astype(np.float32)
    if (item < -1e-5).any() or (item > 1 + 1e-5).any():
        item = np.array([1 / (1 + np.exp(-float(v))) for v in item.ravel()], np.float32).reshape(item.shape)
    data = np.array([int(float(v)) for v in (item * np.float32(255)).ravel()], np.uint8).reshape(item.shape[-2:])
    return Image.fromarray(data, "L").resize(size, Image.Resampling.BILINEAR)


@once
def background_removal(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """onnxruntime on model.onnx, fed as transformers.js's ImageFeatureExtractor feeds it (the fixture's
    ``BackgroundProcessor``), with transformers.js's post-processing (``transformers_js_mask``): Python
    transformers has no such pipeline."""
    from tests.fixtures.vision_models import BackgroundProcessor

    session = _session(folder / "onnx" / "model.onnx")
    results = []
    for image in inputs:
        picture = _picture(image)
        pixels = BackgroundProcessor()([picture])["pixel_values"]
        mask = transformers_js_mask(session.run(None, {session.get_inputs()[0].name: pixels})[0], picture.size)
        if np.ptp(np.asarray(mask)) <= 20:
            raise DegenerateReference("a flat matte")
        results.append({"mask": mask})
    return results


def _margins(pipe: Any, picture: Any, subtask: str, threshold: float) -> np.ndarray:
    """How far each pixel is from a decision of transformers' post-processing of the PyTorch model's outputs:
    semantic, the gap between the two best label maps (a model's resized logits; a mask model's class
    probabilities times its sigmoid masks); panoptic, between the two best weighted mask probabilities of the
    queries kept; instance, the smallest |mask logit| at the pixel's source (its masks are logits over 0).
    Mask2Former's mask logits are first resized to 384x384, as its post-processing resizes them."""
    import torch

    with torch.no_grad():
        out = pipe.model(**pipe.image_processor(picture, return_tensors="pt"))
    size = picture.size[::-1]

    def resized(maps: Any) -> Any:
        return torch.nn.functional.interpolate(maps[None], size=size, mode="bilinear", align_corners=False)[0]

    def gap(maps: Any) -> np.ndarray:
        if len(maps) < 2:
            return np.full(size, np.inf)
        top = torch.topk(maps, 2, dim=0).values
        return (top[0] - top[1]).numpy()

    if getattr(out, "class_queries_logits", None) is not None:  # Mask2Former
        logits, masks = out.class_queries_logits[0], out.masks_queries_logits
        masks = torch.nn.functional.interpolate(masks, size=(384, 384), mode="bilinear", align_corners=False)[0]
    elif getattr(out, "pred_masks", None) is not None:  # DETR
        logits, masks = out.logits[0], out.pred_masks[0]
    else:  # a semantic model: its logits
        return gap(resized(out.logits[0]))
    probs = logits.softmax(-1)
    if subtask == "semantic":
        return gap(resized(torch.einsum("qc,qhw->chw", probs[:, :-1], masks.sigmoid())))
    if subtask == "instance":
        smallest = masks.abs().min(0).values[None, None]
        return torch.nn.functional.interpolate(smallest, size=size, mode="nearest")[0, 0].numpy()
    scores, labels = probs.max(-1)
    kept = (labels != probs.shape[-1] - 1) & (scores > threshold)
    return gap(resized(masks[kept].sigmoid()) * scores[kept][:, None, None] if kept.any() else masks[:0])


@once
def image_segmentation(task: str, folder: Path, inputs: list, options: dict) -> list[dict]:
    """transformers' image-segmentation pipeline (subtask and thresholds: the case's options), with
    ``near_ties``: the pixels within ``TIE`` of a decision (``_margins``), where float32 may give either side;
    some segment in the case's images."""
    pipe = _pipeline(task, folder)
    results = []
    for image in inputs:
        picture = _picture(image)
        segments = pipe(picture, **options)
        scored = any(s["score"] is not None for s in segments)
        subtask = options.get("subtask") or ("panoptic" if scored else "semantic")
        ties = _margins(pipe, picture, subtask, options.get("threshold", 0.9)) < TIE
        results.append({"segments": [{"label": s["label"], "score": s["score"], "mask": s["mask"]} for s in segments],
                        "near_ties": ties})
    if not any(r["segments"] for r in results):
        raise DegenerateReference("no segment in the case's images")
    return results


@dataclass(frozen=True)
class NearTies:
    """A mask's tolerance: pixels may differ only where the reference is near a decision (``ties``), and at
    most ``budget`` of them (max(3, 0.1%) of the image's pixels, as the segmentation tests bound them)."""

    ties: np.ndarray
    budget: int

    def within(self, gap: np.ndarray) -> bool:
        differ = gap > 0
        return not (differ & ~self.ties).any() and int(differ.sum()) <= self.budget

    def __str__(self) -> str:
        return f"{int(self.ties.sum())} near-tie pixels, at most {self.budget} of them"


def segment_items(result: dict, score: Mapping[str, float]) -> Items:
    """Per segment, its score (None: must be None) within ``score``, and its mask (pixels 0/1): at fp32 equal
    except a few of the reference's ``near_ties`` (``NearTies``); at q8, where the reference is our
    post-processing of onnxruntime's outputs, equal."""
    items: Items = []
    for s in result["segments"]:
        mask = np.asarray(s["mask"], np.float64).ravel() / 255
        ties = result.get("near_ties")
        pixels = {"fp32": 0.0, "q8": 0.0} if ties is None else {
            "fp32": NearTies(ties.ravel(), max(3, int(1e-3 * ties.size))), "q8": 0.0}
        items += [((s["label"], "score", s["score"] is None), s["score"] or 0.0, score),
                  ((s["label"], "mask", s["mask"].mode, s["mask"].size), mask, pixels)]
    return items
