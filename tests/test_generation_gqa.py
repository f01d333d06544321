"""Mode (a) of the decoding loop: the ``qwen2-genai`` fixture (onnxruntime-genai model builder,
GroupQueryAttention writing the cache in place, a symbolic head size) on mlx and torch.

References: a plain onnxruntime loop over the same file with a growing past, one prompt at a time;
onnxruntime running the session's own feeds (the fixed buffer, right padding); and, for the fp32 file,
transformers' ``generate`` on the ``qwen2`` weights the builder read.

GroupQueryAttention reads each row's valid cache rows from ``sum(mask) - 1`` and starts a first
prompt at position 0, so a batch of prompts of different lengths must be padded on the right:
onnxruntime gives a left-padded row other tokens than the same prompt alone (checked below).

onnxruntime also refuses several tokens per row after a past in a batch of more than one row, which
the session's power-of-two prompt chunks are; the converted operator runs them with the rule of a
single row (``past = seqlens_k + 1 - sequence_length``), so the check of the same feeds runs such
calls in onnxruntime one row at a time.

The int4 file's MatMulNBits carry ``accuracy_level=4``: onnxruntime's CPU kernel then quantizes the
activations to int8 and the torch backend's int4 kernel reads them in bfloat16; the logits move by a few
hundredths and greedy tokens part on this random-weight fixture. So the token-for-token checks run the
int4 file with ``accuracy_level=0`` (float32 activations) on both sides, and the file as shipped is
checked by its error: the torch backend's logits are no farther from the float32 ones than onnxruntime's.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from transmuter_mlx.converters.backends import get_backend
from transmuter_mlx.generation.config import GenerationConfig
from transmuter_mlx.generation.loop import generate
from transmuter_mlx.generation.sessions import CacheLayout, GQASession, open_session

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

FILES = ("model.onnx", "model_q4.onnx")
LENGTHS = (5, 9, 3)
NEW = 24


@functools.cache
def _folder():
    from tests.fixtures.generation_models import build

    return build("qwen2-genai")


@functools.cache
def _proto(file: str, accuracy_level: int | None = None) -> Any:
    """The file with its external data, as a proto (its ``accuracy_level`` set when given), read once."""
    proto = onnx.load(str(_folder() / "onnx" / file))
    if accuracy_level is not None:
        for node in proto.graph.node:
            for a in node.attribute:
                if a.name == "accuracy_level":
                    a.i = accuracy_level
    return proto


def _float32_level(file: str) -> int | None:
    """The accuracy level of the token-for-token checks: float32 activations for the int4 file."""
    return 0 if file == "model_q4.onnx" else None


@functools.cache
def _model(file: str, backend: str, accuracy_level: int | None = -1):
    import transmuter_mlx as tm

    return tm.load(_proto(file, _float32_level(file) if accuracy_level == -1 else accuracy_level), backend=backend)


@functools.cache
def _ort(file: str, accuracy_level: int | None = -1) -> Any:
    proto = _proto(file, _float32_level(file) if accuracy_level == -1 else accuracy_level)
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def _config(**options) -> GenerationConfig:
    return GenerationConfig.from_repo(_folder()).update(**{"max_new_tokens": NEW, "min_new_tokens": NEW, **options})


def _prompts(lengths=LENGTHS, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(5, 400, n))) for n in lengths]


def _ort_loop(file: str, prompts: list[list[int]], n: int = NEW, left: bool = False) -> list[list[int]]:
    """Greedy tokens from onnxruntime with a growing past: the prompts padded on the left or the
    right, each step's mask one wider with ``valid rows`` ones in each row."""
    sess = _ort(file)
    names = [i.name for i in sess.get_inputs() if i.name.startswith("past_key_values")]
    lengths = np.asarray([len(p) for p in prompts])
    b, w = len(prompts), int(lengths.max())
    ids = np.zeros((b, w), np.int64)
    for r, p in enumerate(prompts):
        if left:
            ids[r, w - len(p):] = p
        else:
            ids[r, :len(p)] = p
    cols = np.arange(w)[None]
    mask = (cols >= (w - lengths)[:, None]) if left else (cols < lengths[:, None])
    past = {k: np.zeros((b, 2, 0, 16), np.float32) for k in names}
    last = np.full(b, w - 1) if left else lengths - 1
    out = []
    for _ in range(n):
        res = dict(zip([o.name for o in sess.get_outputs()],
                       sess.run(None, {"input_ids": ids, "attention_mask": mask.astype(np.int64), **past})))
        tokens = res["logits"][np.arange(b), last].argmax(-1)
        out.append(tokens)
        past = {k: res[k.replace("past_key_values", "present")] for k in names}
        ids, last = tokens[:, None].astype(np.int64), np.zeros(b, np.int64)
        valid = mask.sum(1) + 1
        mask = np.arange(mask.shape[1] + 1)[None] < valid[:, None]
        if left:
            mask = mask[:, ::-1]
    return np.stack(out, 1).tolist()


