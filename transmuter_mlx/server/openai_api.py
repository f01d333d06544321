"""The OpenAI-shaped endpoints: what a request's fields mean for our pipelines, and the shape of their
answers (``/v1/embeddings``, ``/v1/completions``, ``/v1/chat/completions``, ``/v1/rerank``,
``/v1/audio/transcriptions``).

>>> generation_options(Body({"max_tokens": 8, "temperature": 0, "stop": "."}), max_tokens_limit=64)
{'max_new_tokens': 8, 'do_sample': False, 'stop_strings': ['.']}

Sampling: ``temperature`` 0 is greedy, above 0 samples at that temperature (``top_p`` with it); without
either, the model's generation_config.json decides, as in the pipeline. ``seed`` makes a sampled answer
repeatable. ``n`` answers per prompt need sampling. A ``stop`` string ends the text and stays in it (as
transformers' ``stop_strings``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import numpy as np

from .errors import BadRequest
from .fields import Body

__all__ = ["chat_input", "completion_choice", "embedding_response", "finish_reason", "generation_options",
           "rerank_response", "usage"]

MAX_STOP_STRINGS = 4  # as OpenAI's API


def generation_options(body: Body, *, max_tokens_limit: int) -> dict[str, Any]:
    """The pipeline options of a completion request's sampling fields."""
    body.refuse("logprobs", "top_logprobs", "logit_bias", "tools", "functions", "response_format",
                why="this server returns text only")
    body.refuse("suffix", "best_of", "echo", why="not served by this server")
    options: dict[str, Any] = {}
    max_tokens = body.integer("max_completion_tokens", minimum=1, maximum=max_tokens_limit)
    max_tokens = body.integer("max_tokens", max_tokens, minimum=1, maximum=max_tokens_limit)
    if max_tokens is not None:
        options["max_new_tokens"] = max_tokens
    temperature = body.number("temperature", minimum=0.0, maximum=2.0)
    top_p = body.number("top_p", minimum=0.0, maximum=1.0)
    if temperature is not None:
        options["do_sample"] = temperature > 0
        if temperature > 0:
            options["temperature"] = temperature
    if top_p is not None:
        if top_p <= 0:
            raise BadRequest("top_p must be above 0", param="top_p")
        options["top_p"] = top_p
        options.setdefault("do_sample", True)
    seed = body.integer("seed", minimum=0)
    if seed is not None:
        options["seed"] = seed
    stop = body.strings("stop", max_items=MAX_STOP_STRINGS)
    if stop:
        if any(s == "" for s in stop):
            raise BadRequest("stop strings must not be empty", param="stop")
        options["stop_strings"] = stop
    n = body.integer("n", 1, minimum=1, maximum=16)
    if n > 1:
        if options.get("do_sample") is False:
            raise BadRequest("n > 1 needs sampling (temperature above 0): greedy answers would all be the same",
                             param="n")
        options["do_sample"] = True
        options["num_return_sequences"] = n
    for name in ("presence_penalty", "frequency_penalty"):
        if body.number(name, 0.0, minimum=-2.0, maximum=2.0):
            raise BadRequest(f"{name} is not supported (use repetition_penalty)", param=name)
    penalty = body.number("repetition_penalty", minimum=0.0)
    if penalty is not None:
        options["repetition_penalty"] = penalty
    top_k = body.integer("top_k", minimum=0)
    if top_k is not None:
        options["top_k"] = top_k
    return options


def chat_input(body: Body) -> dict[str, Any]:
    """``{"messages": [...]}`` for the text-generation pipeline (text parts of a message's content joined)."""
    messages = body.required("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty array of {role, content} objects", param="messages")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise BadRequest(f"{where} must be an object with role and content", param=where)
        m = Body(message, f"{where}.")
        role = m.string("role", required=True)
        content = message.get("content")
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise BadRequest(f"{where}.content[{j}]: only text parts ({{\"type\": \"text\", \"text\": ...}}) "
                                     "are served by a text model", param=f"{where}.content")
                texts.append(part["text"])
            content = "".join(texts)
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise BadRequest(f"{where}.content must be a string or an array of text parts", param=f"{where}.content")
        out.append({"role": role, "content": content})
    return {"messages": out}


