"""The OpenAI-compatible server (transmuter_mlx.server) over real HTTP (uvicorn on loopback): every endpoint's
answer equals the in-process pipeline's result on the same fixture (which the pipeline tests hold against
transformers), the official ``openai`` client works unchanged, and bad requests get named 4xx errors."""

from __future__ import annotations

import base64
import io
import json
import threading

import numpy as np
import pytest

import transmuter_mlx as tm
from tests.server_harness import running_server
from transmuter_mlx.server import ModelRegistry, ServedModel, ServerSettings
from transmuter_mlx.server.models import batcher_for

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

KEY = "test-key"


@pytest.fixture(scope="module")
def models():
    from tests.fixtures.audio_models import build as audio
    from tests.fixtures.generation_models import build as generation
    from tests.fixtures.text_models import build as text
    from tests.fixtures.tts_models import build as tts
    from tests.fixtures.vision_models import build as vision

    return {"embed": str(text("bert-embed-mean")), "rerank": str(text("bert-rerank")),
            "chat": str(generation("qwen2")), "t5": str(generation("t5")), "asr": str(audio("whisper")),
            "vit": str(vision("vit")), "tts": str(tts("vits"))}


@pytest.fixture(scope="module")
def pipes(models):
    """The in-process pipelines: the reference of each answer."""
    return {"embed": tm.pipeline("text-embedding", models["embed"]),
            "rerank": tm.pipeline("text-ranking", models["rerank"]),
            "chat": tm.pipeline("text-generation", models["chat"], compile={"batch_size": 2}),
            "t5": tm.pipeline("text2text-generation", models["t5"]),
            "asr": tm.pipeline("automatic-speech-recognition", models["asr"]),
            "vit": tm.pipeline("image-classification", models["vit"]),
            "tts": tm.pipeline("text-to-speech", models["tts"])}


@pytest.fixture(scope="module")
def server(models, pipes):
    tasks = {"embed": "text-embedding", "rerank": "text-ranking", "chat": "text-generation",
             "t5": "text2text-generation", "asr": "automatic-speech-recognition", "vit": "image-classification",
             "tts": "text-to-speech"}
    # as the serve command builds them: text generation continuously batched, the others through tm.Serving
    registry = ModelRegistry([ServedModel(models[k], tasks[k], batcher_for(pipes[k])) for k in tasks])
    with running_server(registry, ServerSettings(api_key=KEY, max_request_bytes=4 * 2**20)) as url:
        yield url


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0)


def post(server, path, **kw):
    headers = {"Authorization": f"Bearer {KEY}", **kw.pop("headers", {})}
    return httpx.post(f"{server}{path}", headers=headers, timeout=120, **kw)


# ---------------------------------------------------------------- the openai client
def test_openai_client_embeddings_equal_the_pipeline(client, models, pipes):
    texts = ["The cat sat on the mat.", "A second, longer sentence about nothing at all."]
    answer = client.embeddings.create(model=models["embed"], input=texts)
    want = [np.asarray(r["embedding"]) for r in pipes["embed"](texts)]
    assert [d.index for d in answer.data] == [0, 1]
    for d, w in zip(answer.data, want):
        np.testing.assert_allclose(d.embedding, w, rtol=0, atol=1e-6)
    assert answer.usage.prompt_tokens == int(pipes["embed"].tokenizer.encode(texts).attention_mask.sum())
    packed = client.embeddings.create(model=models["embed"], input=texts[0], encoding_format="base64")
    # the client decodes base64 itself when it asked for floats; here we asked for base64 explicitly
    raw = packed.data[0].embedding
    vector = np.frombuffer(base64.b64decode(raw), "<f4") if isinstance(raw, str) else np.asarray(raw)
    np.testing.assert_allclose(vector, want[0], rtol=0, atol=1e-6)
    assert [m.id for m in client.models.list().data] == list(models.values())


