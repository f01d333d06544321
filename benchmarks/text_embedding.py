"""text_embedding throughput: our pipeline (mlx, torch) beside sentence-transformers and onnxruntime.

The model is the real all-MiniLM-L6-v2 (``tests/fixtures``: ``build("minilm")``, with its
sentence-transformers files), or any HF ONNX repository folder with ``--model``. The sentences
are a fixed set of English sentences of mixed lengths cut from the Python standard library's
LICENSE and docstrings, the same for every engine. Each cell is the median of ``--runs`` timed
passes over the set after a warm-up pass, in sentences per second, with its ratio to
onnxruntime; "first call" is the warm-up pass (ours: compile of each bucket it meets), "load"
building the engine. At batch 1 every sentence is its own call (latency); at a larger batch
each engine gets the whole list at once and batches it itself. The max abs difference of the
embeddings to sentence-transformers shows that every engine computes the same thing. An engine
that fails shows ``error: ...`` in its cells and the others go on.

    python benchmarks/text_embedding.py               # table, and benchmarks/results/text_embedding.md
    python benchmarks/text_embedding.py --json        # the same numbers as JSON on stdout
    python benchmarks/text_embedding.py --batches 32 --runs 3 --engines mlx,onnxruntime
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from _report import environment, error_cell  # noqa: E402

import transmuter_mlx as tm  # noqa: E402  (first: it sets up the BLAS before mlx.core loads)

ENGINES = ("mlx", "torch", "sentence-transformers", "onnxruntime")
LABELS = {
    "mlx": "ours: mlx",
    "torch": "ours: torch",
    "sentence-transformers": "sentence-transformers",
    "onnxruntime": "onnxruntime",
}
REFERENCE = "sentence-transformers"  # the embeddings the others are compared with
SEQUENCE_LENGTHS = (32, 64, 128)  # our default compile buckets; longer sentences are left out of the set
DOC_MODULES = (
    "argparse", "bisect", "calendar", "collections", "csv", "datetime", "decimal", "difflib",
    "fractions", "functools", "heapq", "inspect", "itertools", "json", "logging", "os", "pathlib",
    "pickle", "queue", "random", "shutil", "statistics", "string", "subprocess", "tempfile",
    "textwrap", "threading", "typing", "unittest", "zipfile",
)  # fmt: skip


# ---------------------------------------------------------------------------------- sentences
def sentences(count: int, max_tokens: int, tokenizer) -> list[str]:
    """``count`` distinct sentences of 3+ words and at most ``max_tokens`` tokens, in a fixed order."""
    texts = []
    license_file = Path(sysconfig.get_path("stdlib")) / "LICENSE.txt"
    if license_file.exists():
        texts.append(license_file.read_text(errors="replace"))
    for name in DOC_MODULES:
        module = importlib.import_module(name)
        texts.append(module.__doc__ or "")
        for attr in sorted(getattr(module, "__all__", None) or dir(module)):
            obj = getattr(module, attr, None)
            if not attr.startswith("_") and callable(obj) and isinstance(obj.__doc__, str):
                texts.append(obj.__doc__)
    pool: dict[str, None] = {}
    for text in texts:
        for s in re.split(r"(?<=[.;!?])\s+", re.sub(r"\s+", " ", text)):
            s = s.strip()
            if len(s.split()) >= 3 and re.search(r"[a-z]{3}", s) and not re.search(r">>>|\.\.\.|==", s):
                pool[s] = None
    fits = [s for s, n in zip(pool, token_counts(tokenizer, list(pool))) if n <= max_tokens]
    fits.sort(key=lambda s: hashlib.sha1(s.encode()).hexdigest())  # a fixed mix of lengths
    if len(fits) < count:
        raise RuntimeError(f"only {len(fits)} sentences of <= {max_tokens} tokens; asked for {count}")
    return fits[:count]


def token_counts(tokenizer, texts: list[str]) -> list[int]:
    return [len(e.ids) for e in tokenizer.encode_batch(texts)]


def raw_tokenizer(folder: Path, max_length: int | None):
    """The ``tokenizers`` tokenizer of ``tokenizer.json``: no padding, truncation at ``max_length``."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()
    if max_length:
        tok.enable_truncation(max_length)
    else:
        tok.no_truncation()
    return tok


