"""The server's counters, rendered in Prometheus' text format at ``GET /metrics``.

>>> m = Metrics()
>>> m.request("tiny", "/v1/embeddings", 200, 0.02)
>>> m.tokens("tiny", prompt=5, generated=7)
>>> text = m.render({"tiny": {"queue_depth": 0, "batches": 1, "batch_inputs": 1}})
>>> 'transmuter_requests_total{model="tiny",endpoint="/v1/embeddings",status="200"} 1' in text
True
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import defaultdict, deque
from collections.abc import Mapping

__all__ = ["Metrics"]

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf"))
RATE_WINDOW_S = 60.0  # tokens/s is measured over the last minute


def _labels(**labels: str) -> str:
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Thread-safe counters of requests, latencies and tokens; ``render(models)`` adds each model's live
    gauges (queue depth, batches run and the inputs they held)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self._latency: dict[str, list[int]] = defaultdict(lambda: [0] * len(BUCKETS))
        self._latency_sum: dict[str, float] = defaultdict(float)
        self._prompt: dict[str, int] = defaultdict(int)
        self._generated: dict[str, int] = defaultdict(int)
        self._recent: dict[str, deque[tuple[float, int]]] = defaultdict(deque)

    def request(self, model: str, endpoint: str, status: int, seconds: float) -> None:
        with self._lock:
            self._requests[(model, endpoint, status)] += 1
            self._latency[endpoint][bisect.bisect_left(BUCKETS, seconds)] += 1
            self._latency_sum[endpoint] += seconds

    def tokens(self, model: str, prompt: int = 0, generated: int = 0) -> None:
        with self._lock:
            self._prompt[model] += prompt
            self._generated[model] += generated
            if generated:
                self._recent[model].append((time.monotonic(), generated))

    def tokens_per_second(self, model: str) -> float:
        """Generated tokens per second over the last :data:`RATE_WINDOW_S` seconds."""
        now = time.monotonic()
        with self._lock:
            recent = self._recent[model]
            while recent and recent[0][0] < now - RATE_WINDOW_S:
                recent.popleft()
            return sum(n for _, n in recent) / RATE_WINDOW_S

    def render(self, models: Mapping[str, Mapping[str, float]]) -> str:
        """The Prometheus text exposition; ``models``: each model's gauges (queue_depth, batches, batch_inputs)."""
        out: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")

        with self._lock:
            family("transmuter_requests_total", "counter", "Requests answered, by model, endpoint and HTTP status.")
            for (model, endpoint, status), n in sorted(self._requests.items()):
                out.append(f"transmuter_requests_total{_labels(model=model, endpoint=endpoint, status=status)} {n}")
            family("transmuter_request_duration_seconds", "histogram", "Time from request to last byte.")
            for endpoint, counts in sorted(self._latency.items()):
                total = 0
                for bound, n in zip(BUCKETS, counts):
                    total += n
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    out.append(f"transmuter_request_duration_seconds_bucket{_labels(endpoint=endpoint, le=le)} {total}")
                out.append(f"transmuter_request_duration_seconds_sum{_labels(endpoint=endpoint)} "
                           f"{self._latency_sum[endpoint]:.6f}")
                out.append(f"transmuter_request_duration_seconds_count{_labels(endpoint=endpoint)} {total}")
            family("transmuter_prompt_tokens_total", "counter", "Prompt tokens of generation requests.")
            for model, n in sorted(self._prompt.items()):
                out.append(f"transmuter_prompt_tokens_total{_labels(model=model)} {n}")
            family("transmuter_generated_tokens_total", "counter", "Tokens generated.")
            for model, n in sorted(self._generated.items()):
                out.append(f"transmuter_generated_tokens_total{_labels(model=model)} {n}")
        family("transmuter_generated_tokens_per_second", "gauge", f"Tokens generated per second over the last "
               f"{RATE_WINDOW_S:g} s.")
        for model in sorted(models):
            out.append(f"transmuter_generated_tokens_per_second{_labels(model=model)} "
                       f"{self.tokens_per_second(model):.3f}")
        gauges = (("queue_depth", "gauge", "Requests admitted and not yet answered."),
                  ("batches", "counter", "Model calls on gathered inputs (batches)."),
                  ("batch_inputs", "counter", "Inputs those batches held (their mean size: batch_inputs / batches)."))
        for key, kind, help_text in gauges:
            name = f"transmuter_{key}" + ("_total" if kind == "counter" else "")
            family(name, kind, help_text)
            for model, values in sorted(models.items()):
                out.append(f"{name}{_labels(model=model)} {values.get(key, 0):g}")
        return "\n".join(out) + "\n"
