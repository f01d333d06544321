"""Generation throughput and latency: 16 concurrent greedy requests of 128 new tokens at batch 1, 4 and 8.

Engines, side by side: our text-generation pipeline behind ``tm.Serving`` (mlx and torch backends) on
the ``qwen2-genai`` fixture's int4 export (``onnx/model_q4.onnx``, GroupQueryAttention, the task's
default q4 variant) and on the ``qwen2`` fixture's optimum fp32 export (``position_ids``) and its q8
(``quantize_dynamic``: MatMulInteger) and q4 (MatMulNBits, block 32) quantizations as transformers.js's repositories
have them (``mlx:q8``, ``mlx:q4-optimum``, ...); onnxruntime-genai
on the same int4 folder (run through ``.cache/venv-genai/bin/python``); transformers ``generate`` on the
PyTorch weights of the same checkpoint. Every prompt is 16 tokens long, and every request makes exactly 128
tokens (``min_new_tokens``), so all engines do the same work. A throughput cell is the total new tokens per
second of the 16 requests (median of ``--runs`` after a warm-up round, which also compiles).

Each engine runs in a process of its own (one engine's BLAS and OpenMP threads cannot slow the next, and
its peak memory is its own): load time, the first call (2 new tokens: conversion and compilation of the
prefill and decode steps), time to first token of a ``--prefill-tokens`` prompt at batch 1 (median of 7) and
the prefill tokens/s it implies, and the process's peak resident memory beside the size of the weights it
reads. An engine that fails shows ``error: ...`` in its cells and the others go on.

    python benchmarks/generation.py                    # table, and benchmarks/results/generation.md
    python benchmarks/generation.py --json             # the same numbers as JSON on stdout
    python benchmarks/generation.py --batches 1,4 --engines mlx:q4,genai --new-tokens 32
    python benchmarks/generation.py --shape smollm2-135m --requests 8 --new-tokens 32   # a real model's shape
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

import transmuter_mlx as tm  # noqa: E402  (first: it sets up the BLAS before mlx.core loads)
from benchmarks._report import cpu_name, peak_rss_mb, weights_mb  # noqa: E402

GENAI_PYTHON = ROOT / ".cache" / "venv-genai" / "bin" / "python"
TTFT_RUNS = 7  # a 128-token prompt takes ~0.15 s: the VM's noise needs more than 3 of them
ENGINES = ("mlx:q4", "torch:q4", "mlx:fp32", "torch:fp32", "mlx:q8", "torch:q8", "mlx:q4-optimum", "torch:q4-optimum",
           "genai", "transformers")
LABELS = {
    "mlx:q4": "ours: mlx, int4 genai export",
    "torch:q4": "ours: torch, int4 genai export",
    "mlx:fp32": "ours: mlx, fp32 optimum export",
    "torch:fp32": "ours: torch, fp32 optimum export",
    "mlx:q8": "ours: mlx, q8 of the optimum export (quantize_dynamic)",
    "torch:q8": "ours: torch, q8 of the optimum export (quantize_dynamic)",
    "mlx:q4-optimum": "ours: mlx, q4 of the optimum export (MatMulNBits)",
    "torch:q4-optimum": "ours: torch, q4 of the optimum export (MatMulNBits)",
    "genai": "onnxruntime-genai, int4",
    "transformers": "transformers generate, fp32 PyTorch",
}
# onnxruntime-genai in its own venv: greedy rounds of ``batch`` prompts, exactly ``new`` tokens each
GENAI_SCRIPT = """
import json, sys, time, numpy as np, onnxruntime_genai as og
folder, ids, batch, new, runs = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:6])
t0 = time.perf_counter()
model = og.Model(folder)
load_s = time.perf_counter() - t0
def generate(rows, new):
    params = og.GeneratorParams(model)
    length = rows.shape[1] + new
    params.set_search_options(do_sample=False, max_length=length, min_length=length, batch_size=len(rows))
    gen = og.Generator(model, params)
    gen.append_tokens(rows)
    while not gen.is_done():
        gen.generate_next_token()
def round_():
    t0 = time.perf_counter()
    for i in range(0, len(ids), batch):
        generate(np.asarray(ids[i:i + batch], np.int32), new)
    return time.perf_counter() - t0
