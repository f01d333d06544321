"""Load test of the HTTP server: N concurrent clients over loopback, on one machine and through Ray Serve.

    python benchmarks/serving.py                    # 1000 clients; benchmarks/results/serving.md
    python benchmarks/serving.py --clients 200 --skip-ray --output ''

Scenarios, each N clients at once (httpx async), every answer checked against its sequential result (the
in-process pipeline on that input alone):

- ``embeddings``: ``POST /v1/embeddings``, one text each (bert-embed-mean fixture, batch 8);
- ``chat``: streamed ``POST /v1/chat/completions`` on the qwen2 decoder fixture (hidden 64, 8 slots), greedy,
  ``max_tokens`` mixed from 4 to 64 (the load where batch-at-a-time waits for its longest row), with
  continuous batching (the default) and with ``--no-continuous-batching``;
- the same ``embeddings`` and ``chat`` through Ray Serve (``openai_app``, 2 replicas per model).

Reported per scenario: answered/equal counts, wall seconds, requests/s, generated tokens/s, latency p50/p99
(to the last byte), time to first token p50 (streams), and peak memory (the server process's VmHWM; for Ray
the summed RSS of its processes, sampled). The one-machine server runs as ``python -m transmuter_mlx serve``
in a subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from benchmarks._report import environment  # noqa: E402

SLOTS = 8


def workload(clients: int) -> dict[str, Any]:
    texts = [f"sentence {i} about {('cats', 'dogs', 'trains', 'rivers')[i % 4]} and number {i * 7 % 13}"
             for i in range(clients)]
    chats = [[{"role": "user", "content": f"question {i}: tell me about {('cats', 'dogs')[i % 2]}"}]
             for i in range(clients)]
    lengths = [4 + (i * 37) % 61 for i in range(clients)]  # 4..64, mixed
    return {"texts": texts, "chats": chats, "lengths": lengths}


def references(models: dict[str, str], work: dict[str, Any]) -> dict[str, Any]:
    """Each request's sequential answer (inputs of one max_tokens batched: a batch gives each input's tokens)."""
    import numpy as np

    import transmuter_mlx as tm

    embed = tm.pipeline("text-embedding", models["embed"], compile={"batch_size": SLOTS})
    chat = tm.pipeline("text-generation", models["chat"], compile={"batch_size": SLOTS})
    vectors = [np.asarray(e["embedding"]) for e in embed(work["texts"])]
    texts: list[str] = [""] * len(work["chats"])
    for n in sorted(set(work["lengths"])):
        idx = [i for i, m in enumerate(work["lengths"]) if m == n]
        for i, r in zip(idx, chat([{"messages": work["chats"][i]} for i in idx], max_new_tokens=n, do_sample=False)):
            texts[i] = r["results"][0]["text"]
    return {"embeddings": vectors, "chat": texts}


async def run_clients(url: str, kind: str, models: dict[str, str], work: dict[str, Any]) -> dict[str, Any]:
    import httpx

    n = len(work["texts"])
    limits = httpx.Limits(max_connections=n + 16, max_keepalive_connections=n + 16)
    latencies, ttft, answers, tokens = [0.0] * n, [], [None] * n, [0]
    async with httpx.AsyncClient(base_url=url, timeout=1800, limits=limits) as client:
        async def embedding(i: int) -> None:
            t0 = time.perf_counter()
            r = await client.post("/v1/embeddings", json={"model": models["embed"], "input": work["texts"][i]})
            r.raise_for_status()
            answers[i] = r.json()["data"][0]["embedding"]
            latencies[i] = time.perf_counter() - t0

        async def chat(i: int) -> None:
            body = {"model": models["chat"], "messages": work["chats"][i], "max_tokens": work["lengths"][i],
                    "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
            t0, first, pieces = time.perf_counter(), None, []
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    if event.get("usage"):
                        tokens[0] += event["usage"]["completion_tokens"]
                    for choice in event["choices"]:
                        piece = choice["delta"].get("content") or ""
                        if piece and first is None:
                            first = time.perf_counter() - t0
                        pieces.append(piece)
            answers[i] = "".join(pieces)
            latencies[i] = time.perf_counter() - t0
            if first is not None:
                ttft.append(first)

        call = embedding if kind == "embeddings" else chat
        t0 = time.perf_counter()
        outcomes = await asyncio.gather(*(call(i) for i in range(n)), return_exceptions=True)
        wall = time.perf_counter() - t0
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    return {"answers": answers, "latencies": latencies, "ttft": ttft, "wall": wall, "tokens": tokens[0],
            "errors": [f"{type(e).__name__}: {e}"[:200] for e in errors[:3]], "failed": len(errors)}


def summary(result: dict[str, Any], want: list[Any], kind: str) -> dict[str, Any]:
    import numpy as np

    n = len(want)
    if kind == "embeddings":
        equal = sum(a is not None and np.allclose(a, w, rtol=0, atol=1e-5) for a, w in zip(result["answers"], want))
    else:
        equal = sum(a == w for a, w in zip(result["answers"], want))
    lat = sorted(x for x, a in zip(result["latencies"], result["answers"]) if a is not None)

    def pct(values: list[float], q: float) -> float | None:
        return round(values[min(len(values) - 1, int(q * len(values)))], 3) if values else None

    return {"clients": n, "answered": n - result["failed"], "equal": int(equal), "seconds": round(result["wall"], 2),
            "requests_per_s": round(n / result["wall"], 1),
            "tokens_per_s": round(result["tokens"] / result["wall"], 1) if kind == "chat" else None,
            "p50_s": pct(lat, 0.5), "p99_s": pct(lat, 0.99),
            "ttft_p50_s": round(statistics.median(result["ttft"]), 3) if result["ttft"] else None,
            "errors": result["errors"]}


def _rss_kb(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class RaySampler(threading.Thread):
    """The summed RSS of Ray's processes (``ray::`` in their command line), sampled every 0.5 s; the peak."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kb, self.stop = 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            total = 0
            for proc in Path("/proc").iterdir():
                if proc.name.isdigit():
                    try:
                        if b"ray" in (proc / "cmdline").read_bytes():
                            total += _rss_kb(int(proc.name))
                    except OSError:
                        continue
            self.peak_kb = max(self.peak_kb, total)