# ---------------------------------------------------------------------------------- engines
def sentence_modules(folder: Path) -> tuple[str, bool, int | None]:
    """``(pooling mode, normalise, max_seq_length)`` from modules.json and its folders."""
    modules = json.loads((folder / "modules.json").read_text())
    pooling, normalize = "mean", False
    for m in modules:
        kind = m["type"].rsplit(".", 1)[-1]
        if kind == "Pooling":
            config = json.loads((folder / m["path"] / "config.json").read_text())
            modes = [
                k[len("pooling_mode_") :] for k, v in config.items() if k.startswith("pooling_mode_") and v
            ]
            if modes not in (["cls_token"], ["mean_tokens"], ["max_tokens"]):
                raise ValueError(f"pooling {modes} is not one this benchmark's onnxruntime engine does")
            pooling = modes[0].removesuffix("_tokens").removesuffix("_token")
        elif kind == "Normalize":
            normalize = True
    st_config = folder / "sentence_bert_config.json"
    max_len = json.loads(st_config.read_text()).get("max_seq_length") if st_config.exists() else None
    return pooling, normalize, max_len


def load_engine(kind: str, folder: Path, batch: int,
                lengths: tuple[int, ...] = SEQUENCE_LENGTHS) -> Callable[[list[str]], np.ndarray]:
    """``embed(texts) -> (len(texts), dim) float32`` for one engine, batching ``batch`` rows (ours: padded to
    the smallest of ``lengths`` that holds them)."""
    if kind in ("mlx", "torch"):
        pipe = tm.text.text_embedding(
            str(folder), backend=kind, compile={"batch_size": batch, "sequence_length": list(lengths)}
        )

        def embed(texts):
            out = pipe(texts)
            return np.stack([np.array(o["embedding"], dtype=np.float32) for o in out])

        return embed
    if kind == "sentence-transformers":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(folder), device="cpu")
        return lambda texts: model.encode(
            texts, batch_size=batch, convert_to_numpy=True, show_progress_bar=False
        ).astype(np.float32)
    if kind == "onnxruntime":
        return _onnxruntime(folder, batch)
    raise ValueError(f"unknown engine {kind!r}; expected one of {ENGINES}")