def first(rows, new):
    t0 = time.perf_counter()
    generate(rows, new)
    return time.perf_counter() - t0
latency = {"load_s": load_s}
if batch == 1:
    latency["first_call_s"] = first(np.asarray(ids[:1], np.int32), 2)
    long = np.asarray([json.loads(sys.argv[6])], np.int32)
    first(long, 1)
    latency["ttft_s"] = sorted(first(long, 1) for _ in range(7))[3]  # the median of TTFT_RUNS
round_()
print(json.dumps({"times": [round_() for _ in range(runs)], **latency}))
"""


# an engine's kind -> the folder it reads ("genai" or "optimum") and the ONNX variant it loads there
KINDS = {"q4": ("genai", "q4"), "fp32": ("optimum", "fp32"), "q8": ("optimum", "q8"), "q4-optimum": ("optimum", "q4")}
VARIANT_FILES = {"q4": "onnx/model_q4.onnx", "fp32": "onnx/model.onnx", "q8": "onnx/model_quantized.onnx"}


def fixtures(shape: str) -> dict[str, Path]:
    """The int4 genai folder and the optimum folder (fp32, with its q8 and q4 quantizations, as transformers.js's
    repositories have them) of the same checkpoint: the tiny qwen2 fixtures, or a real shape of
    benchmarks/llm_shapes.py."""
    import dataclasses

    from tests.fixtures.generation_models import SPECS, build

    quantized = ("q8", "q4")
    if shape == "tiny":
        return {"genai": build("qwen2-genai"), "optimum": build(dataclasses.replace(SPECS["qwen2"], quantize=quantized))}
    from benchmarks.llm_shapes import SHAPES

    spec = SHAPES[shape]
    optimum = dataclasses.replace(spec, name=spec.family, layout="optimum", quantize=quantized)
    return {"genai": build(spec), "optimum": build(optimum)}


def describe(shape: str) -> str:
    if shape == "tiny":
        return "the random-weight qwen2 fixture (hidden 64, 2 layers, vocab 512)"
    from benchmarks.llm_shapes import SHAPES

    s = SHAPES[shape]
    return (f"{shape} shape, random weights ({s.family}: hidden {s.hidden_size}, {s.num_hidden_layers} layers, "
            f"{s.num_attention_heads}/{s.num_key_value_heads} heads, MLP {s.intermediate_size}, vocab {s.vocab_size})")


def prompts(folder: Path, count: int, length: int, seed: int = 0) -> tuple[list[str], list[list[int]]]:
    """``count`` texts that tokenize to exactly ``length`` tokens, and their ids."""
    tok = tm.tokenizer.Tokenizer.from_folder(folder)
    rng = np.random.default_rng(seed)
    # ids that decode to whole characters on their own: random byte pieces make long prompts invalid UTF-8
    clean = [i for i in range(10, min(tok.vocab_size - 10, 5000)) if "\ufffd" not in tok.decode([i])]
    texts: list[str] = []
    ids: list[list[int]] = []
    while len(texts) < count:
        raw = [clean[int(i)] for i in rng.integers(0, len(clean), length + 8)]
        text = tok.decode(tok.encode([tok.decode(raw)], truncation=False).input_ids[0][:length])
        encoded = [int(i) for i in tok.encode([text], truncation=False).input_ids[0]]
        if len(encoded) == length and "\ufffd" not in text:
            texts.append(text)
            ids.append(encoded)
    return texts, ids


def ours(backend: str, folder: Path, variant: str, texts: list[str], batch: int, new: int) -> Callable[[], float]:
    """A started Serving over the pipeline; one round is the 16 requests from 16 threads at once."""
    pipe = tm.text.generation(str(folder), backend=backend, variant=variant, compile={"batch_size": batch},
                              max_new_tokens=new, min_new_tokens=new, do_sample=False)
    serving = tm.Serving(pipe, batch_timeout_ms=10)
    outputs: list[int] = []

    def round_() -> float:
        outputs.clear()
        errors: list[BaseException] = []

        def call(text: str) -> None:
            try:
                outputs.append(serving.run(text)["results"][0]["token_summary"]["output"])
            except BaseException as error:  # reported by the round
                errors.append(error)

        threads = [threading.Thread(target=call, args=(t,)) for t in texts]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        if sum(outputs) != new * len(texts):
            raise RuntimeError(f"made {sum(outputs)} tokens, expected {new * len(texts)}")
        return time.perf_counter() - t0

    round_.close = serving.close  # type: ignore[attr-defined]  (its thread holds the pipeline and its weights)
    return round_


def transformers_rounds(folder: Path, ids: list[list[int]], batch: int, new: int) -> Callable[[], float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder).eval()

    def round_() -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            for i in range(0, len(ids), batch):
                rows = torch.tensor(ids[i:i + batch])
                model.generate(rows, attention_mask=torch.ones_like(rows), do_sample=False,
                               max_new_tokens=new, min_new_tokens=new)
        return time.perf_counter() - t0

    return round_


def genai_run(folder: Path, ids: list[list[int]], long_ids: list[int], batch: int, new: int, runs: int) -> dict:
    """onnxruntime-genai's rounds at one batch size in its own venv: ``{"times", "peak_rss_mb", ...}``."""
    if not GENAI_PYTHON.is_file():
        raise RuntimeError(f"no onnxruntime-genai venv at {GENAI_PYTHON} (see tests/fixtures/genai_models.py)")
    code = GENAI_SCRIPT + PEAK_RSS_LINE
    t0 = time.perf_counter()
    done = subprocess.run([str(GENAI_PYTHON), "-c", code, str(folder), json.dumps(ids), str(batch),
                           str(new), str(runs), json.dumps(long_ids)], capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "genai failed")
    lines = done.stdout.strip().splitlines()
    return {**json.loads(lines[-2]), **json.loads(lines[-1]), "process_s": time.perf_counter() - t0}


