"""Run the ONNX node conformance suite on our backends and onnxruntime, side by side.

``python -m transmuter_mlx.conformance [--backends mlx,torch,onnxruntime] [--filter SUBSTR]``
prints the pass/fail/skip table per op and writes ``parity/reports/conformance.md``.
A case passes when every output has the expected dtype and shape and its values agree at the
case's own rtol/atol (NaN equal to NaN).
"""

from __future__ import annotations

import argparse
import collections
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPORT = Path(__file__).resolve().parent.parent / "parity" / "reports" / "conformance.md"


@dataclass
class CaseResult:
    name: str
    op: str
    status: str  # "pass", "fail", "error", "skip"
    message: str = ""


def collect_cases(filter: str | None = None) -> list[Any]:
    """The node test cases of the installed ``onnx`` package, sorted by name."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    cases = [c for c in cases if not filter or filter in c.name]
    return sorted(cases, key=lambda c: c.name)


def case_op(case: Any) -> str:
    """The op a case tests: its name without the ``test_`` prefix, as its first node says."""
    nodes = case.model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else _op_from_name(case)


def _op_from_name(case: Any) -> str:
    types = collections.Counter(n.op_type for n in case.model.graph.node)
    name = case.name.lower().replace("_", "")
    for t in sorted(types, key=len, reverse=True):
        if t.lower() in name:
            return t
    return case.model.graph.node[-1].op_type if case.model.graph.node else "?"


def feeds_of(case: Any, inputs: list[Any]) -> dict[str, Any]:
    init = {t.name for t in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in init]
    return dict(zip(names, inputs))


def compare(expected: Any, got: Any, rtol: float, atol: float, path: str = "output") -> str | None:
    """None when ``got`` matches ``expected`` (dtype, shape, values), else what differs."""
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return f"{path}: expected a sequence of {len(expected)}, got {type(got).__name__}"
        for i, (e, g) in enumerate(zip(expected, got)):
            err = compare(e, g, rtol, atol, f"{path}[{i}]")
            if err:
                return err
        return None
    if expected is None:
        return None if got is None else f"{path}: expected None"
    if got is None:
        return f"{path}: got None"
    e, g = np.asarray(expected), np.asarray(got)
    if e.dtype != g.dtype:
        return f"{path}: dtype {g.dtype}, expected {e.dtype}"
    if e.shape != g.shape:
        return f"{path}: shape {g.shape}, expected {e.shape}"
    if e.dtype == object or e.dtype.kind in "USb":
        return None if np.array_equal(e, g) else f"{path}: values differ"
    ef, gf = e.astype(np.float64), g.astype(np.float64)
    if e.dtype.kind in "iu":
        return None if np.array_equal(e, g) else f"{path}: values differ (max abs {np.max(np.abs(ef - gf))})"
    close = np.isclose(gf, ef, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    bad = ~close
    return f"{path}: {bad.sum()} of {bad.size} values differ, max abs diff {np.nanmax(np.abs(ef - gf)[bad])}"


def run_case(case: Any, runtime: str) -> CaseResult:
    """Run one case on ``runtime`` ("mlx", "torch", "numpy" or "onnxruntime")."""
    op = case_op(case)
    try:
        run = _runner(case, runtime)
    except Exception as e:  # noqa: BLE001 - every failure is a result here
        return CaseResult(case.name, op, "skip" if _is_unsupported(e) else "error", f"load: {type(e).__name__}: {e}"[:500])
    for inputs, outputs in case.data_sets:
        inputs, outputs = _as_numpy(inputs), _as_numpy(outputs)
        try:
            got = run(feeds_of(case, inputs))
        except Exception as e:  # noqa: BLE001
            return CaseResult(case.name, op, "error", f"run: {type(e).__name__}: {e}"[:500])
        names = [o.name for o in case.model.graph.output]
        for name, expected in zip(names, outputs):
            err = compare(expected, got.get(name), case.rtol, case.atol, name)
            if err:
                return CaseResult(case.name, op, "fail", err[:500])
    return CaseResult(case.name, op, "pass")


def _as_numpy(values: Any) -> Any:
    """Case data as numpy: onnx keeps some tensors (int4, float8, int16, ...) as TensorProto."""
    import onnx
    from onnx import numpy_helper

    if isinstance(values, onnx.TensorProto):
        return numpy_helper.to_array(values)
    if isinstance(values, list | tuple):
        return [_as_numpy(v) for v in values]
    return values


def _is_unsupported(e: Exception) -> bool:
    from .converters.errors import UnsupportedOpError

    return isinstance(e, UnsupportedOpError) or "NOT_IMPLEMENTED" in str(e) or "not implemented" in str(e)


def _runner(case: Any, runtime: str):
    if runtime == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in case.model.graph.output]
        # onnxruntime takes arrays, not numpy scalars
        return lambda feeds: dict(
            zip(names, sess.run(None, {k: v if isinstance(v, list) else np.asarray(v) for k, v in feeds.items()}))
        )
    from .converters.model import load

    model = load(case.model, backend=runtime)
    B = model.backend
    return lambda feeds: {k: _to_numpy(v, B) for k, v in model(feeds).items()}


def _to_numpy(v: Any, B: Any) -> Any:
    if isinstance(v, list):
        return [_to_numpy(x, B) for x in v]
    if v is None:
        return None
    return B.to_numpy(v) if B.is_array(v) else np.asarray(v)


def run_suite(runtimes: list[str], filter: str | None = None, verbose: bool = False) -> dict[str, list[CaseResult]]:
    cases = collect_cases(filter)
    results: dict[str, list[CaseResult]] = {r: [] for r in runtimes}
    for case in cases:
        for r in runtimes:
            res = run_case(case, r)
            results[r].append(res)
            if verbose and res.status != "pass":
                print(f"[{r}] {res.name}: {res.status}: {res.message}")
    return results


def write_report(results: dict[str, list[CaseResult]], path: Path = REPORT) -> str:
    runtimes = list(results)
    per_op: dict[str, dict[str, collections.Counter]] = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    for r, rs in results.items():
        for res in rs:
            per_op[res.op][r][res.status] += 1
    totals = {r: collections.Counter(res.status for res in rs) for r, rs in results.items()}
    n = len(next(iter(results.values())))
    lines = [
        "# ONNX node conformance",
        "",
        f"{n} cases of `onnx.backend.test.case.node` (onnx {_onnx_version()}). A case passes when every output "
        "has the expected dtype and shape and agrees at the case's rtol/atol. Columns: pass / fail+error / skip (unsupported).",
        "",
        "| runtime | pass | fail | error | unsupported |",
        "|---|---|---|---|---|",
    ]
    for r in runtimes:
        t = totals[r]
        lines.append(f"| {r} | {t['pass']} | {t['fail']} | {t['error']} | {t['skip']} |")
    lines += ["", "| op | " + " | ".join(runtimes) + " |", "|---|" + "---|" * len(runtimes)]
    for op in sorted(per_op):
        cells = []
        for r in runtimes:
            c = per_op[op][r]
            cells.append(f"{c['pass']} / {c['fail'] + c['error']} / {c['skip']}")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    lines += ["", "## Cases that do not pass", ""]
    for r in runtimes:
        lines.append(f"### {r}")
        lines.append("")
        for res in results[r]:
            if res.status != "pass":
                msg = res.message.replace("\n", " ").replace("|", "\\|")[:200]
                lines.append(f"- `{res.name}` ({res.status}): {msg}")
        lines.append("")
    text = "\n".join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.with_suffix(".json").write_text(
        json.dumps({r: {res.name: [res.status, res.message[:200]] for res in rs} for r, rs in results.items()}, indent=0)
    )
    return text


def _onnx_version() -> str:
    import onnx

    return onnx.__version__


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="mlx,torch,onnxruntime")
    p.add_argument("--filter", default=None)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--output", default=str(REPORT))
    args = p.parse_args(argv)
    t = time.time()
    results = run_suite(args.backends.split(","), args.filter, args.verbose)
    write_report(results, Path(args.output))
    for r, rs in results.items():
        c = collections.Counter(x.status for x in rs)
        print(f"{r:12s} pass {c['pass']:5d}  fail {c['fail']:4d}  error {c['error']:4d}  unsupported {c['skip']:4d}")
    print(f"({time.time() - t:.0f} s) report: {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
