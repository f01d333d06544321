"""Ray Serve (transmuter_mlx/server/ray_serve.py) on a local Ray instance: the OpenAI app as ingress of
deployments with 2 replicas each; answers equal in-process pipeline calls. Slow: Ray starts in ~10 s."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

import transmuter_mlx as tm
from tests.server_harness import free_port

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def ray_app():
    from tests.fixtures.generation_models import build as generation
    from tests.fixtures.text_models import build as text
    from transmuter_mlx.server.ray_serve import openai_app, pipeline_app

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    models = {"embed": str(text("bert-embed-mean")), "chat": str(generation("qwen2")),
              "sst": str(text("bert-sst3"))}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
             object_store_memory=200 * 2**20, runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(openai_app([f"text-embedding={models['embed']}", f"text-generation={models['chat']}"],
                         num_replicas=2, pipeline_options={"compile": {"batch_size": 4}}),
              name="openai", route_prefix="/")
    handle = serve.run(pipeline_app("text-classification", models["sst"], num_replicas=2), name="sst",
                       route_prefix=None)
    try:
        yield f"http://127.0.0.1:{port}", handle, models
    finally:
        serve.shutdown()
        ray.shutdown()


def test_openai_app_on_ray_equals_in_process_calls(ray_app):
    url, _, models = ray_app
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
    texts = [f"text number {i}" for i in range(12)]
    got = client.embeddings.create(model=models["embed"], input=texts)
    want = tm.pipeline("text-embedding", models["embed"])(texts)
    for d, w in zip(got.data, want):
        np.testing.assert_allclose(d.embedding, np.asarray(w["embedding"]), rtol=0, atol=1e-5)
    messages = [{"role": "user", "content": "hello"}]
    chat = tm.pipeline("text-generation", models["chat"])
    want_text = chat({"messages": messages}, max_new_tokens=12, do_sample=False)["results"][0]["text"]
    answer = client.chat.completions.create(model=models["chat"], messages=messages, max_tokens=12, temperature=0)
    assert answer.choices[0].message.content == want_text
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=models["chat"], messages=messages, max_tokens=12, temperature=0, stream=True) if c.choices]
    assert "".join(pieces) == want_text
    assert answer.usage.completion_tokens == chat({"messages": messages}, max_new_tokens=12,
                                                  do_sample=False)["results"][0]["token_summary"]["output"]


def test_a_pipeline_deployment_has_two_replicas_and_batches(ray_app):
    _, handle, models = ray_app
    texts = [f"review {i}: {'good' if i % 2 else 'bad'}" for i in range(16)]
    responses = [handle.run.remote(t, {"top_k": 2}) for t in texts]
    got = [r.result() for r in responses]
    assert got == tm.pipeline("text-classification", models["sst"])(texts, top_k=2)
    status = serve.status().applications["sst"].deployments
    assert [d.replica_states.get("RUNNING") for d in status.values()] == [2]
    with pytest.raises(Exception, match="top_k"):
        handle.run.remote("x", {"top_k": "many"}).result()
    assert json.dumps(got)  # plain JSON values