# the last line a worker of the genai venv prints: its process's peak resident memory (``_report.peak_rss_mb``)
PEAK_RSS_LINE = f"""
import json as _j, sys as _s
_s.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from _report import peak_rss_mb as _peak
print(_j.dumps({{"peak_rss_mb": _peak()}}))
"""


def engine_weights_mb(engine: str, folders: dict[str, Path]) -> float:
    """The size of the weight files an engine reads (an ONNX file and its external data; the safetensors)."""
    if engine == "transformers":
        return weights_mb(safetensors_in=folders["genai"])
    folder, variant = KINDS["q4" if engine == "genai" else engine.split(":")[1]]
    return weights_mb(folders[folder] / VARIANT_FILES[variant])


def ours_latency(backend: str, folder: Path, variant: str, texts: list[str], long_text: str) -> dict:
    """Load, first call (2 new tokens) and time to first token of the long prompt, at batch 1."""
    t0 = time.perf_counter()
    pipe = tm.text.generation(str(folder), backend=backend, variant=variant, max_new_tokens=2, min_new_tokens=2,
                              do_sample=False)
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    pipe(texts[0])
    first = time.perf_counter() - t0
    one = {"max_new_tokens": 1, "min_new_tokens": 1}
    pipe(long_text, **one)  # the long prompt's shape compiles here
    times = []
    for _ in range(TTFT_RUNS):
        t0 = time.perf_counter()
        pipe(long_text, **one)
        times.append(time.perf_counter() - t0)
    return {"load_s": load, "first_call_s": first, "ttft_s": statistics.median(times)}


def transformers_latency(folder: Path, ids: list[list[int]], long_ids: list[int]) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    load = time.perf_counter() - t0

    def generate(row: list[int], new: int) -> float:
        rows = torch.tensor([row])
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(rows, attention_mask=torch.ones_like(rows), do_sample=False, max_new_tokens=new,
                           min_new_tokens=new)
        return time.perf_counter() - t0

    first = generate(ids[0], 2)
    generate(long_ids, 1)
    return {"load_s": load, "first_call_s": first, "ttft_s": statistics.median(generate(long_ids, 1) for _ in range(TTFT_RUNS))}