def finish_reason(summary: Mapping[str, int], max_new_tokens: int | None) -> str:
    """``"length"`` when the answer used all the tokens it was allowed, else ``"stop"``."""
    return "length" if max_new_tokens is not None and summary.get("output", 0) >= max_new_tokens else "stop"


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def completion_choice(index: int, text: str, reason: str, chat: bool) -> dict[str, Any]:
    if chat:
        return {"index": index, "message": {"role": "assistant", "content": text}, "finish_reason": reason,
                "logprobs": None}
    return {"index": index, "text": text, "finish_reason": reason, "logprobs": None}


def completion_response(model: str, results: list[dict[str, Any]], max_new_tokens: int | None, chat: bool,
                        n: int) -> dict[str, Any]:
    """The answer to a (chat) completion request: ``results`` are the pipeline's, one per prompt, each with
    ``n`` texts."""
    choices, prompt_tokens, completion_tokens = [], 0, 0
    for result in results:
        for text in result["results"]:
            summary = text["token_summary"]
            choices.append(completion_choice(len(choices), text["text"], finish_reason(summary, max_new_tokens), chat))
            completion_tokens += summary["output"]
        prompt_tokens += result["results"][0]["token_summary"]["input"]
    return {"id": new_id("chatcmpl" if chat else "cmpl"), "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": choices,
            "usage": usage(prompt_tokens, completion_tokens)}


async def completion_events(model: str, chunks: Any, max_new_tokens: int | None, chat: bool,
                            include_usage: bool, tally: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """The server-sent events of a streamed (chat) completion: its text pieces, then the finish reason, then
    (``include_usage``) the usage; ``chunks`` is the stream (``stream_done=True``) of one prompt. The token
    summary goes to ``tally["summary"]``."""
    ident, created = new_id("chatcmpl" if chat else "cmpl"), int(time.time())
    kind = "chat.completion.chunk" if chat else "text_completion"

    def event(choice: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
        return {"id": ident, "object": kind, "created": created, "model": model,
                "choices": [] if choice is None else [choice], **extra}

    if chat:
        yield event({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})
    summary: dict[str, int] = {}
    async for piece in chunks:
        if isinstance(piece, tuple) and piece[0] == "done":
            summary = tally["summary"] = piece[1]["token_summary"]
            continue
        if piece:
            yield event({"index": 0, "delta": {"content": piece}, "finish_reason": None} if chat
                        else {"index": 0, "text": piece, "finish_reason": None, "logprobs": None})
    reason = finish_reason(summary, max_new_tokens)
    yield event({"index": 0, "delta": {}, "finish_reason": reason} if chat
                else {"index": 0, "text": "", "finish_reason": reason, "logprobs": None})
    if include_usage:
        yield event(None, usage=usage(summary.get("input", 0), summary.get("output", 0)))


def embedding_response(model: str, vectors: list[Any], prompt_tokens: int, encoding: str,
                       dimensions: int | None) -> dict[str, Any]:
    """The ``/v1/embeddings`` answer; ``dimensions`` keeps the first ones, renormalized (Matryoshka models)."""
    import base64

    data = []
    for i, vector in enumerate(vectors):
        v = np.asarray(vector, np.float32)
        if dimensions is not None:
            if dimensions > v.shape[-1]:
                raise BadRequest(f"dimensions={dimensions} is more than the model's {v.shape[-1]}",
                                 param="dimensions")
            v = v[:dimensions]
            v = v / max(float(np.linalg.norm(v)), 1e-12)
        embedding: Any = base64.b64encode(v.astype("<f4").tobytes()).decode() if encoding == "base64" else v.tolist()
        data.append({"object": "embedding", "index": i, "embedding": embedding})
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


def rerank_response(model: str, query_documents: list[str], ranked: list[dict[str, Any]], top_n: int | None,
                    return_documents: bool, prompt_tokens: int) -> dict[str, Any]:
    """The ``/v1/rerank`` answer (llama.cpp's and Jina's shape): documents by relevance, best first."""
    results = []
    for r in ranked[:top_n] if top_n is not None else ranked:
        item: dict[str, Any] = {"index": r["index"], "relevance_score": float(r["score"])}
        if return_documents:
            item["document"] = {"text": query_documents[r["index"]]}
        results.append(item)
    return {"id": new_id("rerank"), "model": model, "object": "list", "results": results,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}
