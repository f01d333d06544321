"""Ray Serve: any pipeline as a deployment with N replicas, and the OpenAI app as their ingress.

    import ray
    from ray import serve
    from transmuter_mlx.server.ray_serve import openai_app, pipeline_app

    ray.init()
    serve.start(http_options={"host": "127.0.0.1", "port": 8000})
    serve.run(openai_app(["text-embedding=Xenova/all-MiniLM-L6-v2"], num_replicas=2), route_prefix="/")
    # the same endpoints as `python -m transmuter_mlx serve`, each model on 2 replicas

    handle = serve.run(pipeline_app("text-classification", "Xenova/distilbert-base-uncased-finetuned-sst-2-english"),
                       name="sst2", route_prefix=None)
    handle.run.remote("I love this", {}).result()       # {"predictions": [...]}

A replica (:class:`PipelineDeployment`) builds the pipeline once, gathers its callers with ``@serve.batch``
and hands them to the same batcher as the one-machine server (``batcher_for``: text generation continuously
batched, other tasks through ``tm.Serving``). The ingress (:class:`OpenAIIngress`) is the Starlette app of
``create_app``, its models answering through deployment handles. Replicas take no CPU reservation
(``num_cpus=0``): on a small machine Ray would otherwise wait for CPUs that an ingress and N replicas
cannot all get; ``max_ongoing_requests`` is raised so that a replica sees enough callers to batch.
``ray[serve]`` is the ``ray`` extra; docs/serving.md shows a cluster.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from ray import serve

from ..pipelines import pipeline
from ..serving import ServingStats
from .app import ServerSettings, create_app
from .models import ModelRegistry, ServedModel, batcher_for, count_tokens, parse_model_specs

__all__ = ["OpenAIIngress", "PipelineDeployment", "openai_app", "pipeline_app"]

MAX_ONGOING = 1024  # requests a replica holds at once (Ray's default of 5 would starve its batches)


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=MAX_ONGOING)
class PipelineDeployment:
    """One pipeline per replica; ``run(inputs, options)`` and ``stream(item, options)`` are its calls."""

    def __init__(self, task: str, model: str, pipeline_options: Mapping[str, Any] | None = None,
                 continuous: bool = True, batch_timeout_ms: float = 10.0) -> None:
        self.pipe = pipeline(task, model, **dict(pipeline_options or {}))
        self.batcher = batcher_for(self.pipe, batch_timeout_ms, continuous)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def _gathered(self, calls: list[tuple[Any, dict[str, Any]]]) -> list[tuple[bool, Any]]:
        """The callers of a moment, handed to the batcher together (it batches those with equal options);
        each gets its own result or its own error."""
        results = await asyncio.gather(*(self.batcher.arun(inputs, **options) for inputs, options in calls),
                                       return_exceptions=True)
        return [(not isinstance(r, BaseException), r) for r in results]

    async def run(self, inputs: Any, options: Mapping[str, Any] | None = None) -> Any:
        ok, result = await self._gathered((inputs, dict(options or {})))
        if not ok:
            raise result
        return result

    async def stream(self, item: Any, options: Mapping[str, Any] | None = None) -> AsyncIterator[Any]:
        """The text pieces of one generation (then ``("done", {"token_summary": ...})`` under ``stream_done``)."""
        chunks = self.batcher.run(item, stream=True, **dict(options or {}))
        try:
            async for piece in chunks:
                yield piece
        finally:
            chunks.close()  # a caller that left (its generator cancelled) frees the row

    async def count_tokens(self, texts: list[Any]) -> int:
        return count_tokens(self.pipe, texts)

    def info(self) -> dict[str, Any]:
        """What the ingress reads besides results: the default new tokens, a speech model's rate."""
        recognizer = getattr(self.pipe, "recognizer", None)
        return {"max_new_tokens": getattr(getattr(self.pipe, "generation", None), "max_new_tokens", None),
                "sampling_rate": getattr(recognizer, "sampling_rate", None)}

    def stats(self) -> dict[str, int]:
        s = self.batcher.stats
        return {"batches": s.batches, "inputs": s.inputs, "errors": s.errors}


