"""Generation throughput: 16 concurrent greedy requests of 128 new tokens at batch 1, 4 and 8.

Engines, side by side: our text-generation pipeline behind ``tm.Serving`` (mlx and torch backends) on
the ``qwen2-genai`` fixture's int4 export (``onnx/model_q4.onnx``, GroupQueryAttention, the task's
default q4 variant) and on the ``qwen2`` fixture's optimum fp32 export (``position_ids``); onnxruntime-genai
on the same int4 folder (run through ``.cache/venv-genai/bin/python`` as a subprocess); transformers
``generate`` on the PyTorch weights of the same checkpoint. Every prompt is 16 tokens long, and every
request makes exactly 128 tokens (``min_new_tokens``), so all engines do the same work. A cell is the
total new tokens per second of the 16 requests (median of ``--runs`` after a warm-up round, which also
compiles); an engine that fails shows ``error: ...`` in its cell and the others go on.

    python benchmarks/generation.py                    # table, and benchmarks/results/generation.md
    python benchmarks/generation.py --json             # the same numbers as JSON on stdout
    python benchmarks/generation.py --batches 1,4 --engines mlx:q4,genai --new-tokens 32
    python benchmarks/generation.py --shape smollm2-135m --requests 8 --new-tokens 32   # a real model's shape
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
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

GENAI_PYTHON = ROOT / ".cache" / "venv-genai" / "bin" / "python"
ENGINES = ("mlx:q4", "torch:q4", "mlx:fp32", "torch:fp32", "genai", "transformers")
LABELS = {
    "mlx:q4": "ours: mlx, int4 genai export",
    "torch:q4": "ours: torch, int4 genai export",
    "mlx:fp32": "ours: mlx, fp32 optimum export",
    "torch:fp32": "ours: torch, fp32 optimum export",
    "genai": "onnxruntime-genai, int4",
    "transformers": "transformers generate, fp32 PyTorch",
}
# onnxruntime-genai in its own venv: greedy rounds of ``batch`` prompts, exactly ``new`` tokens each
GENAI_SCRIPT = """
import json, sys, time, numpy as np, onnxruntime_genai as og
folder, ids, batch, new, runs = sys.argv[1], json.loads(sys.argv[2]), *map(int, sys.argv[3:6])
model = og.Model(folder)
def round_():
    t0 = time.perf_counter()
    for i in range(0, len(ids), batch):
        rows = np.asarray(ids[i:i + batch], np.int32)
        params = og.GeneratorParams(model)
        length = rows.shape[1] + new
        params.set_search_options(do_sample=False, max_length=length, min_length=length, batch_size=len(rows))
        gen = og.Generator(model, params)
        gen.append_tokens(rows)
        while not gen.is_done():
            gen.generate_next_token()
    return time.perf_counter() - t0