def one_machine(models: dict[str, str], work: dict[str, Any], want: dict[str, Any], continuous: bool,
                kinds: tuple[str, ...]) -> dict[str, Any]:
    from tests.server_harness import free_port, wait_healthy

    port = free_port()
    command = [sys.executable, "-m", "transmuter_mlx", "serve", f"text-embedding={models['embed']}",
               f"text-generation={models['chat']}", "--port", str(port), "--batch-size", str(SLOTS),
               "--max-queue", str(4 * len(work["texts"]))]
    if not continuous:
        command.append("--no-continuous-batching")
    process = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        out = {}
        for kind in kinds:
            result = asyncio.run(run_clients(url, kind, models, work))
            out[kind] = summary(result, want["embeddings" if kind == "embeddings" else "chat"], kind)
        peak = _rss_kb(process.pid, "VmHWM")
        for cell in out.values():
            cell["peak_memory_mb"] = round(peak / 1024) if peak else None
        return out
    finally:
        process.terminate()
        process.wait(60)


def on_ray(models: dict[str, str], work: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    import logging

    import ray
    from ray import serve

    from tests.server_harness import free_port
    from transmuter_mlx.server import ServerSettings
    from transmuter_mlx.server.ray_serve import openai_app

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    port = free_port()
    sampler = RaySampler()
    sampler.start()
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config={"log_level": "WARNING"})
        serve.run(openai_app([f"text-embedding={models['embed']}", f"text-generation={models['chat']}"],
                             num_replicas=2, settings=ServerSettings(max_queue=4 * len(work["texts"])),
                             pipeline_options={"compile": {"batch_size": SLOTS}}), name="openai", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        out = {kind: summary(asyncio.run(run_clients(url, kind, models, work)),
                             want["embeddings" if kind == "embeddings" else "chat"], kind)
               for kind in ("embeddings", "chat")}
        for cell in out.values():
            cell["peak_memory_mb"] = round(sampler.peak_kb / 1024)
        return out
    finally:
        sampler.stop.set()
        serve.shutdown()
        ray.shutdown()


def markdown(results: dict[str, Any], clients: int) -> str:
    lines = ["# Serving: concurrent clients over loopback", "",
             f"{clients} clients at once against `python -m transmuter_mlx serve` (and Ray Serve, 2 replicas per "
             "model); every answer compared with its sequential result. Chat: the qwen2 decoder fixture (hidden 64), "
             f"{SLOTS} slots, greedy, max_tokens 4..64 mixed, streamed. Produced by `python benchmarks/serving.py`.",
             "", "| setup | load | answered | equal to sequential | seconds | requests/s | tokens/s | p50 s | p99 s | "
             "first token p50 s | peak memory MB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for setup, cells in results["setups"].items():
        for kind, c in cells.items():
            lines.append(f"| {setup} | {kind} | {c['answered']}/{c['clients']} | {c['equal']}/{c['clients']} | "
                         f"{c['seconds']} | {c['requests_per_s']} | {c['tokens_per_s'] or ''} | {c['p50_s']} | "
                         f"{c['p99_s']} | {c['ttft_p50_s'] or ''} | {c['peak_memory_mb'] or ''} |")
    ratio = results.get("continuous_over_batch_tokens_per_s")
    if ratio:
        lines += ["", f"Continuous batching over batch-at-a-time on the chat load: {ratio}x the tokens/s."]
    env = results["environment"]
    lines += ["", "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "serving.md"))
    args = parser.parse_args(argv)
    from tests.fixtures.generation_models import build as generation
    from tests.fixtures.text_models import build as text

    models = {"embed": str(text("bert-embed-mean")), "chat": str(generation("qwen2"))}
    work = workload(args.clients)
    want = references(models, work)
    setups = {"server, continuous batching": one_machine(models, work, want, True, ("embeddings", "chat")),
              "server, batch at a time": one_machine(models, work, want, False, ("chat",))}
    if not args.skip_ray:
        setups["Ray Serve, 2 replicas"] = on_ray(models, work, want)
    results: dict[str, Any] = {"setups": setups}
    cont, batch = setups["server, continuous batching"]["chat"], setups["server, batch at a time"]["chat"]
    if cont["tokens_per_s"] and batch["tokens_per_s"]:
        results["continuous_over_batch_tokens_per_s"] = round(cont["tokens_per_s"] / batch["tokens_per_s"], 2)
    results["environment"] = environment(["mlx", "starlette", "uvicorn", "httpx", "ray"])
    print(json.dumps(results, indent=1, default=str))
    text_out = markdown(results, args.clients)
    print(text_out)
    if args.output:
        Path(args.output).write_text(text_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
