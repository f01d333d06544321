"""Object detection and zero-shot object detection: thresholds, top_k, batches, labels, bad input, CLI.

The parity numbers (tests/test_vision_parity.py) are those of ``python -m parity vision`` (parity/vision.py) for these tasks, their rows of
parity/tasks.py and references of parity/vision_reference.py: fp32 against the transformers 4.57.6 pipeline
on the fixture's PyTorch weights (boxes before it truncates them; Grounding DINO: onnxruntime with the
pipeline's post-processing), scores within 5e-5 and boxes within 0.003 px (OWL-ViT/OWLv2: 1.1e-4 and
0.011 px; Grounding DINO's scores 6e-4); q8 against our post-processing of onnxruntime's outputs of the
same file. Labels are identical; a ranked list may swap two detections whose reference scores are within
the score tolerance.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

import transmuter_mlx as tm
from parity import runner
from parity import vision_reference as reference
from parity.tasks import PARITY
from parity.vision import CASES
from tests.fixtures.images import image_path
from tests.fixtures.vision_models import build

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

TASKS = ("object-detection", "zero-shot-object-detection")
PHOTOS = ("chelsea", "coffee", "astronaut", "odd_217x333")
LABELS = ["cat", "a Remote control", "coffee cup"]
KEYS = ("xmin", "ymin", "xmax", "ymax")


def test_tolerances_are_the_specs() -> None:
    def limits(task: str, variant: str, reference_of: str = "") -> list[float]:
        item = PARITY[task].items({"detections": [{"label": "a", "score": 0.5, "box": dict.fromkeys(KEYS, 1.0)}],
                                   "reference": reference_of})[0]
        return item[2][variant].tolist()

    assert limits("object-detection", "fp32") == [5e-5] + [3e-3] * 4
    assert limits("zero-shot-object-detection", "fp32") == [1.1e-4] + [0.011] * 4
    assert limits("zero-shot-object-detection", "fp32", "onnxruntime") == [6e-4] + [0.011] * 4  # Grounding DINO


@pytest.mark.parametrize("case", [c for c in CASES if c.task in TASKS and c.name], ids=lambda c: c.id)
def test_case_thresholds_keep_some_candidates(case) -> None:
    """A threshold case is worth comparing: its reference keeps some of every candidate, not all or none."""
    every = next(c for c in CASES if (c.task, c.fixture, c.name) == (case.task, case.fixture, ""))
    kept, candidates = (sum(len(r["detections"]) for r in references(c)) for c in (case, every))
    assert 0 < kept < candidates


# ---------------------------------------------------------------- helpers
def references(case) -> list[dict]:
    """The fp32 reference of a parity case (computed once per case, as the parity run computes it)."""
    return PARITY[case.task].run_reference(case.task, build(case.fixture), [str(image_path(n)) for n in case.inputs],
                                           dict(case.options))


@functools.cache
def pipe(task: str, fixture: str, backend: str = "mlx", variant: str | None = None, batch_size: int = 1):
    return tm.pipeline(task, str(build(fixture)), backend=backend, variant=variant, compile={"batch_size": batch_size})


def assert_parity(task: str, got: list[dict], want: list[dict]) -> None:
    """fp32 results against a reference, as the parity run compares them."""
    diff, agree, within, detail = runner.compare(task, got, want, PARITY[task].tolerance)
    assert agree and within, detail


def assert_close(got: list[dict], want: list[dict], score: float = 1e-6, box: float = 1e-4) -> None:
    """Two of our own runs: the same detections in the same order."""
    assert [d["label"] for d in got] == [d["label"] for d in want]
    np.testing.assert_allclose([d["score"] for d in got], [d["score"] for d in want], rtol=0, atol=score)
    # boxes in pixels: a float32 ulp at 600 px is 6e-5, and a batch's GEMMs may round a few ulps apart (BLAS
    # kernels chosen by the row count), so a relative part of 1e-6 beside the absolute one
    np.testing.assert_allclose([[d["box"][k] for k in KEYS] for d in got],
                               [[d["box"][k] for k in KEYS] for d in want], rtol=1e-6, atol=box)


def reference_of(task: str, fixture: str, photo: str, **options) -> list[dict]:
    run = reference.object_detection if task == "object-detection" else reference.zero_shot_object_detection
    return run(task, build(fixture), [str(image_path(photo))], options)


# ---------------------------------------------------------------- object detection
def test_default_threshold_and_top_k() -> None:
    rt_detr = pipe("object-detection", "rt_detr")
    photo = image_path("chelsea")
    every = rt_detr(photo, threshold=0.0)["detections"]
    assert len(every) == 10  # top_k defaults to the number of queries
    assert rt_detr(photo, threshold=0.0, top_k=3)["detections"] == every[:3]
    assert len(rt_detr(photo, threshold=0.0, top_k=25)["detections"]) == 25  # up to queries x classes
    detr = pipe("object-detection", "detr")
    want = reference_of("object-detection", "detr", "coffee")  # transformers' default threshold: 2 of 10 queries
    assert len(want[0]["detections"]) == 2
    assert_parity("object-detection", [detr(image_path("coffee"))], want)
    with pytest.raises(ValueError, match="top_k applies to"):
        detr(photo, top_k=3)
    for bad in (-0.1, 1.5, "0.3", None):
        with pytest.raises(ValueError, match="threshold must be a number from 0 to 1"):
            detr(photo, threshold=bad)
    with pytest.raises(ValueError, match="top_k"):
        rt_detr(photo, top_k=0)


def test_fixed_size_images_batch_and_image_dependent_ones_run_alone() -> None:
    photos = [image_path(p) for p in PHOTOS]
    single = pipe("object-detection", "rt_detr")
    batched = pipe("object-detection", "rt_detr", batch_size=3)
    assert batched.batch_size == 3
    for a, b in zip([single(p, threshold=0.0) for p in photos], batched(photos, threshold=0.0), strict=True):
        assert_close(b["detections"], a["detections"])
    assert {dict(k)["pixel_values"][0] for k in batched.model.signatures()} == {(3, 3, 64, 64), (1, 3, 64, 64)}
    assert pipe("object-detection", "detr", batch_size=3).batch_size == 1  # shortest/longest edge


# ---------------------------------------------------------------- zero-shot object detection
def test_zero_shot_batches_equal_single_images() -> None:
    photos = [image_path(p) for p in PHOTOS[:3]]
    single, batched = pipe("zero-shot-object-detection", "owlv2"), pipe("zero-shot-object-detection", "owlv2",
                                                                        batch_size=2)
    for a, b in zip([single(p, labels=LABELS, threshold=0.0) for p in photos],
                    batched(photos, labels=LABELS, threshold=0.0), strict=True):
        assert_close(b["detections"], a["detections"])


def test_zero_shot_options_and_top_k() -> None:
    photo = image_path("chelsea")
    built = tm.vision.zero_shot_object_detection(str(build("owlvit")), LABELS, threshold=0.0)
    called = pipe("zero-shot-object-detection", "owlvit")
    every = built(photo)["detections"]
    assert every == called(photo, candidate_labels=LABELS, threshold=0.0)["detections"]
    assert len(every) == 16 * len(LABELS)  # each patch's box, once per label
    assert built(photo, top_k=5)["detections"] == every[:5]
    # the default threshold, 0.1, as transformers' (no score of this fixture is below it)
    assert called.defaults["threshold"] == 0.1
    want = reference_of("zero-shot-object-detection", "owlvit", "chelsea", labels=LABELS)
    assert_parity("zero-shot-object-detection", [called(photo, labels=LABELS)], want)
    # a query is scored alone: a run of one label gives that label's detections of the run of all labels
    alone = called(photo, labels=["coffee cup"], threshold=0.0)["detections"]
    assert_close(alone, [d for d in every if d["label"] == "coffee cup"])
    # a str of labels splits at commas, unstripped, as transformers' pipeline splits it
    split = called(photo, labels="cat, dog", threshold=0.0)["detections"]
    assert {d["label"] for d in split} == {"cat", " dog"}


def test_zero_shot_bad_labels() -> None:
    photo = image_path("chelsea")
    owl = pipe("zero-shot-object-detection", "owlvit")
    for labels in (None, []):
        with pytest.raises(ValueError, match="no candidate labels"):
            owl(photo, labels=labels)
    with pytest.raises(ValueError, match="label 1 is empty"):
        owl(photo, labels=["cat", " "])
    with pytest.raises(TypeError, match="labels must be a list of str"):
        owl(photo, labels=["cat", 3])
    with pytest.raises(ValueError, match=r"has \d+ tokens; .* takes at most 16"):
        owl(photo, labels=["cat " * 20])
    with pytest.raises(ValueError, match="threshold must be a number from 0 to 1"):
        owl(photo, labels=["cat"], threshold=2)
    dino = pipe("zero-shot-object-detection", "grounding_dino")
    for label in ("a cat. a dog", "what?"):
        with pytest.raises(ValueError, match="ends a phrase of Grounding DINO's text"):
            dino(photo, labels=["cup", label])


def test_cli_prints_json(capsys) -> None:
    from transmuter_mlx.__main__ import main

    photo = str(image_path("chelsea"))
    folder: Path = build("rt_detr")
    assert main(["object-detection", str(folder), photo, "--option", "threshold=0.1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == json.loads(json.dumps(pipe("object-detection", "rt_detr")(photo, threshold=0.1)))
    assert main(["zero-shot-object-detection", str(build("owlvit")), photo, "--labels", "a cat, a dog",
                 "--option", "threshold=0.0"]) == 0
    detections = json.loads(capsys.readouterr().out)["detections"]
    assert {d["label"] for d in detections} == {"a cat", "a dog"} and len(detections) == 32
