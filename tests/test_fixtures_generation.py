"""The generation fixtures are faithful: ONNX (onnxruntime) matches PyTorch, tokenizers agree.

For each decoder, a prompt step and one decode step with the returned KV cache; for each
encoder-decoder, the encoder output, the first decoder step and one step with past. Then
transformers ``generate`` (the parity reference) runs greedily on the saved PyTorch folder.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from tests.fixtures.bert import ROOT
from tests.fixtures.generation_models import SPECS, build

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("optimum.exporters.onnx")

DECODERS = ["gpt2", "gpt2-merged", "llama", "qwen2"]
SEQ2SEQ = ["t5", "marian", "m2m100", "nllb"]
PROMPT = "Hello world, the quick brown fox"
TEXTS = [
    "Hello world, the quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France.",
    "def main(argv):\n    return 0  # done",
]
ATOL = 1e-4


@pytest.fixture(scope="module")
def folders():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = build(name)
        return cache[name]

    return get


def session(path):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def past_shape(inp, past_len: int, head_dim: int) -> list[int]:
    """(batch 1, heads, past_len, head_dim) from an ONNX past input, symbolic dims filled in."""
    return [
        1 if k == 0 else d if isinstance(d, int) else past_len if k == 2 else head_dim
        for k, d in enumerate(inp.shape)
    ]


def head_dim(config) -> int:
    for key in ("head_dim", "d_kv"):
        if getattr(config, key, None):
            return getattr(config, key)
    heads = getattr(config, "num_attention_heads", None) or config.decoder_attention_heads
    return config.hidden_size // heads if hasattr(config, "hidden_size") else config.d_model // heads


def run_decoder(sess, ids: np.ndarray, past: dict | None, dim: int, extra: dict | None = None) -> dict:
    """One step: feeds built from the session's input names; returns outputs by name."""
    past_len = next(iter(past.values())).shape[2] if past else 0
    length = ids.shape[1]
    values = {
        "input_ids": ids,
        "attention_mask": np.ones((1, past_len + length), np.int64),
        "position_ids": np.arange(past_len, past_len + length, dtype=np.int64)[None],
        "use_cache_branch": np.array([past is not None]),
        **(extra or {}),
    }
    feed = {}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values"):
            feed[i.name] = past[i.name] if past else np.zeros(past_shape(i, 0, dim), np.float32)
        else:
            feed[i.name] = values[i.name]
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feed)))


def as_past(outputs: dict) -> dict:
    return {k.replace("present", "past_key_values"): v for k, v in outputs.items() if k.startswith("present")}


def decoder_file(folder) -> str:
    names = {p.name for p in (folder / "onnx").iterdir()}
    return "decoder_model_merged.onnx" if "decoder_model_merged.onnx" in names else "model.onnx"


