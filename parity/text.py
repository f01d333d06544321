"""Parity of the text pipelines with transformers and sentence-transformers, on the text fixtures.

>>> from parity.text import CASES, run_case                    # doctest: +SKIP
>>> run_case(CASES[0], "mlx", "fp32").passed                  # doctest: +SKIP
True

``python -m parity text`` runs every case on both backends and the fp32/q8/q4 variants and
writes parity/reports/text.md and text.json. fp32 is compared with transformers (and
sentence-transformers) within ``TOLERANCE["fp32"]``; q8 and q4 with our pipeline logic run on
onnxruntime's outputs of the same file (see text_reference.py) within ``TOLERANCE[variant]``.
A case passes when its labels/spans/tokens agree (a swap of two items whose reference scores
are within the tolerance counts as agreement) and every score is within the tolerance.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .text_reference import OrtModel, items, transformers_reference

REPORTS = Path(__file__).resolve().parent / "reports"
TOLERANCE = {"fp32": 1e-4, "q8": 1e-3, "q4": 1e-3}
FILES = {"fp32": "model.onnx", "q8": "model_quantized.onnx", "q4": "model_q4.onnx"}
BACKENDS = ("mlx", "torch")

TEXTS = [
    "Hello world.",
    "The quick brown fox jumps over the lazy dog.",
    "Café au lait in Zürich, 東京 too!",
    "",
]
LONG = " ".join(["Paris is the capital of France and the Eiffel Tower is in Paris."] * 12)
QA = [
    {"question": "Where is the tower?", "context": "The Eiffel Tower is in Paris, the capital of France."},
    {"question": "What is in Zürich?", "context": "Café au lait in Zürich, and 東京 has sushi."},
    {"question": "What is the capital?", "context": LONG},  # windows of 128 tokens, stride 64
]


@dataclass(frozen=True)
class Case:
    """One parity check: a task on a fixture, its inputs and options."""

    task: str
    fixture: str
    inputs: tuple
    options: dict = field(default_factory=dict)
    name: str = ""

    @property
    def id(self) -> str:
        return f"{self.task}/{self.fixture}" + (f"/{self.name}" if self.name else "")


CASES: list[Case] = [
    *(
        Case("text-embedding", f, tuple(TEXTS))
        for f in ("bert-embed-cls", "bert-embed-mean", "bert-embed-onnx", "minilm")
    ),
    *(
        Case("text-classification", f, tuple(TEXTS), {"top_k": None})
        for f in (
            "bert-sst3",
            "bert-score",
            "bert-regress",
            "bert-multilabel",
            "distilbert-sst2",
            "xlmr-sst3",
        )
    ),
    Case(
        "text-classification",
        "roberta-pair",
        (("A man eats.", "Someone is eating."), ("Hi", "Bye")),
        {"top_k": None},
    ),
    Case(
        "text-ranking", "bert-rerank", ({"query": "Where is Paris?", "documents": TEXTS[:3] + [LONG[:200]]},)
    ),
    Case(
        "zero-shot-classification", "bert-nli", tuple(TEXTS[:3]), {"labels": ["travel", "cooking", "dance"]}
    ),
    Case(
        "zero-shot-classification",
        "bert-nli",
        tuple(TEXTS[:3]),
        {"labels": ["travel", "cooking", "dance"], "multi_label": True},
        "multi_label",
    ),
    *(
        Case("token-classification", "bert-ner", tuple(TEXTS[:3]), {"aggregation_strategy": s}, s)
        for s in ("none", "simple", "first", "average", "max")
    ),
    Case("fill-mask", "bert-mlm", ("Paris is the [MASK] of France.", "Café [MASK] lait in Zürich.")),
    Case("question-answering", "bert-qa", tuple(QA), {"top_k": 3}),
]


@dataclass
class Outcome:
    """What one case gave on one backend and variant."""

    task: str
    model: str
    case: str
    backend: str
    variant: str
    reference: str
    max_abs_diff: float
    agree: bool
    tolerance: float
    passed: bool
    seconds: float
    detail: str = ""


def ours(case: Case, folder: Path, backend: str, variant: str, ort: bool = False) -> list[dict]:
    """Results of our pipeline (on onnxruntime outputs of the same file when ``ort``)."""
    import transmuter_mlx as tm

    options: dict[str, Any] = {"backend": backend, "variant": variant}
    if ort:
        options["model"] = OrtModel(folder / "onnx" / FILES[variant])
    call = dict(case.options)
    pipe = tm.pipeline(case.task, str(folder), **options)
    return pipe(list(case.inputs), **call)


def compare(task: str, got: list[dict], want: list[dict], tol: float) -> tuple[float, bool, str]:
    """``(max abs diff, agreement, first disagreement)`` over a batch of results."""
    worst, agree, detail = 0.0, True, ""
    for n, (g, w) in enumerate(zip(got, want, strict=True)):
        gi, wi = items(task, g), items(task, w)
        if len(gi) != len(wi):
            agree, detail = False, detail or f"input {n}: {len(gi)} items, reference {len(wi)}"
        ref_scores = {k: v for k, v in wi if task != "text-embedding"}
        for (gk, gv), (wk, wv) in zip(gi, wi):
            worst = max(worst, float(np.max(np.abs(np.asarray(gv, np.float64) - np.asarray(wv, np.float64)))))
            tie = gk in ref_scores and abs(ref_scores[gk] - wv) <= tol
            if gk != wk and not tie:
                agree, detail = False, detail or f"input {n}: {gk} vs reference {wk}"
    return worst, agree, detail


def run_case(case: Case, backend: str, variant: str) -> Outcome:
    from tests.fixtures.text_models import build

    folder = build(case.fixture)
    t0 = time.time()
    tol = TOLERANCE[variant]
    reference = (
        "transformers" if case.task not in ("text-embedding", "text-ranking") else "sentence-transformers"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ours(case, folder, backend, variant)
        if variant == "fp32":
            want = transformers_reference(case.task, folder, list(case.inputs), dict(case.options))
        else:
            reference = "onnxruntime"
            want = ours(case, folder, backend, variant, ort=True)
    diff, agree, detail = compare(case.task, got, want, tol)
    return Outcome(
        case.task,
        case.fixture,
        case.id,
        backend,
        variant,
        reference,
        diff,
        agree,
        tol,
        agree and diff <= tol,
        round(time.time() - t0, 2),
        detail,
    )


def run(backends=BACKENDS, variants=tuple(FILES), cases=None, log=print) -> list[Outcome]:
    outcomes = []
    for case in cases or CASES:
        for variant in variants:
            for backend in backends:
                try:
                    o = run_case(case, backend, variant)
                except Exception as e:  # a crash is a failed case, reported with its cause
                    o = Outcome(
                        case.task,
                        case.fixture,
                        case.id,
                        backend,
                        variant,
                        "-",
                        float("nan"),
                        False,
                        TOLERANCE[variant],
                        False,
                        0.0,
                        f"{type(e).__name__}: {e}"[:300],
                    )
                outcomes.append(o)
                log(
                    f"{'PASS' if o.passed else 'FAIL'} {o.case:48} {backend:5} {variant:4} "
                    f"diff={o.max_abs_diff:.2e} {o.detail}"
                )
    return outcomes


def write_report(outcomes: list[Outcome], folder: Path = REPORTS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "text.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1) + "\n")
    passed = sum(o.passed for o in outcomes)
    lines = [
        "# Text pipelines: parity",
        "",
        f"{passed} of {len(outcomes)} checks pass. fp32 is compared with transformers 4.57.6 pipelines "
        "(sentence-transformers `encode` / `CrossEncoder.rank` for embeddings and ranking) on the fixture's "
        "PyTorch weights, within 1e-4 on every score (embeddings: every element) and identical labels, "
        "tokens and spans (byte offsets). q8 and q4 are compared with the same pipeline logic on "
        "onnxruntime's "
        "outputs of the same ONNX file, within 1e-3. A swap of two items whose reference scores are within "
        "the tolerance counts as agreement.",
        "",
        "| task | model | case | backend | variant | reference | max abs diff | agree | pass |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.task} | {o.model} | {o.case.split('/', 2)[-1] if o.case.count('/') > 1 else ''} | "
            f"{o.backend} | {o.variant} | {o.reference} | {o.max_abs_diff:.2e} | "
            f"{'yes' if o.agree else 'no'} | {'pass' if o.passed else 'FAIL'} |"
        )
    failing = [o for o in outcomes if not o.passed]
    if failing:
        lines += ["", "## Failures", ""] + [
            f"- {o.case} {o.backend} {o.variant}: {o.detail}" for o in failing
        ]
    path = folder / "text.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m parity text [--backend mlx] [--variant fp32] [--task fill-mask]``"""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m parity text", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--variant", action="append", choices=tuple(FILES))
    parser.add_argument("--task", action="append")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if not args.task or c.task in args.task]
    outcomes = run(tuple(args.backend or BACKENDS), tuple(args.variant or FILES), cases)
    print(f"wrote {write_report(outcomes)}")
    return 0 if all(o.passed for o in outcomes) else 1
