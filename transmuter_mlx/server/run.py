"""``python -m transmuter_mlx serve TASK=MODEL [TASK=MODEL ...]``: the server under uvicorn.

>>> build_parser().parse_args(["text-embedding=m", "--port", "9000"]).port
9000

It binds to 127.0.0.1 unless ``--host`` says otherwise. ``--api-key`` (or the ``TRANSMUTER_MLX_API_KEY``
environment variable) makes every request but ``/health`` bring ``Authorization: Bearer <key>``. On SIGTERM
or Ctrl-C it stops accepting connections, finishes the requests in flight (up to ``--graceful-timeout``
seconds), closes the models and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from .app import ServerSettings, create_app
from .models import ModelRegistry, parse_model_specs

__all__ = ["API_KEY_ENV", "build_parser", "main", "serve"]

API_KEY_ENV = "TRANSMUTER_MLX_API_KEY"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m transmuter_mlx serve",
                                description="Serve pipelines over an OpenAI-compatible HTTP API.")
    p.add_argument("models", nargs="+", metavar="TASK=MODEL",
                   help="a task (or alias) and a repo id or folder; the MODEL string is the model's id in requests")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", help=f"bearer key for every request but /health (or ${API_KEY_ENV})")
    p.add_argument("--max-queue", type=int, default=256, help="requests per model waiting or running; beyond: 429")
    p.add_argument("--max-request-bytes", type=int, default=32 * 2**20)
    p.add_argument("--max-tokens", type=int, default=4096, help="the most max_tokens a request may ask")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds before a request gets 504")
    p.add_argument("--graceful-timeout", type=float, default=30.0,
                   help="seconds to finish in-flight requests after SIGTERM")
    p.add_argument("--batch-size", type=int, help="rows per compiled batch (each model's compile.batch_size)")
    p.add_argument("--batch-timeout-ms", type=float, default=10.0, help="how long a batch waits to fill")
    p.add_argument("--no-continuous-batching", action="store_true",
                   help="text generation runs batch at a time (new requests wait for the running batch to end)")
    p.add_argument("--backend", default="mlx", choices=("mlx", "torch"))
    p.add_argument("--offline", action="store_true", help="use only the Hugging Face cache")
    p.add_argument("--log-level", default="warning")
    return p


def serve(models: Sequence[str], *, host: str = "127.0.0.1", port: int = 8000, settings: ServerSettings | None = None,
          pipeline_options: dict[str, Any] | None = None, batch_timeout_ms: float = 10.0,
          graceful_timeout: float = 30.0, log_level: str = "warning", continuous: bool = True) -> None:
    """Load ``models`` (``TASK=MODEL`` strings) and serve them until SIGTERM/SIGINT."""
    import uvicorn

    settings = settings or ServerSettings()
    registry = ModelRegistry.load(parse_model_specs(models), max_queue=settings.max_queue,
                                  batch_timeout_ms=batch_timeout_ms, options=pipeline_options,
                                  continuous=continuous)
    app = create_app(registry, settings)
    print(f"serving {', '.join(registry.models)} on http://{host}:{port}", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, backlog=4096,
                            timeout_graceful_shutdown=graceful_timeout)
    _graceful_server(config).run()


def _graceful_server(config: Any) -> Any:
    """A uvicorn server whose SIGTERM/SIGINT shutdown exits 0 (see ``GracefulServer``)."""
    import uvicorn

    class GracefulServer(uvicorn.Server):
        """uvicorn's server, but a SIGTERM/SIGINT after its graceful shutdown ends the process with 0: uvicorn
        raises the signal again once it is done (exit status 143), and a server that finished its requests
        and closed its models has ended normally."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return GracefulServer(config)


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    options: dict[str, Any] = {"backend": args.backend}
    if args.batch_size:
        options["compile"] = {"batch_size": args.batch_size}
    if args.offline:
        options["offline"] = True
    settings = ServerSettings(api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
                              max_queue=args.max_queue, max_request_bytes=args.max_request_bytes,
                              max_tokens=args.max_tokens, request_timeout_s=args.request_timeout)
    try:
        serve(args.models, host=args.host, port=args.port, settings=settings, pipeline_options=options,
              batch_timeout_ms=args.batch_timeout_ms, graceful_timeout=args.graceful_timeout,
              log_level=args.log_level, continuous=not args.no_continuous_batching)
    except (ValueError, TypeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