round_()
print(json.dumps([round_() for _ in range(runs)]))
"""


def fixtures(shape: str) -> dict[str, Path]:
    """The int4 genai folder and the fp32 optimum folder of the same checkpoint: the tiny qwen2 fixtures, or
    a real shape of benchmarks/llm_shapes.py."""
    import dataclasses

    from tests.fixtures.generation_models import build

    if shape == "tiny":
        return {"q4": build("qwen2-genai"), "fp32": build("qwen2")}
    from benchmarks.llm_shapes import SHAPES

    spec = SHAPES[shape]
    return {"q4": build(spec), "fp32": build(dataclasses.replace(spec, name=spec.family, layout="optimum"))}


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
    texts: list[str] = []
    ids: list[list[int]] = []
    while len(texts) < count:
        raw = [int(i) for i in rng.integers(10, tok.vocab_size - 10, length + 8)]
        text = tok.decode(tok.encode([tok.decode(raw)], truncation=False).input_ids[0][:length])
        encoded = [int(i) for i in tok.encode([text], truncation=False).input_ids[0]]
        if len(encoded) == length and "\ufffd" not in text:
            texts.append(text)
            ids.append(encoded)
    return texts, ids


def ours(backend: str, folder: Path, texts: list[str], batch: int, new: int) -> Callable[[], float]:
    """A started Serving over the pipeline; one round is the 16 requests from 16 threads at once."""
    pipe = tm.text.generation(str(folder), backend=backend, compile={"batch_size": batch},
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


def genai_times(folder: Path, ids: list[list[int]], batch: int, new: int, runs: int) -> list[float]:
    if not GENAI_PYTHON.is_file():
        raise RuntimeError(f"no onnxruntime-genai venv at {GENAI_PYTHON} (see tests/fixtures/genai_models.py)")
    done = subprocess.run([str(GENAI_PYTHON), "-c", GENAI_SCRIPT, str(folder), json.dumps(ids), str(batch),
                           str(new), str(runs)], capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "genai failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(engine: str, batch: int, a: argparse.Namespace, data: dict) -> dict:
    """``{"tokens_per_s", "seconds", "warmup_s"}`` of one cell, or ``{"error": ...}``."""
    new, total = a.new_tokens, a.requests * a.new_tokens
    try:
        t0 = time.perf_counter()
        if engine == "genai":
            times = genai_times(data["folders"]["q4"], data["ids"], batch, new, a.runs)
            warmup = None
        else:
            if engine == "transformers":
                round_ = transformers_rounds(data["folders"]["q4"], data["ids"], batch, new)
            else:
                backend, kind = engine.split(":")
                round_ = ours(backend, data["folders"][kind], data["texts"], batch, new)
            round_()
            warmup = time.perf_counter() - t0
            times = [round_() for _ in range(a.runs)]
        seconds = statistics.median(times)
        return {"tokens_per_s": total / seconds, "seconds": seconds, "warmup_s": warmup}
    except Exception as error:  # an error cell; the other engines go on
        message = re.sub(r"^\S+\.onnx: ", "", (str(error).splitlines() or [""])[0])
        return {"error": f"{type(error).__name__}: {message[:140]}"}


def cell(result: dict) -> str:
    if "error" in result:
        return f"error: {result['error'][:110]}"
    return f"{result['tokens_per_s']:.0f} tokens/s"


def table(results: dict, batches: list[int], a: argparse.Namespace) -> str:
    head = "| Engine | " + " | ".join(f"`batch_size: {b}`" for b in batches) + " |"
    lines = [head, "|---|" + "---|" * len(batches)]
    for engine, row in results.items():
        lines.append(f"| {LABELS[engine]} | " + " | ".join(cell(row[str(b)]) for b in batches) + " |")
    from transmuter_mlx._blas import blas_info

    blas = blas_info()
    info = (f"{a.requests} concurrent requests, prompts of {a.prompt_tokens} tokens, greedy, exactly "
            f"{a.new_tokens} new tokens each; median of {a.runs} round(s) after a warm-up round. "
            f"Model: {describe(a.shape)}. Machine: "
            f"{platform.machine()} {os.cpu_count()} cores, {platform.system()}; MLX BLAS: "
            f"{Path(str(blas.get('library') or 'none')).name} ({blas.get('status')}).")
    return "\n".join(lines) + "\n\n" + info + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--batches", default="1,4,8")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--shape", default="tiny", help="tiny (the test fixtures), or a real shape of "
                   "benchmarks/llm_shapes.py: smollm2-135m, qwen3-0.6b (built offline on first use)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--output", default=None,
                   help="markdown file for the table ('' for none; default benchmarks/results/generation.md, "
                        "or generation-SHAPE.md)")
    a = p.parse_args(argv)
    if a.output is None:
        a.output = str(ROOT / "benchmarks" / "results" / ("generation.md" if a.shape == "tiny"
                                                            else f"generation-{a.shape}.md"))
    engines = [e for e in a.engines.split(",") if e]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        p.error(f"unknown engine(s) {unknown}; choose from {', '.join(ENGINES)}")
    batches = [int(b) for b in a.batches.split(",")]
    folders = fixtures(a.shape)
    texts, ids = prompts(folders["q4"], a.requests, a.prompt_tokens)
    data = {"folders": folders, "texts": texts, "ids": ids}
    results: dict[str, dict[str, dict]] = {}
    for engine in engines:
        results[engine] = {}
        for b in batches:
            results[engine][str(b)] = r = measure(engine, b, a, data)
            print(f"{engine} batch {b}: {cell(r)}", file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps({"results": results, "options": vars(a)}, indent=1))
    else:
        print(table(results, batches, a))
    if a.output:
        Path(a.output).parent.mkdir(parents=True, exist_ok=True)
        Path(a.output).write_text("# Generation throughput\n\nMade by `python benchmarks/generation.py`.\n\n"
                                  + table(results, batches, a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