def check_decoder(folder, onnx_file: str, atol: float = ATOL):
    """Prompt step + one decode step with past against the PyTorch model of the folder."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tok(PROMPT, return_tensors="np")["input_ids"].astype(np.int64)
    sess = session(folder / "onnx" / onnx_file)
    dim = head_dim(model.config)
    first = run_decoder(sess, ids, None, dim)
    with torch.no_grad():
        pt = model(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(first["logits"], pt, atol=atol, rtol=0)
    nxt = np.array([[int(pt[0, -1].argmax())]], np.int64)
    second = run_decoder(sess, nxt, as_past(first), dim)
    with torch.no_grad():
        pt2 = model(torch.from_numpy(np.concatenate([ids, nxt], 1))).logits.numpy()[:, -1:]
    np.testing.assert_allclose(second["logits"], pt2, atol=atol, rtol=0)
    return first, second


@pytest.mark.parametrize("name", DECODERS)
def test_decoder_onnx_matches_pytorch(folders, name):
    folder = folders(name)
    first, second = check_decoder(folder, decoder_file(folder))
    layers = SPECS[name].num_hidden_layers
    assert sorted(k for k in first if k.startswith("present")) == sorted(
        f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")
    )
    assert second["present.0.key"].shape[2] == first["present.0.key"].shape[2] + 1  # grows a row a token


def test_decoder_layouts(folders):
    io = json.loads((folders("gpt2") / "fixture.json").read_text())["io"]
    assert list(io) == ["model.onnx"] and "use_cache_branch" not in io["model.onnx"]["inputs"]
    assert "position_ids" in io["model.onnx"]["inputs"]
    io = json.loads((folders("gpt2-merged") / "fixture.json").read_text())["io"]
    merged = io["decoder_model_merged.onnx"]["inputs"]
    assert "use_cache_branch" in merged and "position_ids" not in merged
    io = json.loads((folders("llama") / "fixture.json").read_text())["io"]
    assert set(io) == {"model.onnx", "model_quantized.onnx", "model_q4.onnx"}
    assert all("position_ids" in v["inputs"] for v in io.values())


@pytest.mark.parametrize("file", ["model_quantized.onnx", "model_q4.onnx"])
def test_quantized_llama_close_to_fp32(folders, file):
    from tests.fixtures.bert import op_types

    folder = folders("llama")
    assert ("com.microsoft::MatMulNBits" if "q4" in file else "ai.onnx::MatMulInteger") in op_types(
        folder / "onnx" / file
    )
    ids = np.array([[1, 40, 41, 42, 43]], np.int64)
    dim = head_dim(transformers.AutoConfig.from_pretrained(folder))
    ref = run_decoder(session(folder / "onnx" / "model.onnx"), ids, None, dim)["logits"]
    got = run_decoder(session(folder / "onnx" / file), ids, None, dim)["logits"]
    assert np.isfinite(got).all() and got.shape == ref.shape
    assert np.corrcoef(got.ravel(), ref.ravel())[0, 1] > 0.9  # 4-bit random weights: close, not equal


def test_llama_chat_template_and_generation_config(folders):
    folder = folders("llama")
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    assert "chat_template" in json.loads((folder / "tokenizer_config.json").read_text())
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<s><|start|>system\nBe brief.<|end|>\n") and text.endswith("<|start|>assistant\n")
    off = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert off.endswith("<|start|>assistant\n<think>\n\n</think>\n\n")
    with pytest.raises(Exception, match="Unknown role"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)
    with pytest.raises(Exception, match="alternate"):
        tok.apply_chat_template(
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], tokenize=False
        )
    gen = json.loads((folder / "generation_config.json").read_text())
    assert isinstance(gen["eos_token_id"], list) and len(gen["eos_token_id"]) == 2
    assert tok.convert_ids_to_tokens(gen["eos_token_id"]) == ["</s>", "<|end|>"]


def run_seq2seq(folder, model, ids: np.ndarray, atol: float = ATOL):
    enc_sess = session(folder / "onnx" / "encoder_model.onnx")
    mask = np.ones_like(ids)
    hidden = enc_sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    with torch.no_grad():
        pt_hidden = model.get_encoder()(input_ids=torch.from_numpy(ids)).last_hidden_state.numpy()
    np.testing.assert_allclose(hidden, pt_hidden, atol=atol, rtol=0)
    sess = session(folder / "onnx" / "decoder_model_merged.onnx")
    extra = {"encoder_hidden_states": hidden, "encoder_attention_mask": mask}
    start = np.array([[model.config.decoder_start_token_id]], np.int64)
    dim = head_dim(model.config)
    first = run_decoder(sess, start, None, dim, extra)
    nxt = np.array([[int(first["logits"][0, -1].argmax())]], np.int64)
    second = run_decoder(sess, nxt, as_past(first), dim, extra)
    dec = torch.from_numpy(np.concatenate([start, nxt], 1))
    with torch.no_grad():
        pt = model(input_ids=torch.from_numpy(ids), decoder_input_ids=dec).logits.numpy()
    np.testing.assert_allclose(first["logits"][:, -1], pt[:, 0], atol=atol, rtol=0)
    np.testing.assert_allclose(second["logits"][:, -1], pt[:, 1], atol=atol, rtol=0)
    return first, second


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_seq2seq_onnx_matches_pytorch(folders, name):
    folder = folders(name)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tok(PROMPT, return_tensors="np")["input_ids"].astype(np.int64)
    first, second = run_seq2seq(folder, model, ids)
    assert "present.0.encoder.key" in first and "present.0.decoder.key" in second
    assert {"encoder_model.onnx", "decoder_model_merged.onnx"} <= {
        p.name for p in (folder / "onnx").iterdir()
    }


@pytest.mark.parametrize("name", DECODERS + SEQ2SEQ)
def test_tokenizer_json_matches_transformers(folders, name):
    """tokenizer.json (what our pipelines read) encodes as the transformers (slow, if any) tokenizer."""
    from tokenizers import Tokenizer

    folder = folders(name)
    fast = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ref = transformers.AutoTokenizer.from_pretrained(folder, use_fast=False)
    for text in TEXTS:
        assert fast.encode(text).ids == ref(text)["input_ids"], (name, text)


def test_seq2seq_special_tokens(folders):
    t5 = transformers.AutoTokenizer.from_pretrained(folders("t5"))
    assert t5.convert_tokens_to_ids("<extra_id_0>") == len(t5) - 1 and t5.eos_token == "</s>"
    assert transformers.AutoConfig.from_pretrained(folders("t5")).decoder_start_token_id == t5.pad_token_id
    m2m = transformers.AutoTokenizer.from_pretrained(folders("m2m100"), src_lang="fr")
    assert m2m("Bonjour")["input_ids"][0] == m2m.convert_tokens_to_ids("__fr__")
    listed = json.loads((folders("m2m100") / "tokenizer_config.json").read_text())[
        "additional_special_tokens"
    ]
    assert "__en__" in listed and "__fr__" in listed
    nllb = transformers.AutoTokenizer.from_pretrained(
        folders("nllb"), src_lang="eng_Latn", tgt_lang="fra_Latn"
    )
    ids = nllb("Hello")["input_ids"]
    assert ids[0] == nllb.convert_tokens_to_ids("eng_Latn") and ids[-1] == nllb.eos_token_id
    marian = json.loads((folders("marian") / "generation_config.json").read_text())
    assert marian["num_beams"] > 1


@pytest.mark.parametrize("name", DECODERS + SEQ2SEQ)
def test_transformers_generate_runs_greedily(folders, name):
    folder = folders(name)
    auto = transformers.AutoModelForSeq2SeqLM if name in SEQ2SEQ else transformers.AutoModelForCausalLM
    model = auto.from_pretrained(folder).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    inputs = tok(PROMPT, return_tensors="pt")
    kw = {"forced_bos_token_id": tok.convert_tokens_to_ids("fra_Latn")} if name == "nllb" else {}
    out = model.generate(**inputs, max_new_tokens=6, do_sample=False, num_beams=1, **kw)
    new = out[0, 1:] if name in SEQ2SEQ else out[0, inputs["input_ids"].shape[1] :]
    assert 1 <= len(new) <= 6
    if name == "nllb":
        assert int(new[0]) == kw["forced_bos_token_id"]


# ---------------------------------------------------------------- onnxruntime-genai builder fixture
@pytest.fixture(scope="module")
def genai_folder(folders):
    from tests.fixtures.genai_models import GenaiUnavailable

    try:
        return folders("qwen2-genai")
    except GenaiUnavailable as e:
        pytest.skip(f"onnxruntime-genai venv unavailable: {e}")


@pytest.mark.slow
def test_genai_fp32_matches_pytorch(genai_folder):
    from tests.fixtures.bert import op_types

    ops = op_types(genai_folder / "onnx" / "model.onnx")
    assert "com.microsoft::GroupQueryAttention" in ops
    first, second = check_decoder(genai_folder, "model.onnx")
    assert "position_ids" not in {i.name for i in session(genai_folder / "onnx" / "model.onnx").get_inputs()}


@pytest.mark.slow
def test_genai_int4_and_reference_generation(genai_folder):
    from tests.fixtures.bert import op_types
    from tests.fixtures.genai_models import genai_python

    assert "com.microsoft::MatMulNBits" in op_types(genai_folder / "onnx" / "model_q4.onnx")
    ids = np.array([[1, 40, 41, 42]], np.int64)
    dim = head_dim(transformers.AutoConfig.from_pretrained(genai_folder))
    ref = run_decoder(session(genai_folder / "onnx" / "model.onnx"), ids, None, dim)["logits"]
    got = run_decoder(session(genai_folder / "onnx" / "model_q4.onnx"), ids, None, dim)["logits"]
    assert np.corrcoef(got.ravel(), ref.ravel())[0, 1] > 0.9  # int4 weights: close, not equal
    r = subprocess.run(
        [
            str(genai_python()),
            "benchmarks/genai_reference.py",
            str(genai_folder),
            "--prompt-ids",
            "1,40,41,42",
            "--max-new-tokens",
            "4",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(result["generated_ids"]) == 4
    # onnxruntime-genai's greedy ids are the ones our session loop finds from the same int4 file
    sess = session(genai_folder / "onnx" / "model_q4.onnx")
    config = transformers.AutoConfig.from_pretrained(genai_folder)
    ids, past, got = np.array([[1, 40, 41, 42]], np.int64), None, []
    for _ in range(4):
        out = run_decoder(sess, ids, past, head_dim(config))
        ids = np.array([[int(out["logits"][0, -1].argmax())]], np.int64)
        past = as_past(out)
        got.append(int(ids[0, 0]))
    assert got == result["generated_ids"]