def worker(engine: str, a: argparse.Namespace) -> dict:
    """One engine in this process: latency at batch 1 first (a fresh process), then each batch's rounds."""
    data = inputs(a)
    new, total = a.new_tokens, a.requests * a.new_tokens
    if engine == "transformers":
        out = transformers_latency(data["folders"]["genai"], data["ids"], data["long_ids"])
    else:
        backend, kind = engine.split(":")
        folder, variant = KINDS[kind]
        out = ours_latency(backend, data["folders"][folder], variant, data["texts"], data["long_text"])
    out["batches"] = {}
    for batch in a.batch_list:
        try:
            t0 = time.perf_counter()
            if engine == "transformers":
                round_ = transformers_rounds(data["folders"]["genai"], data["ids"], batch, new)
            else:
                round_ = ours(backend, data["folders"][folder], variant, data["texts"], batch, new)
            round_()
            warmup = time.perf_counter() - t0
            seconds = statistics.median(round_() for _ in range(a.runs))
            getattr(round_, "close", lambda: None)()
            del round_
            gc.collect()  # one batch size's pipeline at a time: the peak memory is one pipeline's
            out["batches"][str(batch)] = {"tokens_per_s": total / seconds, "seconds": seconds, "warmup_s": warmup}
        except Exception as error:  # an error cell; the other batch sizes go on
            out["batches"][str(batch)] = {"error": short(error)}
        print(f"{engine} batch {batch}: {cell(out['batches'][str(batch)])}", file=sys.stderr, flush=True)
    return out


def short(error: BaseException) -> str:
    message = re.sub(r"^\S+\.onnx: ", "", (str(error).splitlines() or [""])[0])
    return f"{type(error).__name__}: {message[:140]}"


def measure(engine: str, a: argparse.Namespace, data: dict) -> dict:
    """One engine's row, measured in its own process(es): ``{"batches": {...}, "load_s", ..., "peak_rss_mb"}``
    or ``{"error": ...}``."""
    try:
        if engine == "genai":
            out: dict = {"batches": {}}
            for batch in a.batch_list:
                run = genai_run(data["folders"]["genai"], data["ids"], data["long_ids"], batch, a.new_tokens, a.runs)
                seconds = statistics.median(run.pop("times"))
                out["batches"][str(batch)] = {"tokens_per_s": a.requests * a.new_tokens / seconds, "seconds": seconds}
                out["peak_rss_mb"] = max(out.get("peak_rss_mb", 0), run.pop("peak_rss_mb"))
                out.update({k: v for k, v in run.items() if k in ("load_s", "first_call_s", "ttft_s") and batch == 1})
                print(f"{engine} batch {batch}: {cell(out['batches'][str(batch)])}", file=sys.stderr, flush=True)
        else:
            args = [sys.executable, __file__, "--worker", engine, "--shape", a.shape, "--batches", a.batches,
                    "--requests", str(a.requests), "--new-tokens", str(a.new_tokens), "--prompt-tokens",
                    str(a.prompt_tokens), "--prefill-tokens", str(a.prefill_tokens), "--runs", str(a.runs)]
            done = subprocess.run(args, stdout=subprocess.PIPE, text=True, timeout=7200)
            lines = done.stdout.strip().splitlines()
            if done.returncode or not lines:
                raise RuntimeError(f"worker exited {done.returncode}" + (f": {lines[-1]}" if lines else ""))
            out = json.loads(lines[-1])
        out["weights_mb"] = engine_weights_mb(engine, data["folders"])
        if out.get("ttft_s"):
            out["prefill_tokens_per_s"] = a.prefill_tokens / out["ttft_s"]
        return out
    except Exception as error:  # an error row; the other engines go on
        return {"error": short(error)}


def cell(result: dict) -> str:
    if "error" in result:
        return f"error: {result['error'][:110]}"
    return f"{result['tokens_per_s']:.0f} tokens/s"


def number(row: dict, key: str, fmt: str) -> str:
    return format(row[key], fmt) if row.get(key) is not None else "-"


