"""The parity runner shared by the suites: run a case on a backend and variant, compare, write the report.

>>> from parity.runner import Case
>>> Case("fill-mask", "bert-mlm", ("Paris is the [MASK] of France.",)).id
'fill-mask/bert-mlm'

A suite (``parity/text.py``) lists its cases and builds their fixtures; how each task is compared
comes from its row of parity/tasks.py, so this module has no per-task code. fp32 is compared with
the row's reference within ``TOLERANCE["fp32"]``; q8 and q4 with our pipeline logic run on
onnxruntime's outputs of the same file (``OrtModel``) within ``TOLERANCE[variant]`` (a row, or an item,
may give its own: ``compare``). A case passes
when its keys (labels, spans, tokens) agree (a swap of two items whose reference scores are within
the tolerance counts as agreement, where the row allows swaps) and every score is within the tolerance.
"""

from __future__ import annotations

import functools
import json
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
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
    variants: tuple[str, ...] | None = None  # those its fixture has, when not every one of FILES

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


@functools.lru_cache(maxsize=16)
def _pipeline(task: str, folder: Path, backend: str, variant: str, ort: bool) -> Any:
    """A pipeline built once for the cases of a fixture (the options are the call's): its model loaded and
    compiled once per image size, not once per case."""
    import transmuter_mlx as tm

    pipe = tm.pipeline(task, str(folder), backend=backend, variant=variant)
    if ort:
        pipe.model = OrtModel(pipe.model.name)
    return pipe


def ours(case: Case, folder: Path, backend: str, variant: str, ort: bool = False) -> list[dict]:
    """Results of our pipeline (on onnxruntime outputs of the same file when ``ort``: the file the pipeline
    loaded for ``variant``, which need not be model.onnx, as an image embedding's vision_model.onnx)."""
    return _pipeline(case.task, Path(folder), backend, variant, ort)(list(case.inputs), **dict(case.options))


def _limit(own: list, tol: float, variant: str) -> Any:
    """An item's tolerance: its own (a number, an array of one per element, or a rule with ``within(gap)``),
    or its own by variant (``{"fp32": ..., "q8": ...}``), else ``tol``."""
    if not own:
        return tol
    return own[0][variant] if isinstance(own[0], Mapping) else own[0]


def _within(gap: np.ndarray, limit: Any) -> bool:
    return bool(limit.within(gap)) if hasattr(limit, "within") else bool(np.all(gap <= limit))


def compare(
    task: str, got: list[dict], want: list[dict], tol: float, variant: str = "fp32"
) -> tuple[float, bool, bool, str]:
    """``(max abs diff, agreement of the keys, every diff within its tolerance, first failure)`` over a batch.
    An item may carry its own tolerance (``(key, value, tolerance)``, from the reference's items: a box in
    pixels beside a score, a depth map relative to its range; an array gives one per element, a mapping one
    per variant, an object with ``within(gap)`` a rule: a mask whose few pixels near a decision may flip);
    others take ``tol``. Where the row allows swaps, the reference's item at a position is matched with the
    first unmatched item, at that position or at another whose reference score (an item's first element) is
    within the tolerance, that has its key and is within the tolerance."""
    spec = PARITY[task]
    worst, agree, within, detail = 0.0, True, True, ""
    for n, (g, w) in enumerate(zip(got, want, strict=True)):
        gi, wi = spec.items(g), spec.items(w)
        if len(gi) != len(wi):
            agree, detail = False, detail or f"input {n}: {len(gi)} items, reference {len(wi)}"
        count = min(len(gi), len(wi))
        lead = [float(np.ravel(np.asarray(item[1], np.float64))[0]) if np.size(item[1]) else 0.0 for item in wi]
        free = set(range(count))
        for i, (wk, wv, *own) in enumerate(wi[:count]):
            limit = _limit(own, tol, variant)
            near = []
            if spec.swaps:
                first = float(np.ravel(limit)[0])
                near = [j for j in range(count) if j != i and abs(lead[j] - lead[i]) <= first]
            gaps = {
                j: np.abs(np.asarray(gi[j][1], np.float64) - np.asarray(wv, np.float64))
                for j in (i, *near) if j in free and gi[j][0] == wk
            }
            match = next((j for j, gap in gaps.items() if _within(gap, limit)), None)
            if match is not None:
                free.discard(match)
                worst = max(worst, float(np.max(gaps[match], initial=0.0)))
            elif i in gaps:  # its key, beyond its tolerance
                diff = float(np.max(gaps[i], initial=0.0))
                worst, within = max(worst, diff), False
                bound = str(limit) if hasattr(limit, "within") else f"{limit:.1e}" if np.ndim(limit) == 0 else "its tolerance"
                detail = detail or f"input {n}: {wk} differs by {diff:.2e} > {bound}"
            else:
                agree, detail = False, detail or f"input {n}: {gi[i][0]} vs reference {wk}"
    return worst, agree, within, detail


def check(case: Case, folder: Path, backend: str, variant: str) -> Outcome:
    """Run ``case`` on the fixture in ``folder`` and compare it with its reference."""
    spec = PARITY[case.task]
    t0 = time.time()
    own = spec.tolerance if variant == "fp32" else spec.quantized_tolerance
    tol = TOLERANCE[variant] if own is None else own
    reference = spec.reference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ours(case, folder, backend, variant)
        if variant == "fp32":
            want = spec.run_reference(case.task, folder, list(case.inputs), dict(case.options))
        else:
            reference = "onnxruntime"
            want = ours(case, folder, backend, variant, ort=True)
    diff, agree, within, detail = compare(case.task, got, want, tol, variant)
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
        for variant in (v for v in variants if case.variants is None or v in case.variants):
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