def test_openai_client_chat_equals_the_pipeline(client, models, pipes):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
    answer = client.chat.completions.create(model=models["chat"], messages=messages, max_tokens=8, temperature=0)
    want = pipes["chat"]({"messages": messages}, max_new_tokens=8, do_sample=False)["results"][0]
    assert answer.choices[0].message.content == want["text"]
    assert answer.choices[0].message.role == "assistant"
    assert answer.usage.prompt_tokens == want["token_summary"]["input"]
    assert answer.usage.completion_tokens == want["token_summary"]["output"]
    assert answer.choices[0].finish_reason == ("length" if want["token_summary"]["output"] == 8 else "stop")
    # streamed: the pieces join to the same text, then the usage chunk
    pieces, usage, reasons = [], None, []
    for chunk in client.chat.completions.create(model=models["chat"], messages=messages, max_tokens=8,
                                                temperature=0, stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            reasons.append(choice.finish_reason)
    assert "".join(pieces) == want["text"]
    assert usage.completion_tokens == want["token_summary"]["output"]
    assert reasons[-1] == answer.choices[0].finish_reason and set(reasons[:-1]) == {None}


def test_openai_client_completions_sampled_with_a_seed(client, models, pipes):
    answer = client.completions.create(model=models["chat"], prompt=["Once upon", "The end"], max_tokens=6,
                                       temperature=0.8, top_p=0.9, seed=7, n=2)
    texts = []
    for prompt in ("Once upon", "The end"):
        result = pipes["chat"](prompt, max_new_tokens=6, do_sample=True, temperature=0.8, top_p=0.9, seed=7,
                               num_return_sequences=2)
        texts += [r["text"] for r in result["results"]]
    assert [c.text for c in answer.choices] == texts
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    # a text-to-text model answers completions too
    t5 = client.completions.create(model=models["t5"], prompt="translate English to German: a house", max_tokens=5,
                                   temperature=0)
    assert t5.choices[0].text == pipes["t5"]("translate English to German: a house", max_new_tokens=5,
                                             do_sample=False)["results"][0]["text"]


def test_openai_client_transcriptions(client, models, pipes, tmp_path):
    import soundfile

    from tests.fixtures.speech import speech

    wave, rate = speech("beckett")
    path = tmp_path / "speech.wav"
    soundfile.write(path, wave[: rate * 6], rate)
    want = pipes["asr"](str(path), return_timestamps=True)
    with open(path, "rb") as f:
        text = client.audio.transcriptions.create(model=models["asr"], file=f)
    assert text.text == pipes["asr"](str(path))["text"]
    with open(path, "rb") as f:
        verbose = client.audio.transcriptions.create(model=models["asr"], file=f, response_format="verbose_json",
                                                     timestamp_granularities=["segment"])
    assert [(s.start, s.end, s.text) for s in verbose.segments] == [(*c["timestamp"], c["text"]) for c in want["chunks"]]
    assert verbose.duration == pytest.approx(6.0)
    with open(path, "rb") as f:
        srt = client.audio.transcriptions.create(model=models["asr"], file=f, response_format="srt")
    assert srt.count("-->") == len(want["chunks"])


# ---------------------------------------------------------------- the other endpoints
def test_rerank_equals_the_pipeline(server, models, pipes):
    documents = ["Berlin has 3.5M people.", "NYC is big.", "A cat."]
    answer = post(server, "/v1/rerank", json={"model": models["rerank"], "query": "Who lives in Berlin?",
                                              "documents": documents, "top_n": 2, "return_documents": True}).json()
    want = pipes["rerank"]({"query": "Who lives in Berlin?", "documents": documents})["results"][:2]
    assert [r["index"] for r in answer["results"]] == [w["index"] for w in want]
    for r, w in zip(answer["results"], want):
        assert r["relevance_score"] == pytest.approx(w["score"], abs=1e-6)
        assert r["document"]["text"] == documents[w["index"]]


def test_pipelines_endpoint_json_and_multipart(server, models, pipes):
    from PIL import Image

    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    png = buffer.getvalue()
    want = pipes["vit"](image, top_k=3)
    as_json = post(server, "/v1/pipelines/image-classification",
                   json={"inputs": base64.b64encode(png).decode(), "parameters": {"top_k": 3}}).json()
    assert [p["label"] for p in as_json["outputs"]["predictions"]] == [p["label"] for p in want["predictions"]]
    np.testing.assert_allclose([p["score"] for p in as_json["outputs"]["predictions"]],
                               [p["score"] for p in want["predictions"]], atol=1e-6)
    multipart = post(server, "/v1/pipelines/image-classification",
                     files={"inputs": ("a.png", png, "image/png")}, data={"parameters": json.dumps({"top_k": 3})})
    assert multipart.json()["outputs"] == as_json["outputs"]
    # a path is not read: media come as data, never as a file name the server would open
    refused = post(server, "/v1/pipelines/image-classification", json={"inputs": "/etc/passwd"})
    assert refused.status_code == 400 and "base64" in refused.json()["error"]["message"]
    # speech out: a base64 WAV with the pipeline's samples
    speech = post(server, "/v1/pipelines/text-to-speech",
                  json={"inputs": {"text": "hello there", "seed": 3}}).json()["outputs"]
    import soundfile

    samples, rate = soundfile.read(io.BytesIO(base64.b64decode(speech["audio"]["base64"])), dtype="float32")
    reference = pipes["tts"]({"text": "hello there", "seed": 3})
    assert rate == reference["sampling_rate"]
    np.testing.assert_allclose(samples, reference["audio"], atol=1e-6)


# ---------------------------------------------------------------- bad requests
def test_bad_requests_get_named_errors(server, models):
    def error(response, status):
        assert response.status_code == status, response.text
        return response.json()["error"]["message"]

    assert "API key" in error(httpx.get(f"{server}/v1/models"), 401)
    assert "API key" in error(httpx.get(f"{server}/v1/models", headers={"Authorization": "Bearer nope"}), 401)
    assert httpx.get(f"{server}/health").status_code == 200  # the health check needs no key
    assert "not valid JSON" in error(post(server, "/v1/embeddings", content=b"{oops"), 400)
    assert "max_tokens must be an integer" in error(post(server, "/v1/chat/completions", json={
        "model": models["chat"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": "8"}), 400)
    assert "max_tokens must be between" in error(post(server, "/v1/completions", json={
        "model": models["chat"], "prompt": "hi", "max_tokens": 10**6}), 400)
    assert "messages must be" in error(post(server, "/v1/chat/completions", json={"model": models["chat"],
                                                                                "messages": "hi"}), 400)
    assert "is not served here" in error(post(server, "/v1/embeddings", json={"model": "nope", "input": "x"}), 404)
    assert "needs a model of" in error(post(server, "/v1/embeddings", json={"model": models["chat"],
                                                                           "input": "x"}), 400)
    assert "limit" in error(post(server, "/v1/embeddings", content=b"x" * (4 * 2**20 + 1)), 413)
    assert "no route" in error(post(server, "/v2/nothing", json={}), 404)
    assert "unknown task" in error(post(server, "/v1/pipelines/juggling", json={"inputs": "x"}), 404).lower()
    assert "n > 1 needs sampling" in error(post(server, "/v1/completions", json={
        "model": models["chat"], "prompt": "hi", "n": 2, "temperature": 0}), 400)


def test_a_full_queue_answers_429_with_retry_after():
    release = threading.Event()

    def slow(items):
        release.wait(30)
        return items

    served = ServedModel("slow", "text-classification", tm.Serving(slow), max_queue=1)
    with running_server(ModelRegistry([served])) as url:
        first = threading.Thread(target=httpx.post, args=(f"{url}/v1/pipelines/text-classification",),
                                 kwargs={"json": {"inputs": "a"}, "timeout": 60})
        first.start()
        while served.queue_depth < 1:
            threading.Event().wait(0.01)
        second = httpx.post(f"{url}/v1/pipelines/text-classification", json={"inputs": "b"}, timeout=60)
        release.set()
        first.join(60)
    assert second.status_code == 429
    assert second.headers["retry-after"] == "1"
    assert "--max-queue 1" in second.json()["error"]["message"]


def test_a_chat_template_reaching_python_internals_is_refused(tmp_path, models):
    import shutil

    folder = tmp_path / "evil"
    shutil.copytree(models["chat"], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    served = ServedModel("evil", "text-generation", tm.Serving(tm.pipeline("text-generation", str(folder))))
    with running_server(ModelRegistry([served])) as url:
        response = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
            "model": "evil", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert response.status_code == 400
    assert "chat template" in response.json()["error"]["message"] and "unsafe" in response.json()["error"]["message"]


def test_a_client_leaving_a_stream_frees_its_place(server, models):
    served_depth = None
    with httpx.stream("POST", f"{server}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": models["chat"], "messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": 200, "temperature": 0, "stream": True}, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and '"content"' in line:
                break  # leave after the first piece
    metrics = ""
    for _ in range(200):
        metrics = httpx.get(f"{server}/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
        line = next(x for x in metrics.splitlines() if x.startswith("transmuter_queue_depth{")
                    and models["chat"] in x)
        served_depth = float(line.rsplit(" ", 1)[1])
        if served_depth == 0:
            break
        threading.Event().wait(0.05)
    assert served_depth == 0
    assert "transmuter_generated_tokens_total" in metrics and "transmuter_batches_total" in metrics


def test_a_request_past_the_time_limit_gets_504():
    release = threading.Event()
    served = ServedModel("slow", "text-classification", tm.Serving(lambda items: (release.wait(30), items)[1]))
    with running_server(ModelRegistry([served]), ServerSettings(request_timeout_s=0.3)) as url:
        response = httpx.post(f"{url}/v1/pipelines/text-classification", json={"inputs": "a"}, timeout=60)
        release.set()
    assert response.status_code == 504
    assert "--request-timeout" in response.json()["error"]["message"]
