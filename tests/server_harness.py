"""A transmuter-mlx server on a free loopback port in a background thread (or waited for as a process), for the
server tests and benchmarks/serving.py."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from transmuter_mlx.server import ModelRegistry, ServerSettings, create_app


def wait_healthy(url: str, process: subprocess.Popen | None = None, seconds: float = 180) -> None:
    """Until ``url``'s ``/health`` answers 200 (a RuntimeError when ``process`` exits or time runs out)."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no server answered at {url}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_server(registry: ModelRegistry, settings: ServerSettings | None = None) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT``) of uvicorn serving ``registry`` until the block ends."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(create_app(registry, settings), host="127.0.0.1", port=port, log_level="error",
                            backlog=2048, timeout_graceful_shutdown=10)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
