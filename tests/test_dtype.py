"""``dtype="float16"`` / ``"bfloat16"``: the pipelines compute in that dtype (mlx and torch) and stay close to float32.

Each case runs the same pipeline on the same input with ``dtype=None`` (float32) and with the dtype, on real
fixtures (the real all-MiniLM-L6-v2; tiny random-weight BERT, GLiNER, ViT, DINOv2, CLIP, GPT-2 and Qwen2), and
checks three things: the results are close (tolerances below: what was measured on these fixtures, with a margin;
docs/converter.md "Compute dtype" lists the measurements), the heavy computation runs in the dtype (the weights
are in it, every MatMul/Gemm/attention on the device gives it, and float32 device values appear only where the
rewrite puts them on purpose: BERT's and CLIP's ``1 - mask``, Qwen2's RMSNorm statistics and rotary angles; none
in GPT-2 nor ViT), and what a pipeline returns is usable (scores are Python floats, arrays are float32, so
``np.asarray`` works, bfloat16 on mlx included).

bfloat16 keeps 8 bits of mantissa (float16: 11), so its tolerances are ~10x wider. The random-weight fixtures are
built with wide initializers so that their scores are well apart, which also makes their softmaxes sharp: the
GLiNER scores move most (its DeBERTa attention and LSTM compound the rounding).
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import transmuter_mlx as tm
from tests.fixtures.generation_models import build as build_generation
from tests.fixtures.images import image_path
from tests.fixtures.text_models import build as build_text
from tests.fixtures.vision_models import build as build_vision
from transmuter_mlx.converters.graph import Interpreter
from transmuter_mlx.converters.precision import compute_dtype
from transmuter_mlx.generation.sessions import open_session
from transmuter_mlx.generation.sessions_common import CacheLayout

BACKENDS = ["mlx", pytest.param("torch", marks=pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                                                  reason="torch is not installed"))]
DTYPES = ["float16", "bfloat16"]
BF16 = np.dtype(ml_dtypes.bfloat16)
# The tolerances against float32, each the largest value measured over both backends (in brackets) with a margin.
# cosine of embeddings (MiniLM [0.999998], DINOv2 [0.9999998]; bfloat16: [0.99992], [0.99995])
EMBEDDING_COSINE = {"float16": 0.99999, "bfloat16": 0.9997}
# |score - float32 score| of the classification-like tasks (text tasks [3.9e-4], ViT [1.5e-4], CLIP's softmax of
# 100 x cosine [1.9e-3]; bfloat16: [1.7e-3], [6.8e-4], [3.3e-3])
SCORE_TOLERANCE = {"float16": 6e-3, "bfloat16": 1e-2}
# fill-mask's scores, ~0.009 each on the random-weight fixture ([5.4e-6]; bfloat16 [6.4e-5])
FILL_MASK_TOLERANCE = {"float16": 2e-5, "bfloat16": 2e-4}
# GLiNER's span probabilities: its logits reach 11 and move by 1.5-3.5% in bfloat16 ([0.009]; bfloat16 [0.18])
GLINER_TOLERANCE = {"float16": 0.03, "bfloat16": 0.3}
# next-token logits, max |difference| over max |float32 logit| ([1.8e-3]; bfloat16 [1.2e-2])
LOGITS_TOLERANCE = {"float16": 0.006, "bfloat16": 0.04}
HEAVY_OPS = ("MatMul", "Gemm", "Conv", "ScaledDotProductAttention", "Attention", "Einsum")
PHOTO = str(image_path("chelsea"))

_REFERENCES: dict[tuple, Any] = {}


def run(task: str, folder: Path, backend: str, dtype: str | None, inputs: Any, **options: Any) -> tuple[Any, Any]:
    """``(pipeline, result)``; float32 results are computed once per case."""
    key = (task, str(folder), backend, dtype, repr(inputs), repr(sorted(options.items())))
    if key not in _REFERENCES:
        pipe = tm.pipeline(task, str(folder), backend=backend, dtype=dtype, **options)
        _REFERENCES[key] = pipe, pipe(inputs)
    return _REFERENCES[key]


def keyed(result: Any, path: tuple = ()) -> dict[tuple, Any]:
    """Every float and array of a result under a key made of the text and int fields beside it (a label, a token,
    a span), so that results that list the same items in another order (near ties) compare item by item."""
    out: dict[tuple, Any] = {}
    if isinstance(result, dict):
        ident = tuple(sorted((k, v) for k, v in result.items() if isinstance(v, str | int) and not isinstance(v, bool)))
        for k, v in result.items():
            if isinstance(v, float):
                out[(*path, ident, k)] = v
            elif isinstance(v, dict | list | tuple):
                out.update(keyed(v, (*path, ident, k)))
            elif hasattr(v, "shape"):
                out[(*path, ident, k)] = v
    elif isinstance(result, list | tuple):
        for item in result:
            out.update(keyed(item, path))
    return out


def assert_close(reference: Any, result: Any, tolerance: float, cosine: float) -> None:
    ref, got = keyed(reference), keyed(result)
    assert ref.keys() == got.keys()
    assert ref, "nothing to compare"
    for k, r in ref.items():
        g = got[k]
        if isinstance(r, float):
            assert isinstance(g, float)
            assert abs(g - r) <= tolerance, (k, r, g)
        else:
            a = np.asarray(g)  # a returned array converts: float32, not bfloat16
            assert a.dtype == np.float32
            b = np.asarray(r, np.float32).reshape(-1)
            a = a.reshape(-1)
            assert float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) >= cosine, k


def spy_feeds(pipe: Any, call: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The feeds of the first model call that ``call`` makes."""
    seen: list[dict[str, Any]] = []
    model_type = type(pipe.model)
    original = model_type.__call__

    def spy(self: Any, feeds: Any, **kwargs: Any) -> Any:
        if self is pipe.model and not seen:
            seen.append(dict(feeds))
        return original(self, feeds, **kwargs)

    monkeypatch.setattr(model_type, "__call__", spy)
    call()
    monkeypatch.setattr(model_type, "__call__", original)
    return seen[0]


