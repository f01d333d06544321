"""The parity runner shared by the suites: run a case on a backend and variant, compare, write the report.

>>> from parity.runner import Case
>>> Case("fill-mask", "bert-mlm", ("Paris is the [MASK] of France.",)).id
'fill-mask/bert-mlm'

A suite (``parity/text.py``) lists its cases and builds their fixtures; how each task is compared
comes from its row of parity/tasks.py, so this module has no per-task code. fp32 is compared with
the row's reference within ``TOLERANCE["fp32"]``; q8 and q4 with our pipeline logic run on
onnxruntime's outputs of the same file (``OrtModel``) within ``TOLERANCE[variant]``. A case passes
when its keys (labels, spans, tokens) agree (a swap of two items whose reference scores are within
the tolerance counts as agreement, where the row allows swaps) and every score is within the tolerance.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .ort_model import OrtModel
from .tasks import PARITY

REPORTS = Path(__file__).resolve().parent / "reports"
TOLERANCE = {"fp32": 1e-4, "q8": 1e-3, "q4": 1e-3}
FILES = {"fp32": "model.onnx", "q8": "model_quantized.onnx", "q4": "model_q4.onnx"}
BACKENDS = ("mlx", "torch")


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
    """Results of our pipeline (on onnxruntime outputs of the same file when ``ort``: the file the pipeline
    loaded for ``variant``, which need not be model.onnx, as an image embedding's vision_model.onnx)."""
    import transmuter_mlx as tm

    pipe = tm.pipeline(case.task, str(folder), backend=backend, variant=variant)
    if ort:
        pipe.model = OrtModel(pipe.model.name)
    return pipe(list(case.inputs), **dict(case.options))


def compare(task: str, got: list[dict], want: list[dict], tol: float) -> tuple[float, bool, bool, str]:
    """``(max abs diff, agreement of the keys, every diff within its tolerance, first failure)`` over a batch.
    An item may carry its own tolerance (``(key, value, tolerance)``, from the reference's items: a box in
    pixels beside a score, a depth map relative to its range); others take ``tol``."""
    spec = PARITY[task]
    worst, agree, within, detail = 0.0, True, True, ""
    for n, (g, w) in enumerate(zip(got, want, strict=True)):
        gi, wi = spec.items(g), spec.items(w)
        if len(gi) != len(wi):
            agree, detail = False, detail or f"input {n}: {len(gi)} items, reference {len(wi)}"
        ref_scores = {item[0]: item[1] for item in wi} if spec.swaps else {}
        for (gk, gv, *_), (wk, wv, *own) in zip(gi, wi):
            limit = own[0] if own else tol
            diff = float(np.max(np.abs(np.asarray(gv, np.float64) - np.asarray(wv, np.float64)), initial=0.0))
            worst = max(worst, diff)
            tie = gk in ref_scores and abs(ref_scores[gk] - wv) <= limit
            if gk != wk and not tie:
                agree, detail = False, detail or f"input {n}: {gk} vs reference {wk}"
            elif diff > limit:
                within, detail = False, detail or f"input {n}: {gk} differs by {diff:.2e} > {limit:.1e}"
    return worst, agree, within, detail


def check(case: Case, folder: Path, backend: str, variant: str) -> Outcome:
    """Run ``case`` on the fixture in ``folder`` and compare it with its reference."""
    spec = PARITY[case.task]
    t0 = time.time()
    tol = spec.tolerance if variant == "fp32" and spec.tolerance is not None else TOLERANCE[variant]
    reference = spec.reference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ours(case, folder, backend, variant)
        if variant == "fp32":
            want = spec.run_reference(case.task, folder, list(case.inputs), dict(case.options))
        else:
            reference = "onnxruntime"
            want = ours(case, folder, backend, variant, ort=True)
    diff, agree, within, detail = compare(case.task, got, want, tol)
    return Outcome(
        case.task, case.fixture, case.id, backend, variant, reference, diff, agree, tol,
        agree and within, round(time.time() - t0, 2), detail,
    )


def run(
    cases: Iterable[Case],
    run_case: Callable[[Case, str, str], Outcome],
    backends: Iterable[str] = BACKENDS,
    variants: Iterable[str] = tuple(FILES),
    log: Callable[[str], Any] = print,
) -> list[Outcome]:
    """Every case on every variant and backend; a crash is a failed case, reported with its cause."""
    outcomes = []
    for case in cases:
        for variant in variants:
            for backend in backends:
                try:
                    o = run_case(case, backend, variant)
                except Exception as e:
                    o = Outcome(
                        case.task, case.fixture, case.id, backend, variant, "-", float("nan"), False,
                        TOLERANCE[variant], False, 0.0, f"{type(e).__name__}: {e}"[:300],
                    )
                outcomes.append(o)
                log(
                    f"{'PASS' if o.passed else 'FAIL'} {o.case:48} {backend:5} {variant:4} "
                    f"diff={o.max_abs_diff:.2e} {o.detail}"
                )
    return outcomes


def write_report(outcomes: list[Outcome], suite: str, title: str, intro: str, folder: Path = REPORTS) -> Path:
    """``folder/SUITE.json`` (every outcome) and ``folder/SUITE.md`` (a table, then the failures)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{suite}.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1) + "\n")
    passed = sum(o.passed for o in outcomes)
    lines = [
        f"# {title}",
        "",
        f"{passed} of {len(outcomes)} checks pass. {intro}",
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
        lines += ["", "## Failures", ""] + [f"- {o.case} {o.backend} {o.variant}: {o.detail}" for o in failing]
    path = folder / f"{suite}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None, suite: str, cases: list[Case], run_case: Callable[[Case, str, str], Outcome],
         title: str, intro: str, variants: tuple[str, ...] = tuple(FILES)) -> int:
    """``python -m parity SUITE [--backend mlx] [--variant fp32] [--task fill-mask]``: run, write the report."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m parity {suite}", description=f"{title}: {suite} cases")
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--variant", action="append", choices=variants)
    parser.add_argument("--task", action="append")
    args = parser.parse_args(argv)
    chosen = [c for c in cases if not args.task or c.task in args.task]
    outcomes = run(chosen, run_case, tuple(args.backend or BACKENDS), tuple(args.variant or variants))
    print(f"wrote {write_report(outcomes, suite, title, intro)}")
    return 0 if all(o.passed for o in outcomes) else 1
