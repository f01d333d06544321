"""The HTTP server: an ASGI app (Starlette) in front of a :class:`ModelRegistry`.

>>> from starlette.testclient import TestClient
>>> import transmuter_mlx as tm
>>> from transmuter_mlx.server import ModelRegistry, ServedModel, create_app
>>> echo = ServedModel("echo", "text-classification", tm.Serving(lambda xs: [{"label": x} for x in xs]))
>>> with TestClient(create_app(ModelRegistry([echo]))) as client:
...     client.get("/health").json()["status"], client.get("/v1/models").json()["data"][0]["id"]
('ok', 'echo')

Endpoints (docs/serving.md): ``POST /v1/embeddings``, ``/v1/completions``, ``/v1/chat/completions`` (``stream``
as server-sent events ending with ``data: [DONE]``), ``/v1/rerank``, ``/v1/audio/transcriptions`` (multipart,
as OpenAI's), ``/v1/pipelines/{task}`` (any task, JSON or multipart); ``GET /v1/models``, ``/health``,
``/metrics`` (Prometheus text). Every request but ``/health`` needs the bearer key when one is set; a model's
queue beyond ``max_queue`` answers 429 with ``Retry-After``; errors are OpenAI's JSON shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ..pipelines import TASKS, UnknownTaskError, resolve_task
from .errors import APIError, BadRequest, NotFound, PayloadTooLarge, Timeout, Unauthorized
from .fields import Body, parse_json
from .media import media_input, to_json
from .metrics import Metrics
from .models import ModelRegistry, ServedModel
from .openai_api import (
    chat_input,
    completion_events,
    completion_response,
    embedding_response,
    generation_options,
    rerank_response,
)
from .transcription import transcription_response

__all__ = ["ServerSettings", "create_app"]

GENERATION_TASKS = ("text-generation",)
COMPLETION_TASKS = ("text-generation", "text2text-generation", "translation", "summarization")


@dataclass(frozen=True)
class ServerSettings:
    """Limits and security of a server (the ``serve`` command's flags)."""

    api_key: str | None = None  # a bearer key every request but /health must bring
    max_queue: int = 256  # requests per model admitted and not answered; beyond: 429
    max_request_bytes: int = 32 * 2**20
    max_tokens: int = 4096  # the most max_tokens a request may ask for
    request_timeout_s: float = 600.0  # a request running longer gets 504 (a stream ends)


def create_app(registry: ModelRegistry, settings: ServerSettings | None = None) -> Starlette:
    """The ASGI app serving ``registry``'s models (closed when the app shuts down)."""
    settings = settings or ServerSettings()
    server = _Server(registry, settings, Metrics())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(registry.close)  # in-flight requests are done: uvicorn waited for them

    routes = [
        Route("/health", server.health, methods=["GET"]),
        Route("/v1/models", server.endpoint(server.list_models), methods=["GET"]),
        Route("/metrics", server.endpoint(server.metrics_text), methods=["GET"]),
        Route("/v1/embeddings", server.endpoint(server.embeddings), methods=["POST"]),
        Route("/v1/completions", server.endpoint(server.completions), methods=["POST"]),
        Route("/v1/chat/completions", server.endpoint(server.chat_completions), methods=["POST"]),
        Route("/v1/rerank", server.endpoint(server.rerank), methods=["POST"]),
        Route("/v1/audio/transcriptions", server.endpoint(server.transcriptions), methods=["POST"]),
        Route("/v1/pipelines/{task}", server.endpoint(server.run_pipeline), methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={404: _not_found, 405: _not_allowed})
    app.state.server = server
    return app


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(NotFound(f"no route {request.method} {request.url.path}"))


async def _not_allowed(request: Request, exc: Exception) -> Response:
    error = BadRequest(f"{request.url.path} does not take {request.method}")
    error.status = 405
    return _error(error)


def _error(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


class _Server:
    def __init__(self, registry: ModelRegistry, settings: ServerSettings, metrics: Metrics) -> None:
        self.registry, self.settings, self.metrics = registry, settings, metrics

    # ------------------------------------------------------------------ plumbing
    def endpoint(self, handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` with the key check, the error shapes and the request metrics."""
        async def run(request: Request) -> Response:
            started = time.monotonic()
            request.state.model = ""
            try:
                self.authorize(request)
                response = await handler(request)
            except APIError as error:
                response = _error(error)
            except (ValueError, TypeError) as error:  # a pipeline's word on a bad input or option
                response = _error(BadRequest(str(error)))
            except Exception as error:  # noqa: BLE001 - a failure of one request, answered as such
                response = _error(APIError(f"{type(error).__name__}: {error}"))
            if isinstance(response, StreamingResponse):  # counted when the stream ends (see _sse)
                return response
            self.metrics.request(request.state.model, request.url.path, response.status_code,
                                 time.monotonic() - started)
            return response
        return run

    def authorize(self, request: Request) -> None:
        key = self.settings.api_key
        if not key:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), key.encode()):
            raise Unauthorized("a valid API key is required: Authorization: Bearer <key>")

    async def body_bytes(self, request: Request) -> bytes:
        limit = self.settings.max_request_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"the request body has {declared} bytes; the limit is {limit} (--max-request-bytes)")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"the request body is over {limit} bytes (--max-request-bytes)")
            chunks.append(chunk)
        return b"".join(chunks)

    async def json_body(self, request: Request) -> Body:
        return Body(parse_json(await self.body_bytes(request)))

    def find(self, request: Request, model_id: Any, tasks: tuple[str, ...]) -> ServedModel:
        served = self.registry.find(model_id, tasks, request.url.path)
        request.state.model = served.id
        return served

    async def run(self, served: ServedModel, inputs: Any, **options: Any) -> Any:
        """``served``'s Serving on ``inputs``, within the request time limit."""
        try:
            return await asyncio.wait_for(served.serving.arun(inputs, **options), self.settings.request_timeout_s)
        except TimeoutError:
            raise Timeout(f"the request ran past {self.settings.request_timeout_s:g} s (--request-timeout)") from None

    # ------------------------------------------------------------------ meta
    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "models": len(self.registry.models)})

    async def list_models(self, request: Request) -> Response:
        created = int(time.time())
        return JSONResponse({"object": "list", "data": [
            {"id": m.id, "object": "model", "created": created, "owned_by": "transmuter-mlx", "task": m.task}
            for m in self.registry.models.values()]})

    async def metrics_text(self, request: Request) -> Response:
        gauges = {m.id: m.gauges() for m in self.registry.models.values()}
        return PlainTextResponse(self.metrics.render(gauges), media_type="text/plain; version=0.0.4")

    # ------------------------------------------------------------------ text
    async def embeddings(self, request: Request) -> Response:
        body = await self.json_body(request)
        served = self.find(request, body.raw("model"), ("text-embedding",))
        try:
            texts = body.strings("input", required=True, max_items=2048)
        except BadRequest as error:
            raise BadRequest(f"{error.message}; token arrays are not served: send text", param="input") from None
        encoding = body.string("encoding_format", "float", choices=("float", "base64"))
        dimensions = body.integer("dimensions", minimum=1)
        with served.admit(len(texts)):
            results = await self.run(served, texts)
        tokens = await served.count_tokens(texts)
        return JSONResponse(embedding_response(served.id, [r["embedding"] for r in results], tokens, encoding,
                                               dimensions))

    async def rerank(self, request: Request) -> Response:
        body = await self.json_body(request)
        served = self.find(request, body.raw("model"), ("text-ranking",))
        query = body.string("query", required=True)
        documents = body.strings("documents", required=True, max_items=4096)
        top_n = body.integer("top_n", minimum=1)
        with served.admit():
            result = await self.run(served, {"query": query, "documents": documents})
        tokens = await served.count_tokens([(query, d) for d in documents])
        return JSONResponse(rerank_response(served.id, documents, result["results"], top_n,
                                            bool(body.boolean("return_documents", False)), tokens))

    async def completions(self, request: Request) -> Response:
        body = await self.json_body(request)
        served = self.find(request, body.raw("model"), COMPLETION_TASKS)
        prompts = body.strings("prompt", required=True, max_items=64)
        return await self.complete(body, served, list(prompts), chat=False)

    async def chat_completions(self, request: Request) -> Response:
        body = await self.json_body(request)
        served = self.find(request, body.raw("model"), GENERATION_TASKS)
        return await self.complete(body, served, [chat_input(body)], chat=True)

    async def complete(self, body: Body, served: ServedModel, prompts: list[Any], chat: bool) -> Response:
        options = generation_options(body, max_tokens_limit=self.settings.max_tokens)
        n = body.integer("n", 1)
        max_new = options.get("max_new_tokens")
        if max_new is None:
            max_new = await served.default_max_new_tokens()
        if body.boolean("stream", False):
            if len(prompts) != 1 or n != 1:
                raise BadRequest("stream=true streams one answer: give one prompt and n=1", param="stream")
            include_usage = bool(body.object("stream_options").boolean("include_usage", False))
            return self.stream_completion(served, prompts[0], options, max_new, chat, include_usage)
        if served.task != "text-generation":
            options = {k: v for k, v in options.items() if k != "stop_strings" or v}
        with served.admit(len(prompts)):
            results = await self.run(served, prompts, **options)
        results = [_as_generation(r) for r in results]
        answer = completion_response(served.id, results, max_new, chat, n)
        self.metrics.tokens(served.id, answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"])
        return JSONResponse(answer)

    def stream_completion(self, served: ServedModel, prompt: Any, options: dict[str, Any], max_new: int | None,
                          chat: bool, include_usage: bool) -> Response:
        admission = served.admit()
        admission.__enter__()  # held until the stream ends (released in _sse)
        try:
            chunks = served.serving.run(prompt, stream=True, stream_done=True, **options)
        except BaseException:
            admission.__exit__(None, None, None)
            raise
        tally: dict[str, Any] = {}
        events = completion_events(served.id, chunks, max_new, chat, include_usage, tally)
        path = "/v1/chat/completions" if chat else "/v1/completions"
        return StreamingResponse(self._sse(events, chunks, admission, served, path, tally),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _sse(self, events: AsyncIterator[dict[str, Any]], chunks: Any, admission: Any, served: ServedModel,
                   path: str, tally: dict[str, Any]) -> AsyncIterator[bytes]:
        """Server-sent events, ``data: [DONE]`` last; an error mid-stream is sent as an error event. A client
        that leaves (the task is cancelled) closes the stream, which stops its row."""
        started, status = time.monotonic(), 200
        deadline = started + self.settings.request_timeout_s
        try:
            async for event in events:
                if time.monotonic() > deadline:
                    raise Timeout(f"the stream ran past {self.settings.request_timeout_s:g} s (--request-timeout)")
                yield b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"
        except APIError as error:
            status = error.status
            yield b"data: " + json.dumps(error.body()).encode() + b"\n\n"
        except (ValueError, TypeError) as error:
            status = 400
            yield b"data: " + json.dumps(BadRequest(str(error)).body()).encode() + b"\n\n"
        except asyncio.CancelledError:
            status = 499  # the client left
            raise
        except Exception as error:  # noqa: BLE001
            status = 500
            yield b"data: " + json.dumps(APIError(f"{type(error).__name__}: {error}").body()).encode() + b"\n\n"
        finally:
            chunks.close()
            admission.__exit__(None, None, None)
            self.metrics.request(served.id, path, status, time.monotonic() - started)
            summary = tally.get("summary", {})
            self.metrics.tokens(served.id, summary.get("input", 0), summary.get("output", 0))

    # ------------------------------------------------------------------ audio
    async def transcriptions(self, request: Request) -> Response:
        form = await self.form(request)
        model_id = form.get("model")
        served = self.find(request, model_id if isinstance(model_id, str) else None,
                           ("automatic-speech-recognition",))
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise BadRequest("file is required: the audio file, as a multipart upload", param="file")
        audio = await upload.read()
        fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
        granularities = [v for k, v in form.multi_items() if k in ("timestamp_granularities[]",
                                                                    "timestamp_granularities")]
        with served.admit():
            return await transcription_response(self, served, audio, fields, granularities)

    async def form(self, request: Request) -> Any:
        declared = request.headers.get("content-length")
        limit = self.settings.max_request_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"the request body has {declared} bytes; the limit is {limit} (--max-request-bytes)")
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise BadRequest("expected a multipart/form-data body")
        try:
            return await request.form(max_part_size=limit)
        except Exception as error:  # noqa: BLE001 - the multipart parser's word on a bad body
            raise BadRequest(f"the multipart body cannot be read: {error}") from None

    # ------------------------------------------------------------------ any task
    async def run_pipeline(self, request: Request) -> Response:
        try:
            task = resolve_task(request.path_params["task"])
        except UnknownTaskError as error:
            raise NotFound(str(error)) from None
        modality = TASKS[task].modality
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            form = await self.form(request)
            files = [await f.read() for k, f in form.multi_items() if k == "inputs" and not isinstance(f, str)]
            texts = [v for k, v in form.multi_items() if k == "inputs" and isinstance(v, str)]
            parameters = parse_json(str(form.get("parameters") or "{}").encode())
            model_id = form.get("model")
            inputs: Any = (files or texts) if len(files or texts) != 1 else (files or texts)[0]
            if not files and modality in ("image", "audio"):
                inputs = [media_input(t, modality, f"inputs[{i}]") for i, t in enumerate(texts)]
                inputs = inputs[0] if len(inputs) == 1 else inputs
        else:
            body = await self.json_body(request)
            model_id = body.raw("model")
            inputs = body.required("inputs")
            parameters = body.object("parameters").data
            if modality in ("image", "audio"):
                inputs = ([media_input(x, modality, f"inputs[{i}]") for i, x in enumerate(inputs)]
                          if isinstance(inputs, list) else media_input(inputs, modality, "inputs"))
        served = self.find(request, model_id, (task,))
        if "stream" in parameters:
            raise BadRequest("parameters.stream: /v1/pipelines answers whole results; stream with "
                             "/v1/chat/completions or /v1/completions", param="parameters.stream")
        count = len(inputs) if isinstance(inputs, list) else 1
        with served.admit(count):
            result = await self.run(served, inputs, **parameters)
        return JSONResponse({"model": served.id, "task": task, "outputs": to_json(result)})


def _as_generation(result: Any) -> dict[str, Any]:
    """A text-to-text pipeline's result in text-generation's shape (``results``: text and token_summary)."""
    if isinstance(result, dict) and "results" in result:
        return result
    raise APIError(f"unexpected pipeline result {type(result).__name__}")
