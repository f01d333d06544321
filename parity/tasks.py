"""One parity spec per task: its reference, and how a result is compared with the reference's.

>>> PARITY["fill-mask"].reference
'transformers'
>>> from transmuter_mlx.pipelines import TASKS
>>> sorted([*PARITY, *WITHOUT_PARITY]) == sorted(TASKS)           # every task, one way or the other
True

A task of transmuter_mlx's table (``transmuter_mlx.pipelines.TASKS``) has a row in ``PARITY`` or a
reason in ``WITHOUT_PARITY`` (tests/test_parity_table.py checks it). ``suite`` names the parity run
that checks it, ``python -m parity SUITE``, with its cases in ``parity/SUITE.py`` and its report in
``parity/reports/SUITE.md``: a vision or audio task adds a row here and cases there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType

from . import audio_reference as audio
from . import text_reference as text
from . import vision_reference as vision

__all__ = ["PARITY", "WITHOUT_PARITY", "TaskParity", "suites"]


@dataclass(frozen=True)
class TaskParity:
    """How one task is checked against its reference at fp32 (quantized variants: see parity/runner.py).

    ``run_reference(task, folder, inputs, options)`` gives the reference's results in our result
    shapes; ``items(result)`` the normal form ``[(key, score or vector)]`` in which keys must agree
    and scores are compared; ``swaps``: whether two items whose reference scores are within the
    tolerance may come in either order (ranked lists; not the elements of an embedding).
    """

    suite: str
    reference: str
    run_reference: text.Reference
    items: Callable[[dict], text.Items]
    swaps: bool = True
    tolerance: float | None = None  # fp32's, when the spec gives the task its own (else runner.TOLERANCE)
    quantized_tolerance: float | None = None  # q8's and q4's, where the task's differs (the row says why)


def _transformers(convert: Callable) -> text.Reference:
    return partial(text.transformers_pipeline, convert=convert)


#: detections: fp32 scores within 5e-5 (the spec's 1e-4 halved) and boxes within 3e-3 px (the spec's 1e-3 px is
#: for trained weights): on the random-weight DETR a float32 rounding anywhere grows through the random heads. On
#: coffee, PyTorch's own scores and boxes move by up to 1.3e-5 and 1.1e-3 px with each convolution weight moved
#: by half an ulp (5-6 draws), its boxes by 9.3e-4 px with the pixels so moved, and by 1.2e-5 and 1.1e-3 px with
#: its frozen batch norms folded into the convolutions; ours fold them too (``FusedConv``, as onnxruntime's
#: optimizer does): up to 1.8e-5 and 1.7e-3 px on torch and on mlx (2.7e-5 and 2.3e-3 px on torch when the
#: shortcut's convolution took the residual sum); a MatMul's or Conv's summation
#: order alone gave 1.1e-3 px on mlx on an AMD EPYC (onnxruntime on the same file: 7.9e-4 px). q8: 1e-3 for the
#: score as every task's, the box's 1e-3 (measured at most 2e-7 and 1.2e-4 px)
_DETECTION = {"score": {"fp32": 5e-5, "q8": 1e-3}, "box": {"fp32": 3e-3, "q8": 1e-3}}
#: zero-shot detections: the spec's for OWL-ViT/OWLv2 (Grounding DINO's scores: 6e-4 of its reference,
#: onnxruntime: its items' ``onnx_score``); q8 3e-3 and 0.05 px: on mlx one DynamicQuantizeLinear code of
#: Grounding DINO's encoder rounds the other way than in onnxruntime (an input a few ulps apart on an exact
#: .5), which moves its scores by up to 2.2e-3 and its boxes by 0.021 px (measured; OWL within 2e-7)
_OPEN = {"score": {"fp32": 1.1e-4, "q8": 3e-3}, "box": {"fp32": 0.011, "q8": 0.05}}
#: depth maps: within 1e-4 of the reference map's largest value (the spec's); q8 5e-3 of it and the 8-bit map
#: 2 steps: in the tiny DPTs' heads one or two DynamicQuantizeLinear codes of ~30000 round the other way than in
#: onnxruntime (an input a float32 ulp apart on an exact .5), which moves the map by up to 4.3e-3 of its
#: largest value on both backends (measured), so a pixel can be 2 steps of 255 away
_DEPTH = {"fp32": 1e-4, "q8": 5e-3}
#: 8-bit images (depth, matte, upscaled image): a value 1 step away (the spec's)
_STEP = {"fp32": 1.0, "q8": 1.0}

PARITY: MappingProxyType[str, TaskParity] = MappingProxyType(
    {
        "text-embedding": TaskParity(
            "text", "sentence-transformers", text.sentence_embeddings, text.embedding_items, swaps=False
        ),
        "text-classification": TaskParity(
            "text", "transformers", _transformers(text.classification), text.label_items
        ),
        "text-ranking": TaskParity("text", "sentence-transformers", text.cross_encoder_ranks, text.ranking_items),
        "zero-shot-classification": TaskParity(
            "text", "transformers", _transformers(text.zero_shot), text.label_items
        ),
        "token-classification": TaskParity(
            "text", "transformers", _transformers(text.entities), text.entity_items
        ),
        "zero-shot-entity-recognition": TaskParity(
            "text", "gliner", text.gliner_entities, text.entity_items
        ),
        "fill-mask": TaskParity("text", "transformers", _transformers(text.masked_tokens), text.fill_mask_items),
        "question-answering": TaskParity("text", "transformers", _transformers(text.answers), text.answer_items),
        "image-classification": TaskParity(
            "vision", "transformers", vision.image_classification, text.label_items
        ),
        "image-embedding": TaskParity(
            "vision", "transformers", vision.image_embeddings, vision.embedding_items, swaps=False
        ),
        "zero-shot-image-classification": TaskParity(
            "vision", "transformers", vision.zero_shot_image_classification, text.label_items
        ),
        "object-detection": TaskParity(
            "vision", "transformers", vision.object_detection,
            partial(vision.detection_items, score=_DETECTION["score"], box=_DETECTION["box"]),
            tolerance=_DETECTION["score"]["fp32"],
        ),
        "zero-shot-object-detection": TaskParity(
            "vision", "transformers (Grounding DINO: onnxruntime)", vision.zero_shot_object_detection,
            partial(vision.detection_items, score=_OPEN["score"], box=_OPEN["box"], onnx_score={"fp32": 6e-4}),
            tolerance=_OPEN["score"]["fp32"], quantized_tolerance=_OPEN["score"]["q8"],
        ),
        "depth-estimation": TaskParity(
            "vision", "transformers", vision.depth_estimation,
            partial(vision.depth_items, relative=_DEPTH, steps={"fp32": 1.0, "q8": 2.0}), swaps=False,
        ),
        "image-segmentation": TaskParity(
            "vision", "transformers", vision.image_segmentation,
            partial(vision.segment_items, score={"fp32": 1e-4, "q8": 1e-3}), swaps=False,
        ),
        "background-removal": TaskParity(
            "vision", "onnxruntime + transformers.js", vision.background_removal,
            partial(vision.image_items, steps=_STEP, key="mask"), swaps=False,
        ),
        "image-to-image": TaskParity(
            "vision", "transformers", vision.image_to_image, partial(vision.image_items, steps=_STEP), swaps=False,
        ),
        # segment timestamps within one time step (the spec's); words and CTC offsets: their items carry 1e-6
        "automatic-speech-recognition": TaskParity(
            "audio", "transformers", audio.speech_recognition, audio.transcript_items, swaps=False, tolerance=0.02,
        ),
        "audio-classification": TaskParity(
            "audio", "transformers", audio.audio_classification, audio.classification_items
        ),
        "zero-shot-audio-classification": TaskParity(
            "audio", "transformers", audio.zero_shot_audio_classification, audio.classification_items
        ),
        "text-to-speech": TaskParity(
            "audio", "PyTorch (noise=False)", audio.speech, audio.speech_items, swaps=False
        ),
    }
)

_GENERATE = "token parity with transformers' generate runs in the tests (no parity report yet)"
WITHOUT_PARITY: MappingProxyType[str, str] = MappingProxyType(
    {
        "text-generation": f"{_GENERATE}: tests/test_text_generation.py",
        "text2text-generation": f"{_GENERATE}: tests/test_text_to_text.py",
        "translation": f"text2text-generation under another name; {_GENERATE}: tests/test_text_to_text.py",
        "summarization": f"text2text-generation under another name; {_GENERATE}: tests/test_text_to_text.py",
    }
)


def suites() -> list[str]:
    """The parity runs that the specs name: ``["text", "vision"]``."""
    return sorted({spec.suite for spec in PARITY.values()})