def _onnxruntime(folder: Path, batch: int) -> Callable[[list[str]], np.ndarray]:
    """onnx/model.onnx on the CPU provider with the ``tokenizers`` tokenizer; pooled as modules.json says.

    Like sentence-transformers' ``encode``, the texts are sorted by length before batching (each
    batch padded to its longest) and the embeddings put back in the input order.
    """
    import onnxruntime as ort

    pooling, normalize, max_len = sentence_modules(folder)
    tok = raw_tokenizer(folder, max_len)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        str(folder / "onnx" / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    names = {i.name for i in session.get_inputs()}
    output = "last_hidden_state" if "last_hidden_state" in {o.name for o in session.get_outputs()} else None

    def embed(texts):
        encodings = tok.encode_batch(texts)
        order = np.argsort([-len(e.ids) for e in encodings], kind="stable")
        result = np.empty((len(texts), 0), np.float32)
        for start in range(0, len(texts), batch):
            rows = [encodings[i] for i in order[start : start + batch]]
            length = max(len(e.ids) for e in rows)
            ids = np.zeros((len(rows), length), np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for j, e in enumerate(rows):
                n = len(e.ids)
                ids[j, :n], mask[j, :n], types[j, :n] = e.ids, 1, e.type_ids
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            hidden = session.run(
                [output] if output else None, {k: v for k, v in feeds.items() if k in names}
            )[0]
            m = mask[..., None].astype(hidden.dtype)
            if pooling == "mean":
                vec = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
            elif pooling == "cls":
                vec = hidden[:, 0]
            else:  # max
                vec = np.where(m > 0, hidden, -1e9).max(1)
            if normalize:
                vec = vec / np.maximum(np.linalg.norm(vec, axis=-1, keepdims=True), 1e-12)
            if result.shape[1] == 0:
                result = np.empty((len(texts), vec.shape[1]), np.float32)
            result[order[start : start + batch]] = vec
        return result

    return embed


# ---------------------------------------------------------------------------------- timing
def one_pass(embed: Callable, texts: list[str], batch: int) -> np.ndarray:
    """Embed ``texts``: one call per sentence at batch 1 (latency), else the whole list at once."""
    if batch == 1:
        return np.concatenate([embed([t]) for t in texts])
    return embed(texts)


def time_cell(embed: Callable, texts: list[str], batch: int, runs: int, budget_s: float) -> dict:
    t0 = time.perf_counter()
    out = one_pass(embed, texts, batch)
    first = time.perf_counter() - t0
    times: list[float] = []
    while len(times) < runs and (not times or sum(times) < budget_s):
        t0 = time.perf_counter()
        one_pass(embed, texts, batch)
        times.append(time.perf_counter() - t0)
    n = len(times)
    median = statistics.median(times)
    return {
        "sentences": len(texts),
        "median_s": median,
        "runs": n,
        "first_call_s": first,
        "sentences_per_s": len(texts) / median,
        "ms_per_sentence": 1000 * median / len(texts),
        "_out": out,
    }


def bench(args: argparse.Namespace) -> dict:
    folder = Path(args.model) if args.model else _fixture()
    kinds = [k for k in args.engines.split(",") if k]
    batches = [int(b) for b in args.batches.split(",") if b]
    _, _, max_len = sentence_modules(folder)
    tok = raw_tokenizer(folder, None)
    buckets = tuple(sorted(int(n) for n in args.sequence_lengths.split(",") if n))
    texts = sentences(args.sentences, min(buckets[-1], max_len or 10**9), tok)
    lengths = token_counts(tok, texts)
    result = {
        "model": str(folder),
        "sequence_lengths": list(buckets),
        "environment": _environment(),
        "sentences": {
            "count": len(texts),
            "tokens_min": min(lengths),
            "tokens_median": statistics.median(lengths),
            "tokens_max": max(lengths),
        },
        "batches": {},
    }
    for batch in batches:
        subset = texts[: args.latency_sentences] if batch == 1 else texts
        row, outs = {}, {}
        for kind in kinds:
            try:
                t0 = time.perf_counter()
                embed = load_engine(kind, folder, batch, buckets)
                load = time.perf_counter() - t0
                cell = time_cell(embed, subset, batch, args.runs, args.budget)
                cell["load_s"] = load
                outs[kind] = cell.pop("_out")
                row[kind] = cell
            except Exception as e:  # noqa: BLE001  (a failing engine is reported in its cell)
                row[kind] = {"error": error_cell(e, args.verbose)}
            print(f"  batch {batch}: {kind} done", file=sys.stderr, flush=True)
        ref, base = outs.get(REFERENCE), row.get("onnxruntime", {}).get("sentences_per_s")
        for kind, cell in row.items():
            if ref is not None and kind in outs:
                cell[f"max_abs_diff_vs_{REFERENCE}"] = float(np.max(np.abs(outs[kind] - ref)))
            if base and "sentences_per_s" in cell:
                cell["ratio_to_onnxruntime"] = cell["sentences_per_s"] / base
        result["batches"][str(batch)] = row
    result["environment"]["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    return result


def _fixture() -> Path:
    from tests.fixtures.text_models import build

    return build("minilm")


def _environment() -> dict:
    env = environment(("mlx", "torch", "onnxruntime", "sentence_transformers", "tokenizers", "numpy"))
    try:
        env["torch_threads"] = __import__("torch").get_num_threads()
    except Exception:  # noqa: BLE001
        env["torch_threads"] = None
    return env


# ---------------------------------------------------------------------------------- report
def markdown(result: dict) -> str:
    env, s = result["environment"], result["sentences"]
    kinds = list(next(iter(result["batches"].values())).keys()) if result["batches"] else []
    header = " | ".join(LABELS.get(k, k) for k in kinds)
    rule = "|---|" + "---|" * len(kinds)
    lines = [
        "# text_embedding benchmark",
        "",
        f"Model: `{result['model']}`. {s['count']} English sentences (stdlib LICENSE and docstrings; "
        f"{s['tokens_min']}-{s['tokens_max']} tokens, median {s['tokens_median']:g}); batch 1 runs one call "
        "per sentence on the first sentences of the set, larger batches pass the whole list. "
        f"Ours: `compile={{batch_size, sequence_length: {result['sequence_lengths']}}}`.",
        "",
        f"Machine: {env['machine']}, {env['cpus']} CPUs (load average {env['load_average_1min']} at start, "
        f"{env.get('load_average_1min_end')} at end), Python {env['python']}; mlx {env.get('mlx')}, "
        f"torch {env.get('torch')} ({env.get('torch_threads')} threads), onnxruntime {env.get('onnxruntime')}, "
        f"sentence-transformers {env.get('sentence_transformers')}, tokenizers {env.get('tokenizers')}. "
        f"MLX BLAS: {env['mlx_blas'].get('library') or env['mlx_blas'].get('status')}.",
        "",
        "Sentences/s (median), ratio to onnxruntime in brackets; at batch 1 also ms per sentence.",
        "",
        f"| batch | {header} |",
        rule,
    ]
    for batch, row in result["batches"].items():
        cells = []
        for k in kinds:
            c = row[k]
            if "error" in c:
                cells.append(c["error"])
                continue
            text = f"{c['sentences_per_s']:,.1f}"
            text += f" ({c['ratio_to_onnxruntime']:.2f}x)" if "ratio_to_onnxruntime" in c else ""
            text += f", {c['ms_per_sentence']:.1f} ms" if batch == "1" else ""
            text += f", {c['runs']} runs" if c["runs"] < 5 else ""
            cells.append(text)
        n = next((c["sentences"] for c in row.values() if "sentences" in c), s["count"])
        lines.append(f"| {batch} ({n} sentences) | " + " | ".join(cells) + " |")
    lines += ["", f"| load + first call (s) | {header} |", rule]
    for batch, row in result["batches"].items():
        cells = [
            f"{row[k]['load_s']:.2f} + {row[k]['first_call_s']:.2f}" if "first_call_s" in row[k] else "-"
            for k in kinds
        ]
        lines.append(f"| batch {batch} | " + " | ".join(cells) + " |")
    key = f"max_abs_diff_vs_{REFERENCE}"
    lines += ["", f"| max abs diff vs {REFERENCE} | {header} |", rule]
    for batch, row in result["batches"].items():
        cells = [f"{row[k][key]:.1e}" if key in row[k] else "-" for k in kinds]
        lines.append(f"| batch {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--model", help="an HF ONNX repository folder with sentence-transformers files (default: MiniLM)"
    )
    p.add_argument(
        "--batches", default="32,1", help="batch sizes, comma-separated (1: one call per sentence)"
    )
    p.add_argument(
        "--engines", default=",".join(ENGINES), help=f"a comma-separated subset of {','.join(ENGINES)}"
    )
    p.add_argument("--sequence-lengths", default=",".join(map(str, SEQUENCE_LENGTHS)),
                   help=f"our compile buckets, comma-separated; default {','.join(map(str, SEQUENCE_LENGTHS))}")
    p.add_argument("--sentences", type=int, default=256, help="sentences in the set; default 256")
    p.add_argument("--latency-sentences", type=int, default=32, help="sentences timed at batch 1; default 32")
    p.add_argument("--runs", type=int, default=5, help="timed passes per cell (median); default 5")
    p.add_argument(
        "--budget", type=float, default=120.0, help="timed seconds per cell after which no more runs start"
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    p.add_argument(
        "--output",
        default=str(ROOT / "benchmarks" / "results" / "text_embedding.md"),
        help="markdown file ('' for none)",
    )
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failing engines")
    args = p.parse_args(argv)
    result = bench(args)
    text = markdown(result)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
    print(json.dumps(result, indent=1) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
