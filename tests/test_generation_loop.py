"""The decoding loop on the ONNX generation fixtures (mlx and torch) against transformers' ``generate``
on the fixtures' PyTorch weights: greedy 64 new tokens token for token, alone and in a batch of prompts
of different lengths; beam search through the cache reorder; seeded sampling reproducible across runs
and batch sizes; stop conditions on a toy session. The models run compiled (``mx.compile`` on mlx):
the fixed-buffer sessions compile one signature per prompt chunk length, and each step reuses one.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from transmuter_mlx.converters.backends import get_backend
from transmuter_mlx.generation.config import GenerationConfig
from transmuter_mlx.generation.loop import generate
from transmuter_mlx.generation.sessions import (
    BufferSession,
    CacheLayout,
    GrowSession,
    chunk_sizes,
    open_session,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# (fixture, ONNX file): position_ids exports (left padding) and a merged decoder (grouped by length)
DECODERS = [("gpt2", "model.onnx"), ("gpt2-merged", "decoder_model_merged.onnx"),
            ("llama", "model.onnx"), ("qwen2", "model.onnx")]
PROMPT_LENGTHS = (5, 9, 3, 9)


@functools.cache
def _folder(name: str):
    from tests.fixtures.generation_models import build

    return build(name)


@functools.cache
def _reference(name: str):
    return transformers.AutoModelForCausalLM.from_pretrained(_folder(name)).eval()


@functools.cache
def _model(name: str, file: str, backend: str):
    return _load(name, file, backend)


def _load(name: str, file: str, backend: str = "mlx"):
    import transmuter_mlx as tm

    return tm.load(str(_folder(name) / "onnx" / file), backend=backend)


def _prompts(seed: int = 0, lengths=PROMPT_LENGTHS) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(5, 400, n))) for n in lengths]


def _theirs(name: str, prompt: list[int], **options) -> list[int]:
    return list(_generated(name, tuple(prompt), tuple(sorted(options.items()))))


@functools.cache
def _generated(name: str, prompt: tuple[int, ...], options: tuple) -> tuple[int, ...]:
    with torch.no_grad():
        out = _reference(name).generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                        **dict(options))
    return tuple(out[0, len(prompt):].tolist())


def _run(name: str, file: str, backend: str, prompts, **options):
    config = GenerationConfig.from_repo(_folder(name)).update(**options)
    session = open_session(_model(name, file, backend), config.pad_id)
    return generate(session, prompts, config)


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("name,file", DECODERS)
def test_greedy_matches_generate(name, file, backend):
    prompts = _prompts()
    batch = _run(name, file, backend, prompts, max_new_tokens=64)
    alone = _run(name, file, backend, prompts[:1], max_new_tokens=64)
    theirs = [_theirs(name, p, max_new_tokens=64, do_sample=False) for p in prompts]
    assert alone.sequences[0] == theirs[0]
    assert batch.sequences == theirs
    padded = name != "gpt2-merged"  # the merged decoder groups rows by length instead of padding them
    assert batch.token_summaries == [
        {"input": n, "output": len(t), "padding": (max(PROMPT_LENGTHS) - n) if padded else 0}
        for n, t in zip(PROMPT_LENGTHS, theirs)]


BEAMS = [(3, 0.8, True, 2), (4, 1.5, False, 3), (4, 0.6, "never", 1)]  # beams, length_penalty, early_stopping, returned


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("beams,length_penalty,early_stopping,returned", BEAMS)
@pytest.mark.parametrize("name,file", [("llama", "model.onnx"), ("gpt2-merged", "decoder_model_merged.onnx"),
                                       ("qwen2", "model.onnx")])
def test_beam_search_matches_generate(name, file, beams, length_penalty, early_stopping, returned, backend):
    prompts = _prompts(1, (4, 7))
    options = dict(num_beams=beams, length_penalty=length_penalty, early_stopping=early_stopping,
                   num_return_sequences=returned, max_new_tokens=20)
    ours = _run(name, file, backend, prompts, **options)
    config = GenerationConfig.from_repo(_folder(name))
    fill = config.pad_id if config.pad_id is not None else config.eos_ids[0]
    for i, prompt in enumerate(prompts):
        with torch.no_grad():
            theirs = _reference(name).generate(torch.tensor([prompt]), do_sample=False,
                                               attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                               **options)[:, len(prompt):].tolist()
        mine = ours.sequences[returned * i:returned * (i + 1)]
        assert [s + [fill] * (len(theirs[0]) - len(s)) for s in mine] == theirs


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("name,file", [("llama", "model.onnx"), ("gpt2-merged", "decoder_model_merged.onnx")])
def test_seeded_sampling_is_reproducible_across_batches(name, file, backend):
    prompts = _prompts(2)
    options = dict(do_sample=True, temperature=0.9, top_k=40, top_p=0.95, max_new_tokens=24, seed=1234)
    batch = _run(name, file, backend, prompts, **options).sequences
    assert batch == _run(name, file, backend, prompts, **options).sequences
    assert [_run(name, file, backend, [p], **options).sequences[0] for p in prompts] == batch
    assert _run(name, file, backend, prompts[:1], **{**options, "seed": 99}).sequences[0] != batch[0]
    copied = _run(name, file, backend, prompts[:2], **{**options, "num_return_sequences": 3})
    copies = copied.sequences
    single = _run(name, file, backend, prompts[:2], **options)
    assert [t["padding"] for t in copied.token_summaries] == [t["padding"] for t in single.token_summaries]
    assert len(copies) == 6 and len({tuple(s) for s in copies[:3]}) > 1


def test_cache_layout_from_graph():
    layout = CacheLayout.of(_model("llama", "model.onnx", "mlx"))
    assert layout.names[:2] == ("past_key_values.0.key", "past_key_values.0.value")
    assert (layout.heads, layout.head_dim, layout.position_ids, layout.use_cache_branch) == (2, 16, True, False)
    assert layout.mode == "buffer" and isinstance(open_session(_model("llama", "model.onnx", "mlx")), BufferSession)
    merged = CacheLayout.of(_model("gpt2-merged", "decoder_model_merged.onnx", "mlx"))
    assert (merged.position_ids, merged.use_cache_branch, merged.mode) == (False, True, "grow")
    assert isinstance(open_session(_model("gpt2-merged", "decoder_model_merged.onnx", "mlx")), GrowSession)


def test_chunk_sizes():
    assert [chunk_sizes(n) for n in (1, 2, 3, 9, 16)] == [[1], [2], [2, 1], [8, 1], [16]]
    assert chunk_sizes(1300) == [512, 512, 256, 16, 4]
    assert chunk_sizes(13, 4) == [4, 4, 4, 1]


@pytest.mark.parametrize("name,file", [("llama", "model.onnx"), ("gpt2", "model.onnx"),
                                       ("gpt2-merged", "decoder_model_merged.onnx")])
def test_prompt_chunks_change_nothing(name, file):
    """A 45-token prompt in chunks of 32+8+4+1 or of at most 4 gives the logits of one piece (and the
    tokens of transformers)."""
    prompt = _prompts(3, (45,))
    model = _model(name, file, "mlx")
    B = model.backend
    logits = []
    for max_chunk in (64, 4):
        session = open_session(model, 0)
        session.max_chunk = max_chunk
        logits.append(np.asarray(B.to_numpy(session.prefill(prompt))))
    np.testing.assert_allclose(logits[1], logits[0], atol=1e-4, rtol=1e-4)
    assert _run(name, file, "mlx", prompt, max_new_tokens=16).sequences[0] == _theirs(
        name, prompt[0], max_new_tokens=16, do_sample=False)


def test_fixed_buffer_compiles_one_shape_per_chunk_length():
    """64 new tokens after prompts of 5, 9, 3, 9 tokens: chunks of 8 and 1, one signature each, both
    compiled; a second batch of the same width reuses them; the buffer grows past its reserve."""
    model = _load("llama", "model.onnx")
    config = GenerationConfig.from_repo(_folder("llama")).update(max_new_tokens=64, min_new_tokens=64)
    generate(open_session(model, config.pad_id), _prompts(), config)
    assert len(model.signatures()) == 2 and all(model.signatures().values())
    generate(open_session(model, config.pad_id), _prompts(5), config)
    assert len(model.signatures()) == 2
    session = open_session(model, config.pad_id)  # no reserve: capacity 8, doubled twice
    B, tokens = model.backend, []
    logits = session.prefill(_prompts()[:1])
    for _ in range(20):
        tokens.append(int(B.to_numpy(B.argmax(logits, -1, False))[0]))
        logits = session.step(np.asarray(tokens[-1:]))
    assert session.mask.shape[1] == 32
    assert tokens == generate(open_session(model, config.pad_id), _prompts()[:1], config).sequences[0][:20]


class _Toy:
    """A decoder whose next token is the last one plus one (mod 10)."""

    B = get_backend("numpy")

    def prefill(self, prompts):
        self.last = [p[-1] for p in prompts]
        return self._logits()

    def step(self, tokens):
        self.last = list(tokens)
        return self._logits()

    def reorder(self, rows):
        self.last = [self.last[r] for r in rows]

    def _logits(self):
        return np.eye(10, dtype=np.float32)[[(t + 1) % 10 for t in self.last]]


def test_stop_conditions_per_row():
    config = GenerationConfig(max_new_tokens=6, eos_token_id=[9], pad_token_id=0, stop_strings=["cd"])
    out = generate(_Toy(), [[0], [6], [8], [3, 4]], config, decode=lambda ids: "".join("abcdefghij"[i] for i in ids))
    assert out.sequences == [[1, 2, 3], [7, 8, 9], [9], [5, 6, 7, 8, 9]]
    assert out.stopped_by == ["stop_string", "eos", "eos", "eos"]
    assert generate(_Toy(), [[0]], config.update(max_length=4, max_new_tokens=None, stop_strings=None)).sequences == [[1, 2, 3]]
    with pytest.raises(ValueError, match="decode"):
        generate(_Toy(), [[0]], config)


def test_processors_apply_in_the_loop():
    config = GenerationConfig(max_new_tokens=5, eos_token_id=[9], min_new_tokens=5, pad_token_id=0)
    assert generate(_Toy(), [[6]], config).sequences == [[7, 8, 0, 1, 2]]  # eos banned: the argmax moves on


class _CountingSteps(_Toy):
    steps = 0

    def step(self, tokens):
        self.steps += 1
        return super().step(tokens)


def test_step_runs_ahead_of_the_stop_checks_by_at_most_one():
    """The next step starts before the host reads the picked tokens: a row that stops by length never
    runs a step past its bound; a stop the host sees later (eos) costs one step, which is dropped."""
    by_length = _CountingSteps()
    out = generate(by_length, [[0]], GenerationConfig(max_new_tokens=5, eos_token_id=[99], pad_token_id=0))
    assert out.sequences == [[1, 2, 3, 4, 5]] and by_length.steps == 4
    by_eos = _CountingSteps()
    out = generate(by_eos, [[6]], GenerationConfig(max_new_tokens=8, eos_token_id=[9], pad_token_id=0))
    assert out.sequences == [[7, 8, 9]] and out.stopped_by == ["eos"] and by_eos.steps == 3


def test_stopped_rows_get_padding_tokens():
    """A row that stopped at an earlier step is fed the pad token until the batch ends (the spec's
    rule); the row that stops at a step feeds its last token to the step already queued."""

    class Recording(_Toy):
        def __init__(self):
            self.fed = []

        def step(self, tokens):
            self.fed.append([int(t) for t in tokens])
            return super().step(tokens)

    session = Recording()
    out = generate(session, [[7], [0]], GenerationConfig(max_new_tokens=5, eos_token_id=[9], pad_token_id=3))
    assert out.sequences == [[8, 9], [1, 2, 3, 4, 5]]
    assert [row[0] for row in session.fed] == [8, 9, 3, 3]


class _Reserving(_Toy):
    """A toy session that records what ``generate`` asks it to reserve."""

    def reserve(self, steps, longest=None):
        self.reserved = (steps, longest)


@pytest.mark.parametrize("mode", [{}, {"num_beams": 2}])
def test_max_length_cap_bounds_the_rows_and_the_reserve(mode):
    """A context of 12 positions: max_new_tokens=10**9 gives rows of 12 tokens and reserves no more."""
    session = _Reserving()
    config = GenerationConfig(max_new_tokens=10**9, **mode)
    out = generate(session, [[1, 2, 3], [4]], config, max_length_cap=12)
    assert session.reserved == (11, 12)
    assert [len(s) for s in out.sequences] == [9, 11]  # each row to the end of the context


def test_capacity_never_exceeds_the_longest_row():
    from transmuter_mlx.generation.sessions_common import capacity

    assert capacity(9, 64) == 128  # a power of two
    assert capacity(12, 40948, longest=40960) == 40960  # not 65536: the context is the bound
    assert capacity(200, 250, longest=256) == 512  # left padding needs more than the longest row


def test_beam_topk_is_the_start_of_a_stable_sort():
    """The beam search's partial top-k picks what a full stable descending sort would (ties by index)."""
    from transmuter_mlx.generation.beam import _topk

    rng = np.random.default_rng(0)
    for scores in (rng.standard_normal((3, 1000)).astype(np.float32),
                   rng.integers(0, 4, (3, 1000)).astype(np.float32),  # ties everywhere
                   np.where(rng.random((2, 50)) < 0.9, -np.inf, 1.0).astype(np.float32)):
        for k in (1, 5, 10, scores.shape[1]):
            want = np.argsort(-scores, axis=-1, kind="stable")[:, :k]
            np.testing.assert_array_equal(_topk(scores, k), want)
