"""The ``serve`` command as a process (graceful shutdown on SIGTERM), and 200 concurrent clients against a
server (embeddings and streamed chat): none lost, each answer equal to its sequential result."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import transmuter_mlx as tm
from tests.server_harness import free_port, running_server, wait_healthy
from transmuter_mlx.server import ModelRegistry

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parents[1]


def test_sigterm_finishes_the_requests_in_flight_then_exits_0():
    from tests.fixtures.generation_models import build

    model = str(build("qwen2"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "transmuter_mlx", "serve", f"text-generation={model}",
                                "--port", str(port)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(url, process)
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200,
                "min_tokens": None, "temperature": 0, "stream": True}
        events = []
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as response:
            lines = response.iter_lines()
            for line in lines:
                if line.startswith("data: "):
                    events.append(line[6:])
                    if len(events) == 3:
                        process.send_signal(signal.SIGTERM)  # mid-stream: the answer must still end whole
                        break
            events += [line[6:] for line in lines if line.startswith("data: ")]
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1]
                   if json.loads(e)["choices"])
    want = tm.text.generation(model)({"messages": [{"role": "user", "content": "hi"}]}, max_new_tokens=200,
                                     do_sample=False)["results"][0]["text"]
    assert text == want
    with pytest.raises(httpx.ConnectError):  # it stopped accepting
        httpx.get(f"{url}/health", timeout=2)


def test_200_concurrent_clients_all_answered_as_sequential():
    from tests.fixtures.generation_models import build as generation
    from tests.fixtures.text_models import build as text

    embed_model, chat_model = str(text("bert-embed-mean")), str(generation("qwen2"))
    embed = tm.pipeline("text-embedding", embed_model, compile={"batch_size": 8})
    chat = tm.pipeline("text-generation", chat_model, compile={"batch_size": 8})
    texts = [f"sentence number {i} about {'cats' if i % 2 else 'dogs'}" for i in range(100)]
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(100)]
    lengths = [4 + (i * 7) % 29 for i in range(100)]  # mixed lengths: continuous batching refills slots
    want_embed = [np.asarray(e["embedding"]) for e in embed(texts)]
    want_chat = [chat({"messages": p}, max_new_tokens=n, do_sample=False)["results"][0]["text"]
                 for p, n in zip(prompts, lengths)]
    registry = ModelRegistry.load([("text-embedding", embed_model), ("text-generation", chat_model)],
                                  options={"compile": {"batch_size": 8}})

    async def clients(url: str) -> tuple[list, list]:
        limits = httpx.Limits(max_connections=300, max_keepalive_connections=300)
        async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
            async def embedding(i: int) -> list[float]:
                r = await client.post("/v1/embeddings", json={"model": embed_model, "input": texts[i]})
                r.raise_for_status()
                return r.json()["data"][0]["embedding"]

            async def streamed(i: int) -> str:
                body = {"model": chat_model, "messages": prompts[i], "max_tokens": lengths[i], "temperature": 0,
                        "stream": True}
                pieces = []
                async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    r.raise_for_status()
                    async for line in r.aiter_lines():
                        if line.startswith("data: ") and line != "data: [DONE]":
                            for choice in json.loads(line[6:])["choices"]:
                                pieces.append(choice["delta"].get("content") or "")
                return "".join(pieces)

            results = await asyncio.gather(*[embedding(i) for i in range(100)], *[streamed(i) for i in range(100)])
            return list(results[:100]), list(results[100:])

    with running_server(registry) as url:
        got_embed, got_chat = asyncio.run(clients(url))
    assert got_chat == want_chat
    for got, want in zip(got_embed, want_embed):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_serve_command_line_errors(capsys):
    from transmuter_mlx.__main__ import main

    assert main(["serve", "text-embedding"]) == 2
    assert "expected TASK=MODEL" in capsys.readouterr().err
    assert main(["serve", "juggling=some/model"]) == 2
    assert "juggling" in capsys.readouterr().err