def device_float32(model: Any, feeds: dict[str, Any]) -> list[tuple[str, str]]:
    """``(op_type, node name)`` of each device value that a run of ``model`` computes in float32."""
    arrays, _ = model._check_feeds(feeds)
    walk = Interpreter(model.program, model.backend, sync=True)
    walk.run(arrays)
    B = model.backend
    producer = {o: s for s in model.program.steps for o in s.outputs if o}
    return [(producer[n].spec.op_type, producer[n].name) for n, v in walk.env.maps[0].items()
            if n in producer and B.is_array(v) and B.dtype(v) == np.float32]


def mask_arithmetic(name: str) -> bool:
    """The attention mask's ``1 - mask`` ahead of the layers (BERT's), which the graph then casts to bool: float32
    by the rule for float values cast to an integer type (no layer computes in float32)."""
    return "layer" not in name


def assert_computes_in(model: Any, dtype: str, feeds: dict[str, Any], allowed: Callable[[str], bool]) -> None:
    """The weights are in ``dtype``, the heavy ops compute in it, and float32 appears only where ``allowed``."""
    want = compute_dtype(dtype)
    assert model.dtype == want
    weights = [v for v in model.program.initializers.values() if isinstance(v, np.ndarray) and v.size >= 1024
               and (v.dtype.kind == "f" or v.dtype == BF16)]
    assert weights and all(w.dtype == want for w in weights)
    float32 = device_float32(model, feeds)
    assert not [f for f in float32 if f[0] in HEAVY_OPS and not allowed(f[1])], float32
    assert all(allowed(name) for _, name in float32), float32



