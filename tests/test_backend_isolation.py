"""Backends stay behind their interface: seeded sampling draws with the backend's own ops (MLX's key
scheme, the same tokens on mlx and torch, the tokens ``mx.random`` itself gave), results hold the
backend's arrays, and the torch path runs with mlx unimportable.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.generation_models import build as build_generation
from tests.fixtures.text_models import build as build_text
from transmuter_mlx.converters.backends import get_backend
from transmuter_mlx.generation.config import GenerationConfig
from transmuter_mlx.generation.loop import generate
from transmuter_mlx.generation.sampling import RowKeys
from transmuter_mlx.generation.sessions import open_session

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
SCORES = (np.random.default_rng(0).standard_normal((3, 100)) * 2).astype(np.float32)


def _mx_walk(seed: int, copy: int, copies: int, scores: np.ndarray, steps: int) -> list[int]:
    """One row's tokens drawn with mx.random itself (the scheme of sampling.py's docstring)."""
    mx = pytest.importorskip("mlx.core")
    key = mx.random.key(seed)
    if copies > 1:
        key = mx.random.split(key, copies)[copy]
    tokens = []
    for _ in range(steps):
        key, sub = mx.random.split(key)
        tokens.append(int(mx.argmax(mx.array(scores) + mx.random.gumbel((scores.shape[-1],), key=sub))))
    return tokens


@pytest.mark.parametrize("backend", ["numpy", "mlx", "torch"])
def test_row_keys_draw_the_tokens_of_mx_random(backend):
    """Each row (seed, copy) draws what mx.random draws, step after step, on every backend: a seed keeps
    the tokens it gave before the draws went through the backend."""
    B = get_backend(backend)
    seeds, copies = [5, 11, 11], [(0, 1), (0, 2), (1, 2)]
    keys = RowKeys(seeds, copies)
    walks = np.stack([keys.sample(B, B.asarray(SCORES)) for _ in range(12)], 1).tolist()
    assert walks == [_mx_walk(s, j, n, SCORES[r], 12) for r, (s, (j, n)) in enumerate(zip(seeds, copies))]


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_picks_stay_on_the_backend_and_rows_alone_match_the_batch(backend):
    B = get_backend(backend)
    alone, batch = RowKeys([11]), RowKeys([3, 11])
    for _ in range(8):
        picked = batch.pick(B, B.asarray(SCORES[:2]))
        assert B.is_array(picked) and B.is_array(batch.keys)  # no trip through the host or another library
        assert int(B.to_numpy(picked)[1]) == int(alone.sample(B, B.asarray(SCORES[1:2]))[0])


@functools.cache
def _model(backend: str):
    import transmuter_mlx as tm

    return tm.load(str(build_generation("gpt2") / "onnx" / "model.onnx"), backend=backend)


def test_seeded_sampling_gives_the_same_tokens_on_mlx_and_torch():
    folder = build_generation("gpt2")
    rng = np.random.default_rng(4)
    prompts = [list(map(int, rng.integers(5, 400, n))) for n in (6, 3, 9)]
    options = dict(do_sample=True, temperature=0.9, top_k=40, max_new_tokens=24, seed=1234, num_return_sequences=2)
    config = GenerationConfig.from_repo(folder).update(**options)
    runs = {b: generate(open_session(_model(b), config.pad_id), prompts, config).sequences for b in ("mlx", "torch")}
    assert runs["mlx"] == runs["torch"] and len({tuple(s) for s in runs["mlx"]}) == 6


NO_MLX = textwrap.dedent("""
    import json, sys
    sys.modules["mlx"] = None  # any import of mlx now fails
    sys.modules["mlx.core"] = None
    import torch
    import transmuter_mlx as tm

    embedding_folder, generation_folder = sys.argv[1:3]
    embedding = tm.text.text_embedding(embedding_folder, backend="torch")("The cat sat on the mat.")["embedding"]
    generate = tm.text.generation(generation_folder, backend="torch", max_new_tokens=8)
    texts = [r["text"] for r in generate(["Hello world", "The"], do_sample=True, seed=3, top_k=20)[0]["results"]]
    loaded = sorted(m for m, v in sys.modules.items() if m.split(".")[0] == "mlx" and v is not None)
    print(json.dumps({"embedding": type(embedding).__module__ + "." + type(embedding).__name__,
                      "shape": list(embedding.shape), "texts": texts, "mlx_modules": loaded}))
""")


def test_torch_path_never_imports_mlx():
    """With mlx unimportable, transmuter_mlx imports, and a torch text embedding and seeded torch
    generation run; the embedding is a torch.Tensor."""
    folders = [str(build_text("bert-embed-mean")), str(build_generation("gpt2"))]
    done = subprocess.run([sys.executable, "-c", NO_MLX, *folders], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mlx_modules"] == []
    assert result["embedding"] == "torch.Tensor" and result["shape"] == [32]
    assert len(result["texts"]) == 1