class _OrtModel:
    """onnxruntime behind the ``Model`` interface a session drives (numpy backend)."""

    def __init__(self, file: str, accuracy_level: int | None = -1):
        like = _model(file, "mlx")
        self.name, self.inputs, self.program = like.name, like.inputs, like.program
        self.backend = get_backend("numpy")
        self.session = _ort(file, accuracy_level)

    def __call__(self, feeds: dict[str, Any], last_position: tuple[str, ...] = ()) -> dict[str, Any]:
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        names = [o.name for o in self.session.get_outputs()]
        rows, length = arrays["input_ids"].shape
        if rows == 1 or length == 1:
            out = dict(zip(names, self.session.run(None, arrays)))
        else:
            # onnxruntime refuses a batch of several tokens per row after a past ("batch_size must be 1
            # when sequence_length > 1 and past context is given"): the same feeds, one row at a time
            parts = [self.session.run(None, {k: v[r:r + 1] for k, v in arrays.items()}) for r in range(rows)]
            out = {n: np.concatenate([p[i] for p in parts], 0) for i, n in enumerate(names)}
        return {n: v[:, -1:] if n in last_position else v for n, v in out.items()}


def test_layout_reads_the_gqa_mode_and_the_head_size():
    layout = CacheLayout.of(_model("model.onnx", "mlx"))
    assert (layout.mode, layout.heads, layout.head_dim, layout.position_ids) == ("gqa", 2, 16, False)
    assert isinstance(open_session(_model("model_q4.onnx", "mlx")), GQASession)


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("file", FILES)
def test_greedy_matches_onnxruntime(file, backend):
    prompts = _prompts()
    theirs = [_ort_loop(file, [p])[0] for p in prompts]
    assert _ort_loop(file, prompts) == theirs  # right padding: each row as alone
    model = _model(file, backend)
    batch = generate(open_session(model, 0), prompts, _config())
    alone = generate(open_session(model, 0), prompts[1:2], _config())
    assert batch.sequences == theirs
    assert alone.sequences[0] == theirs[1]
    assert [s["padding"] for s in batch.token_summaries] == [4, 0, 6]
    if backend == "mlx":  # chunks 8 and 1 (batch 3), 8 and 1 (batch 1): all compiled
        assert len(model.signatures()) <= 4 and all(model.signatures().values())
    # a chunk where some row ends before its last position needs every position's logits; the lone row's first
    # chunk (no row ends in it) only the last position's, and its head computes that row alone
    chunks = {dict(k)["input_ids"][0]: ("last_position", ("logits",)) in k for k in model.signatures()
              if dict(k)["input_ids"][0][1] > 1}
    assert chunks == {(3, 8): False, (1, 8): True}


def test_left_padding_is_not_what_gqa_expects():
    prompts = _prompts()
    alone = [_ort_loop("model.onnx", [p])[0] for p in prompts]
    assert _ort_loop("model.onnx", prompts, left=True) != alone


@pytest.mark.parametrize("file", FILES)
def test_same_feeds_as_onnxruntime(file):
    """The session's own fixed-buffer feeds (right padding, in-place writes, chunks of 4+4+1) through
    onnxruntime give the tokens and logits of the converted model."""
    prompts = _prompts((9, 2, 6), seed=1)
    ref = _OrtModel(file)
    sessions = [GQASession(ref, 0), GQASession(_model(file, "mlx"), 0)]
    logits = []
    for session in sessions:
        session.max_chunk = 4
        session.reserve(NEW)
        logits.append(np.asarray(session.B.to_numpy(session.prefill(prompts))))
    np.testing.assert_allclose(logits[1], logits[0], atol=1e-4, rtol=1e-4)
    ours = generate(open_session(_model(file, "mlx"), 0), prompts, _config())
    assert generate(GQASession(ref, 0), prompts, _config()).sequences == ours.sequences


def test_int4_file_as_shipped_is_as_close_as_onnxruntime():
    """With the file's ``accuracy_level=4`` the torch backend keeps the int4 weights packed and multiplies
    bfloat16 activations (torch's CPU int4 kernel); onnxruntime quantizes them to int8. Both against the
    float32 activations' logits (onnxruntime at ``accuracy_level=0``), over a prefill of three prompts:
    ours is no farther, at the largest and on average, and the weights are held packed."""
    from transmuter_mlx.converters.ops import quantized_contrib

    prompts = _prompts((9, 2, 6), seed=1)
    models = {"float32": _OrtModel("model_q4.onnx", 0), "onnxruntime": _OrtModel("model_q4.onnx", None),
              "torch": _model("model_q4.onnx", "torch", None)}
    logits = {}
    for name, model in models.items():
        session = GQASession(model, 0)
        session.reserve(NEW)
        logits[name] = np.asarray(session.B.to_numpy(session.prefill(prompts)), np.float64)
    err = {k: np.abs(logits[k] - logits["float32"]) for k in ("onnxruntime", "torch")}
    assert 0 < err["torch"].max() <= err["onnxruntime"].max(), {k: v.max() for k, v in err.items()}
    assert err["torch"].mean() <= err["onnxruntime"].mean(), {k: v.mean() for k, v in err.items()}
    # MatMulNBits' plans on torch at the file's level, the key's last item (GatherBlockQuantized's are arrays)
    plans = {v[0] for k, v in quantized_contrib._CACHE.items() if k[0] == "torch" and k[-1] == 4 and isinstance(v[0], str)}
    assert plans == {"packed"}