def assert_same_token_labels(float32_pipe: Any, text: str, reference: Any, result: Any, tolerance: float,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Token by token: each score is float32's probability of the label the dtype chose, and that label is float32's
    best or within ``tolerance`` of it. The random-weight NER fixture's nine labels score ~0.3 at best, so near ties
    flip a label between BLAS builds (B-PER 0.2338 vs I-PER 0.2324 once); a label that is not a near tie may not."""
    feeds = spy_feeds(float32_pipe, lambda: float32_pipe(text), monkeypatch)
    logits = np.asarray(float32_pipe.model.backend.to_numpy(float32_pipe.model(feeds)["logits"]), np.float64)[0]
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    label_id = {label: i for i, label in float32_pipe.args.id2label.items()}
    (reference,), (result,) = reference, result
    assert len(reference["entities"]) == len(result["entities"]) > 0
    for want, got in zip(reference["entities"], result["entities"], strict=True):
        assert [want[k] for k in ("index", "word", "start", "end")] == [got[k] for k in ("index", "word", "start", "end")]
        assert abs(want["score"] - probabilities[want["index"], label_id[want["label"]]]) <= 1e-5, want
        chosen = probabilities[got["index"], label_id[got["label"]]]
        assert isinstance(got["score"], float) and abs(got["score"] - chosen) <= tolerance, (want, got, chosen)
        assert chosen >= want["score"] - tolerance, (want, got, chosen)


def assert_same_answers(float32_pipe: Any, inputs: list, options: dict, reference: Any, result: Any,
                        tolerance: float) -> None:
    """Rank by rank: the span the dtype chose scores, under float32, within ``tolerance`` of float32's answer at that
    rank, and its own score is float32's score of that span within ``tolerance``. The random-weight QA fixture's
    spans score 0.02-0.07, so near ties swap answers between dtypes and BLAS builds ("lives" 0.0376 against "lives in
    Paris." 0.0375 once, bfloat16 on torch; "John lives" for "John lives in Paris." as the second answer on another
    CI machine); a span that is not a near tie may not take a rank. ``align_to_words=False``: each answer is one
    token span, whose score does not depend on ``top_k`` (aligned to words, transformers sums the scores of the
    candidates among the best ``2 top_k + 10`` that widen to the same words, so a span's score grows with
    ``top_k``)."""
    (reference,), (result,) = reference, result
    assert len(reference["results"]) == len(result["results"]) == options["top_k"]
    (every,) = float32_pipe(inputs, **{**options, "top_k": 1000})  # float32's score of every span considered
    spans = {(a["start"], a["end"]): a for a in every["results"]}
    for want, got in zip(reference["results"], result["results"], strict=True):
        assert spans[(want["start"], want["end"])] == want  # top_k=k is the head of the full list
        chosen = spans[(got["start"], got["end"])]
        assert got["text"] == chosen["text"] and isinstance(got["score"], float)
        assert abs(got["score"] - chosen["score"]) <= tolerance, (want, got, chosen)
        assert chosen["score"] >= want["score"] - tolerance, (want, got, chosen)

# ---------------------------------------------------------------------------------------------------- the option
def test_dtype_spellings() -> None:
    import mlx.core as mx

    for value in ("float16", "fp16", "half", "FP16", np.float16, np.dtype(np.float16), mx.float16):
        assert compute_dtype(value) == np.float16
    for value in ("bfloat16", "bf16", ml_dtypes.bfloat16, mx.bfloat16):
        assert compute_dtype(value) == BF16
    for value in ("float32", "fp32", np.float32, mx.float32):
        assert compute_dtype(value) == np.float32
    assert compute_dtype(None) is None
    torch = pytest.importorskip("torch")
    assert compute_dtype(torch.float16) == np.float16 and compute_dtype(torch.bfloat16) == BF16
    for bad in ("int8", "float64", np.int32, "fp8"):
        with pytest.raises(ValueError, match="dtype must be"):
            compute_dtype(bad)
    with pytest.raises(ValueError, match="text-classification: dtype must be"):
        tm.pipeline("text-classification", str(build_text("bert-sst3")), dtype="int8")


# ---------------------------------------------------------------------------------------------------- encoders
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_text_embedding(backend: str, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real all-MiniLM-L6-v2: every device value is in the dtype; the embedding is float32, close to fp32's."""
    folder = build_text("minilm")
    texts = ["A man is eating food."]
    _, reference = run("text-embedding", folder, backend, None, texts)
    pipe, result = run("text-embedding", folder, backend, dtype, texts)
    assert Path(pipe.model.name).name == "model.onnx"  # no fp16 file: the fp32 one, cast
    assert_close(reference, result, 0.0, EMBEDDING_COSINE[dtype])
    feeds = spy_feeds(pipe, lambda: pipe(texts[0]), monkeypatch)
    assert_computes_in(pipe.model, dtype, feeds, mask_arithmetic)
    raw = pipe.model(feeds)["last_hidden_state"]
    assert pipe.model.backend.dtype(raw) == compute_dtype(dtype)  # the model's own outputs: in the dtype
    assert pipe.model.backend.to_numpy(raw).dtype == compute_dtype(dtype)  # and to_numpy converts bfloat16 too


TEXT_CASES = [
    ("text-classification", "bert-sst3", ["I love this movie", "terrible"], {"top_k": None}),
    ("token-classification", "bert-ner", ["John Smith lives in Paris and works at Google."], {"ignore_labels": []}),
    # the two best answers, each compared with float32's at its rank (near ties may swap them: see
    # assert_same_answers)
    ("question-answering", "bert-qa", [{"question": "Where does John live?", "context": "John lives in Paris."}],
     {"top_k": 2, "align_to_words": False}),
    ("zero-shot-classification", "bert-nli", ["I love football"], {"labels": ["sports", "politics"]}),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("task, fixture, inputs, options", TEXT_CASES, ids=[c[0] for c in TEXT_CASES])
def test_text_tasks(task: str, fixture: str, inputs: list, options: dict, backend: str, dtype: str,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build_text(fixture)
    float32_pipe, reference = run(task, folder, backend, None, inputs, **options)
    pipe, result = run(task, folder, backend, dtype, inputs, **options)
    if task == "token-classification":
        assert_same_token_labels(float32_pipe, inputs[0], reference, result, SCORE_TOLERANCE[dtype], monkeypatch)
    elif task == "question-answering":
        assert_same_answers(float32_pipe, inputs, options, reference, result, SCORE_TOLERANCE[dtype])
    else:
        assert_close(reference, result, SCORE_TOLERANCE[dtype], EMBEDDING_COSINE[dtype])
    feeds = spy_feeds(pipe, lambda: pipe(inputs[0]), monkeypatch)
    assert_computes_in(pipe.model, dtype, feeds, mask_arithmetic)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_mask(backend: str, dtype: str) -> None:
    """The float32 top 5 scored again as ``targets`` (near ties may reorder a top k, not the targets' scores)."""
    folder, text = build_text("bert-mlm"), "The capital of France is [MASK]."
    _, reference = run("fill-mask", folder, backend, None, text)
    targets = [p["token_str"] for p in reference["predictions"]]
    _, reference = run("fill-mask", folder, backend, None, text, targets=targets)
    _, result = run("fill-mask", folder, backend, dtype, text, targets=targets)
    assert_close(reference, result, FILL_MASK_TOLERANCE[dtype], EMBEDDING_COSINE[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gliner(backend: str, dtype: str) -> None:
    """Every span and label scored (no threshold, no greedy choice, which near ties could flip)."""
    pytest.importorskip("gliner")  # the fixture's exporter (and its cache key)
    from tests.fixtures.gliner_models import build as build_gliner

    options = {"labels": ["person", "city", "company"], "threshold": 0.0, "flat_ner": False, "multi_label": True}
    text = "John Smith lives in Paris and works at Google."
    folder = build_gliner("gliner-span")
    _, reference = run("zero-shot-entity-recognition", folder, backend, None, text, **options)
    _, result = run("zero-shot-entity-recognition", folder, backend, dtype, text, **options)
    assert_close(reference, result, GLINER_TOLERANCE[dtype], EMBEDDING_COSINE[dtype])


VISION_CASES = [
    ("image-classification", "vit", {"top_k": None}),
    ("image-embedding", "dinov2", {}),  # its position embeddings are resized (on the host) in the dtype
    ("zero-shot-image-classification", "clip", {"labels": ["a cat", "a dog", "a cup"]}),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("task, fixture, options", VISION_CASES, ids=[c[0] for c in VISION_CASES])
def test_vision_encoders(task: str, fixture: str, options: dict, backend: str, dtype: str,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build_vision(fixture)
    _, reference = run(task, folder, backend, None, PHOTO, **options)
    pipe, result = run(task, folder, backend, dtype, PHOTO, **options)
    assert_close(reference, result, SCORE_TOLERANCE[dtype], EMBEDDING_COSINE[dtype])
    feeds = spy_feeds(pipe, lambda: pipe(PHOTO), monkeypatch)
    assert_computes_in(pipe.model, dtype, feeds, mask_arithmetic)  # CLIP's text tower masks as BERT does


# ---------------------------------------------------------------------------------------------------- generation
def _rotary_or_norm(name: str) -> bool:
    return "rotary_emb" in name or "norm" in name


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fixture", ["gpt2", "qwen2"])
def test_generation(fixture: str, backend: str, dtype: str) -> None:
    """Greedy decoding runs in the dtype with a cache in the dtype, and returns text for a padded batch.

    The tokens themselves are not compared: on a random-weight model the top two logits of a step can be closer
    than half precision resolves, and one different token changes the rest. What is sound: the next-token
    logits of the prompt are close to float32's (relative to their scale), and the token the dtype picks first
    has a float32 logit within that tolerance of float32's best."""
    folder = build_generation(fixture)
    prompts = ["Hello world, the", "A much longer prompt that has quite a few more tokens than the other one"]
    options = {"max_new_tokens": 4, "compile": {"batch_size": 2}}
    pipe, result = run("text-generation", folder, backend, dtype, prompts, **options)
    assert [type(r["results"][0]["text"]) for r in result] == [str, str]
    assert open_session(pipe.model, 0).layout.dtype == compute_dtype(dtype)  # the KV cache takes the dtype

    reference, _ = run("text-generation", folder, backend, None, prompts, **options)
    encoded = pipe.tokenizer.encode([prompts[1]], truncation=False)
    feeds = prompt_feeds(pipe.model, encoded.input_ids[:1, encoded.attention_mask[0] == 1].astype(np.int64))
    expected = reference.model.backend.to_numpy(reference.model(feeds)["logits"])[0, -1].astype(np.float32)
    got = pipe.model.backend.to_numpy(pipe.model(feeds)["logits"])[0, -1].astype(np.float32)
    scale = float(np.abs(expected).max())
    assert float(np.abs(got - expected).max()) <= LOGITS_TOLERANCE[dtype] * scale
    assert expected[int(got.argmax())] >= expected.max() - LOGITS_TOLERANCE[dtype] * scale
    # gpt2: no float32 at all; qwen2: only its RMSNorm statistics and its rotary angles (float32 by design)
    allowed = _rotary_or_norm if fixture == "qwen2" else (lambda name: False)
    assert_computes_in(pipe.model, dtype, feeds, allowed)
    if fixture == "qwen2":
        assert {op for op, _ in device_float32(pipe.model, feeds)} >= {"Pow", "ReduceMean", "Sqrt", "Cos", "Sin"}


def prompt_feeds(model: Any, ids: np.ndarray) -> dict[str, np.ndarray]:
    """The feeds of a first step over ``ids``: an empty cache (float32: the model casts it to its dtype)."""
    feeds: dict[str, np.ndarray] = {}
    layout = CacheLayout.of(model)
    for info in model.inputs:
        if info.name == "input_ids":
            feeds[info.name] = ids
        elif info.name == "attention_mask":
            feeds[info.name] = np.ones_like(ids)
        elif info.name == "position_ids":
            feeds[info.name] = np.arange(ids.shape[1], dtype=np.int64)[None]
        elif info.name.startswith("past_key_values"):
            feeds[info.name] = np.zeros((1, layout.heads, 0, layout.head_dim), np.float32)
    return feeds


# ---------------------------------------------------------------------------------------------------- fp16 files
def test_float16_prefers_the_fp16_file(tmp_path: Path) -> None:
    """dtype="float16" without ``variant`` loads onnx/model_fp16.onnx when the repository has it; bfloat16 and an
    explicit variant do not; the fp16 file runs in float16 and bfloat16 (its float16 weights cast)."""
    convert = pytest.importorskip("onnxruntime.transformers.float16").convert_float_to_float16
    import onnx

    folder = tmp_path / "repo"
    shutil.copytree(build_text("bert-sst3"), folder)
    onnx.save(convert(onnx.load(str(folder / "onnx" / "model.onnx")), keep_io_types=True),
              str(folder / "onnx" / "model_fp16.onnx"))
    reference = tm.pipeline("text-classification", str(folder), top_k=None)
    assert Path(reference.model.name).name == "model.onnx"
    expected = reference("I love it")
    for options, file in [({"dtype": "float16"}, "model_fp16.onnx"), ({"dtype": "fp16", "variant": "fp32"}, "model.onnx"),
                          ({"dtype": "bfloat16"}, "model.onnx"), ({"dtype": "bfloat16", "variant": "fp16"}, "model_fp16.onnx")]:
        pipe = tm.pipeline("text-classification", str(folder), top_k=None, **options)
        assert Path(pipe.model.name).name == file, options
        dtype = compute_dtype(options["dtype"])
        assert all(w.dtype == dtype for w in pipe.model.program.initializers.values()
                   if isinstance(w, np.ndarray) and w.size >= 1024)
        assert_close(expected, pipe("I love it"), SCORE_TOLERANCE[dtype.name], 0.0)


# ---------------------------------------------------------------------------------------------------- the rewrite
def _graph(mask_value: float) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),  # int64 -> float: the compute dtype
        helper.make_node("Sub", ["one", "maskf"], ["inv"]),
        helper.make_node("Constant", [], ["big"], value_float=mask_value),  # finfo(float32).min: beyond float16
        helper.make_node("Mul", ["inv", "big"], ["bias"]),
        helper.make_node("MatMul", ["x", "w"], ["scores"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.ones((), np.float32), "one"),
         numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_mask_constant_stays_finite(backend: str, dtype: str) -> None:
    """A ``finfo(float32).min`` mask becomes the dtype's largest finite value, not -inf: a row whose keys are all
    masked gives the uniform softmax float32 gives, not NaN. Integer feeds stay integers; the caller's proto is
    not edited."""
    proto = _graph(float(np.finfo(np.float32).min))
    before = proto.SerializeToString()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    mask = np.array([[1, 1, 0], [0, 0, 0]], np.int64)
    expected = np.asarray(tm.load(proto, backend=backend)({"x": x, "mask": mask})["y"])
    model = tm.load(proto, backend=backend, dtype=dtype)
    out = model({"x": x, "mask": mask})["y"]
    assert model.backend.dtype(out) == compute_dtype(dtype)
    got = model.backend.to_numpy(out).astype(np.float32)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, atol=SCORE_TOLERANCE[dtype])
    np.testing.assert_allclose(got[1], [1 / 3] * 3, atol=SCORE_TOLERANCE[dtype])
    assert proto.SerializeToString() == before


def test_host_matmul_keeps_bfloat16() -> None:
    """numpy (the host: constant folding) multiplies bfloat16 into bfloat16 (ml_dtypes' matmul gives float32)."""
    from transmuter_mlx.converters.backends import HOST

    a = np.ones((2, 3), BF16)
    assert HOST.matmul(a, a.T).dtype == BF16
    assert HOST.einsum("ij,kj->ik", a, a).dtype == BF16
