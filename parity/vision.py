"""Parity of the vision pipelines with transformers (and onnxruntime where the spec says), on the vision fixtures.

>>> from parity.vision import CASES, run_case                  # doctest: +SKIP
>>> run_case(CASES[0], "mlx", "fp32").passed                  # doctest: +SKIP
True

``python -m parity vision`` runs every case on both backends, fp32 and q8, and writes
parity/reports/vision.md and vision.json. The cases are this module's (real photographs that
scikit-image ships, and odd images: see tests/fixtures/images.py); how each task is run and compared is
its row of parity/tasks.py; parity/runner.py runs them: fp32 against the reference within the task's
tolerance, q8 against our pipeline logic on onnxruntime's outputs of the same file.
"""

from __future__ import annotations

from . import runner
from .runner import Case, Outcome

__all__ = ["CASES", "IMAGES", "VARIANTS", "main", "run_case"]

TITLE = "Vision pipelines: parity"
INTRO = (
    "fp32 is compared with transformers 4.57.6 pipelines on the fixture's PyTorch weights, on the same image "
    "files, within each task's tolerance of the spec (scores 1e-4; embeddings: every element); labels must be "
    "identical. q8 is compared with the same pipeline logic on onnxruntime's outputs of the same ONNX file, "
    "within 1e-3. A swap of two items whose reference scores are within the tolerance counts as agreement."
)
VARIANTS = ("fp32", "q8")


def _images(*names: str) -> tuple[str, ...]:
    from tests.fixtures.images import image_path

    return tuple(str(image_path(n)) for n in names)


#: the images of the cases: real photographs, then odd sizes and modes (read from files on both sides)
IMAGES = ("chelsea", "coffee", "astronaut", "odd_333x217", "gray", "rgba")
LABELS = ["a cat", "a cup of coffee", "an astronaut", "a dog"]

CASES: list[Case] = [
    *(Case("image-classification", f, IMAGES, {"top_k": None}) for f in ("vit", "convnext", "mobilenet_v2")),
    *(Case("image-embedding", f, IMAGES) for f in ("dinov2", "clip", "siglip")),
    Case("image-embedding", "clip", IMAGES, {"embedding_processor": "l2_norm"}, "l2_norm"),
    Case("zero-shot-image-classification", "clip", IMAGES, {"labels": LABELS}),
    # the fixture's tokenizer.json has no SiglipTokenizer (sentencepiece) beside it, so transformers would not
    # lowercase nor strip punctuation as ours does: the texts are given in that form already
    Case("zero-shot-image-classification", "siglip", IMAGES,
         {"labels": LABELS, "hypothesis_template": "this is a photo of {}"}),
    Case("zero-shot-image-classification", "clip", IMAGES[:2],
         {"labels": LABELS[:2], "hypothesis_template": "A picture of {}!"}, "template"),
]


def run_case(case: Case, backend: str, variant: str) -> Outcome:
    """One case on one backend and variant, on its vision fixture (built offline when not cached)."""
    from tests.fixtures.vision_models import build

    resolved = Case(case.task, case.fixture, _images(*case.inputs), case.options, case.name)
    return runner.check(resolved, build(case.fixture), backend, variant)


def main(argv: list[str] | None = None) -> int:
    """``python -m parity vision [--backend mlx] [--variant fp32] [--task image-classification]``"""
    return runner.main(argv, "vision", CASES, run_case, TITLE, INTRO, VARIANTS)