def table(results: dict, batches: list[int], a: argparse.Namespace) -> str:
    head = "| Engine | " + " | ".join(f"`batch_size: {b}`" for b in batches) + " |"
    lines = [head, "|---|" + "---|" * len(batches)]
    for engine, row in results.items():
        cells = [cell(row["batches"].get(str(b), {"error": "not run"})) if "batches" in row else cell(row)
                 for b in batches]
        lines.append(f"| {LABELS[engine]} | " + " | ".join(cells) + " |")
    lines += ["", f"| Engine | weights MB | peak memory MB | load s | first call s | time to first token, "
              f"{a.prefill_tokens}-token prompt | prefill tokens/s |", "|---|---|---|---|---|---|---|"]
    for engine, row in results.items():
        if "error" in row:
            lines.append(f"| {LABELS[engine]} | {cell(row)} | | | | | |")
            continue
        ttft = f"{row['ttft_s'] * 1000:.0f} ms" if row.get("ttft_s") else "-"
        lines.append(f"| {LABELS[engine]} | {number(row, 'weights_mb', '.0f')} | {number(row, 'peak_rss_mb', '.0f')} | "
                     f"{number(row, 'load_s', '.2f')} | {number(row, 'first_call_s', '.2f')} | {ttft} | "
                     f"{number(row, 'prefill_tokens_per_s', '.0f')} |")
    from transmuter_mlx._blas import blas_info

    blas = blas_info()
    info = (f"{a.requests} concurrent requests, prompts of {a.prompt_tokens} tokens, greedy, exactly "
            f"{a.new_tokens} new tokens each; median of {a.runs} round(s) after a warm-up round. Each engine ran in "
            "a process of its own; peak memory is that process's peak resident set (Python and the libraries "
            "included); first call = 2 new tokens right after loading (conversion and compilation included); time "
            f"to first token = 1 new token after a {a.prefill_tokens}-token prompt at batch 1, median of {TTFT_RUNS} after one "
            f"warm-up. Model: {describe(a.shape)}. Machine: "
            f"{platform.machine()} ({cpu_name()}) {os.cpu_count()} cores, {platform.system()}, load average "
            f"{os.getloadavg()[0]:.2f} at the end; MLX BLAS: "
            f"{Path(str(blas.get('library') or 'none')).name} ({blas.get('status')}).")
    return "\n".join(lines) + "\n\n" + info + "\n"


def inputs(a: argparse.Namespace) -> dict:
    """The fixture folders, the prompts (texts and ids) and the long prompt of the time-to-first-token cells."""
    folders = fixtures(a.shape)
    texts, ids = prompts(folders["genai"], a.requests, a.prompt_tokens)
    (long_text,), (long_ids,) = prompts(folders["genai"], 1, a.prefill_tokens, seed=1)
    return {"folders": folders, "texts": texts, "ids": ids, "long_text": long_text, "long_ids": long_ids}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--batches", default="1,4,8")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--prefill-tokens", type=int, default=128, help="the prompt of the time-to-first-token cells")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--shape", default="tiny", help="tiny (the test fixtures), or a real shape of "
                   "benchmarks/llm_shapes.py: smollm2-135m, qwen3-0.6b (built offline on first use)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--output", default=None,
                   help="markdown file for the table ('' for none; default benchmarks/results/generation.md, "
                        "or generation-SHAPE.md)")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # one engine, in the process measure() starts
    a = p.parse_args(argv)
    a.batch_list = [int(b) for b in a.batches.split(",")]
    if a.worker:
        print(json.dumps({**worker(a.worker, a), "peak_rss_mb": peak_rss_mb()}))
        return 0
    if a.output is None:
        a.output = str(ROOT / "benchmarks" / "results" / ("generation.md" if a.shape == "tiny"
                                                            else f"generation-{a.shape}.md"))
    engines = [e for e in a.engines.split(",") if e]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        p.error(f"unknown engine(s) {unknown}; choose from {', '.join(ENGINES)}")
    data = inputs(a)
    results = {engine: measure(engine, a, data) for engine in engines}
    if a.json:
        print(json.dumps({"results": results, "options": vars(a)}, indent=1))
    else:
        print(table(results, a.batch_list, a))
    if a.output:
        Path(a.output).parent.mkdir(parents=True, exist_ok=True)
        given = sys.argv[1:] if argv is None else argv
        command = shlex.join(["python", "benchmarks/generation.py", *_without_output(given)])
        Path(a.output).write_text(f"# Generation throughput and latency\n\nMade by `{command}`.\n\n"
                                  + table(results, a.batch_list, a))
    return 0


def _without_output(args: list[str]) -> list[str]:
    """The command line's arguments less ``--output`` and its value (where the table went, not how it was made)."""
    out, skip = [], False
    for arg in args:
        if skip or arg.startswith("--output="):
            skip = False
            continue
        skip = arg == "--output"
        if not skip:
            out.append(arg)
    return out


if __name__ == "__main__":
    sys.exit(main())
