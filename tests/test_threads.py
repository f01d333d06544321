"""A process whose own threads ran an mlx model exits cleanly (MLX's per-thread streams are released
when each thread ends: ``converters/backends/threads.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import sys, threading
import transmuter_mlx as tm
import transmuter_mlx.converters.backends.mlx as mlx_backend
if sys.argv[2] == "untracked":
    mlx_backend.track_thread = lambda: None
pipe = tm.text.generation(sys.argv[1], max_new_tokens=4)
out = []
threads = [threading.Thread(target=lambda: out.append(pipe("hello"))) for _ in range(int(sys.argv[3]))]
for t in threads:
    t.start()
for t in threads:
    t.join()
if sys.argv[4] == "main":
    out.append(pipe("and the main thread"))
print(len(out))
"""


def _run(folder: Path, mode: str, threads: int = 1, main: str = "-") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(folder), mode, str(threads), main], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def folder() -> Path:
    from tests.fixtures.generation_models import build

    return build("qwen2")


def test_threads_that_ran_a_model_exit_cleanly(folder):
    for threads, main, results in [(1, "-", 1), (1, "-", 1), (1, "-", 1), (3, "main", 4)]:
        done = _run(folder, "tracked", threads, main)  # the abort is a race: 4 of 6 runs without the release
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == str(results) and "terminate called" not in done.stderr


def test_without_the_release_the_process_can_abort(folder):
    """The reference for the test above: MLX 0.32 aborts such a process at exit without the release."""
    codes = [_run(folder, "untracked").returncode for _ in range(6)]
    if all(c == 0 for c in codes):
        pytest.skip("this MLX build exits cleanly without the release")
    assert any(c != 0 for c in codes)


OPENMP_POOL = """
import os, sys, time
import transmuter_mlx as tm
from transmuter_mlx.converters.backends.threads import release_openmp_pool
before_torch = release_openmp_pool()  # nothing to ask yet, and nothing remembered of that
import torch

def threads():
    return len(os.listdir("/proc/self/task"))

def settle(limit):
    # a released pool's threads end on their own, moments after the call
    deadline = time.monotonic() + 5
    while threads() > limit and time.monotonic() < deadline:
        time.sleep(0.01)
    return threads()

torch.set_num_threads(4)
before = threads()
torch.rand(1 << 22).exp()  # one parallel region: the main thread's pool (3 workers) stays behind
with_pool = threads()
if sys.argv[1] == "release":
    print(f"{before_torch}-{release_openmp_pool()}", with_pool - before, settle(before) - before)
elif sys.argv[1] == "stream":
    import threading
    from transmuter_mlx.generation.chunks import run_streamed

    go = threading.Event()
    chunks = run_streamed("text-generation", lambda sink: (go.wait(), sink("hi"))[1])
    counted = settle(before + 1) - before
    go.set()
    print("".join(chunks), with_pool - before, counted)
else:
    serving = tm.Serving(lambda xs: [x * 2 for x in xs])
    print(serving.run(21), with_pool - before, settle(before + 1) - before)
    serving.close()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="torch's GNU OpenMP pools per thread are Linux's")
@pytest.mark.parametrize("how", ["release", "serving", "stream"])
def test_a_thread_that_hands_over_its_model_frees_its_openmp_pool(how):
    """libgomp keeps an idle pool for each thread that ran torch ops; two pools outnumber the cores and make a
    worker's every parallel region sleep and wake (3-4x slower small ops). Serving and a streamed call drop their
    caller's pool."""
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-c", OPENMP_POOL, how], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    first, pool, after = done.stdout.split()
    assert first == {"release": "False-True", "serving": "42", "stream": "hi"}[how]
    assert int(pool) == 3  # the reference: libgomp's team of 4 is the main thread and 3 pool threads
    assert int(after) == (0 if how == "release" else 1)  # the pool is gone; the one worker remains