def test_fp32_matches_transformers():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoModelForCausalLM.from_pretrained(_folder()).eval()
    prompts = _prompts()
    ours = generate(open_session(_model("model.onnx", "mlx"), 0), prompts, _config(min_new_tokens=None))
    for prompt, mine in zip(prompts, ours.sequences):
        with torch.no_grad():
            out = reference.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                     max_new_tokens=NEW, do_sample=False)
        assert mine == out[0, len(prompt):].tolist()


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_fp32_beam_search_matches_transformers(backend):
    """Beams are batch rows of the in-place buffer: reordering them gathers the buffer's rows."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoModelForCausalLM.from_pretrained(_folder()).eval()
    options = dict(num_beams=4, length_penalty=1.3, early_stopping=False, num_return_sequences=2, max_new_tokens=16)
    prompts = _prompts((6, 3), seed=3)
    ours = generate(open_session(_model("model.onnx", backend), 0), prompts, _config(min_new_tokens=None, **options))
    config = _config()
    fill = config.pad_id if config.pad_id is not None else config.eos_ids[0]
    for i, prompt in enumerate(prompts):
        with torch.no_grad():
            theirs = reference.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                        do_sample=False, **options)[:, len(prompt):].tolist()
        mine = ours.sequences[2 * i:2 * i + 2]
        assert [s + [fill] * (len(theirs[0]) - len(s)) for s in mine] == theirs


def test_beam_search_and_growth_past_the_reserve():
    model = _model("model.onnx", "mlx")
    prompts = _prompts((4, 7), seed=2)
    options = dict(num_beams=3, num_return_sequences=2, min_new_tokens=None, max_new_tokens=12)
    beams = generate(open_session(model, 0), prompts, _config(**options))
    ref = generate(GQASession(_OrtModel("model.onnx"), 0), prompts, _config(**options))
    assert beams.sequences == ref.sequences
    session = open_session(model, 0)  # no reserve: capacity 8, doubled to 32
    B, tokens = model.backend, []
    logits = session.prefill(prompts[:1])
    for _ in range(NEW):
        tokens.append(int(B.to_numpy(B.argmax(logits, -1, False))[0]))
        logits = session.step(np.asarray(tokens[-1:]))
    assert B.shape(session.cache["past_key_values.0.key"])[2] == 32
    assert tokens == _ort_loop("model.onnx", prompts[:1])[0]


def _with_position_ids(file: str) -> Any:
    """The file as transformers.js-style GQA exports have it: a ``position_ids`` input that every
    GroupQueryAttention reads for its rotary positions (input 9)."""
    proto = onnx.ModelProto()
    proto.CopyFrom(_proto(file))
    proto.graph.input.append(onnx.helper.make_tensor_value_info("position_ids", onnx.TensorProto.INT64,
                                                                ["batch_size", "sequence_length"]))
    for node in proto.graph.node:
        if node.op_type == "GroupQueryAttention":
            inputs = list(node.input) + [""] * (10 - len(node.input))
            inputs[9] = "position_ids"
            del node.input[:]
            node.input.extend(inputs)
    return proto


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_position_ids_input_is_fed_with_each_rows_positions(backend):
    import transmuter_mlx as tm

    model = tm.load(_with_position_ids("model.onnx"), backend=backend)
    layout = CacheLayout.of(model)
    assert layout.mode == "gqa" and layout.position_ids
    prompts = _prompts()  # right-padded rows of 5, 9 and 3 tokens
    ours = generate(open_session(model, 0), prompts, _config()).sequences
    assert ours == generate(open_session(_model("model.onnx", backend), 0), prompts, _config()).sequences
    # the positions are read: spread ones give other logits (a uniform shift would not: RoPE scores
    # depend on the distance between positions only)
    first = np.asarray(model.backend.to_numpy(open_session(model, 0).prefill(prompts[:1])))
    session = open_session(model, 0)
    session.model = lambda feeds: model({**feeds, "position_ids": feeds["position_ids"] * 2})
    spread = np.asarray(model.backend.to_numpy(session.prefill(prompts[:1])))
    assert np.abs(first - spread).max() > 1e-2