class _RemoteStream:
    """A replica's stream seen from the ingress: async pieces; ``close()`` cancels it there."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator

    def __aiter__(self) -> _RemoteStream:
        return self

    async def __anext__(self) -> Any:
        return await self.generator.__anext__()

    def close(self) -> None:
        self.generator.cancel()


class _RemoteBatcher:
    """The batcher interface the endpoints use (``arun``, ``run(..., stream=True)``), over a deployment handle."""

    pipe = None

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.calls = 0

    async def arun(self, inputs: Any, **options: Any) -> Any:
        self.calls += 1
        return await self.handle.run.remote(inputs, options)

    def run(self, inputs: Any, *, stream: bool = False, **options: Any) -> Any:
        if not stream:
            raise ValueError("the ingress calls replicas with arun")
        self.calls += 1
        return _RemoteStream(self.handle.options(stream=True).stream.remote(inputs, options))

    @property
    def stats(self) -> ServingStats:
        return ServingStats(batches=self.calls, inputs=self.calls)  # the ingress's calls; replicas batch them

    def close(self) -> None:
        """The replicas belong to Ray Serve: they stop with the application."""


class _RemoteModel(ServedModel):
    """A served model whose pipeline lives in a deployment's replicas."""

    _info: dict[str, Any] | None = None

    async def _about(self) -> dict[str, Any]:
        if self._info is None:
            self._info = await self.serving.handle.info.remote()
        return self._info

    async def count_tokens(self, texts: list[Any]) -> int:
        return await self.serving.handle.count_tokens.remote(texts)

    async def default_max_new_tokens(self) -> int | None:
        return (await self._about())["max_new_tokens"]

    async def sampling_rate(self) -> int:
        return int((await self._about())["sampling_rate"])


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=4 * MAX_ONGOING)
@serve.ingress()
class OpenAIIngress:
    """The OpenAI-compatible app of ``create_app`` in front of the models' deployments."""

    def __init__(self, models: Sequence[tuple[str, str]], handles: Mapping[str, Any],
                 settings: Mapping[str, Any] | None = None) -> None:
        self.registry = ModelRegistry([
            _RemoteModel(model, task, _RemoteBatcher(handles[model]), max_queue=(settings or {}).get("max_queue", 256))
            for task, model in models])
        self.settings = ServerSettings(**dict(settings or {}))

    def __serve_build_asgi_app__(self) -> Any:
        return create_app(self.registry, self.settings)


def _deployment_name(task: str, model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", f"{task}_{model}")[-100:]


def pipeline_app(task: str, model: str, *, num_replicas: int = 2, pipeline_options: Mapping[str, Any] | None = None,
                 continuous: bool = True, name: str | None = None) -> Any:
    """A Ray Serve application of one pipeline (call it through its handle: ``run``, ``stream``)."""
    return PipelineDeployment.options(name=name or _deployment_name(task, model), num_replicas=num_replicas).bind(
        task, model, dict(pipeline_options or {}), continuous)


def openai_app(models: Sequence[str], *, num_replicas: int = 2, settings: ServerSettings | None = None,
               pipeline_options: Mapping[str, Any] | None = None, continuous: bool = True) -> Any:
    """The OpenAI-compatible server as a Ray Serve application: ``models`` are ``TASK=MODEL`` strings, each a
    deployment of ``num_replicas`` replicas behind one ingress."""
    pairs = parse_model_specs(models)
    handles = {model: pipeline_app(task, model, num_replicas=num_replicas, pipeline_options=pipeline_options,
                                   continuous=continuous) for task, model in pairs}
    fields = {} if settings is None else json.loads(json.dumps(settings.__dict__))
    return OpenAIIngress.bind(pairs, handles, fields)
