"""One text-generation pipeline in this process: load time, first call, peak memory.

The generation benchmark's worker builds several pipelines in turn, so its peak is an upper bound; this is
what one user's pipeline costs. Run it once per backend, each in a fresh process:

    python benchmarks/load_memory.py .cache/fixtures/qwen3-002b342ae0ca --backend torch
    python benchmarks/load_memory.py FOLDER --backend mlx --new-tokens 8

Prints one JSON line: load_s (``tm.text.generation``), first_call_s and second_call_s (greedy, ``--new-tokens``
new tokens of a two-word prompt), peak_mb (this process's peak resident set) and rss_after_mb.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import peak_rss_mb  # noqa: E402

import transmuter_mlx as tm  # noqa: E402


def rss_now_mb() -> float:
    with open("/proc/self/statm") as f:  # Linux; resident pages
        return int(f.read().split()[1]) * 4096 / 2**20


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", help="an HF ONNX repository folder with a decoder")
    p.add_argument("--backend", default="mlx", choices=("mlx", "torch"))
    p.add_argument("--new-tokens", type=int, default=8)
    a = p.parse_args(argv)
    t = time.perf_counter()
    pipe = tm.text.generation(a.folder, backend=a.backend, max_new_tokens=a.new_tokens,
                              min_new_tokens=a.new_tokens, do_sample=False)
    load_s = time.perf_counter() - t
    calls = []
    for _ in range(2):
        t = time.perf_counter()
        pipe("hello world")
        calls.append(time.perf_counter() - t)
    print(json.dumps({"backend": a.backend, "load_s": round(load_s, 2), "first_call_s": round(calls[0], 2),
                      "second_call_s": round(calls[1], 2), "peak_mb": round(peak_rss_mb()),
                      "rss_after_mb": round(rss_now_mb())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
