"""text_to_text against transformers' ``generate`` on the fixtures' PyTorch weights (T5, Marian, M2M100, NLLB).

Our token ids must equal those of ``AutoModelForSeq2SeqLM.generate`` on the same inputs: greedy,
beam search, the defaults of generation_config.json, and the language tokens of NLLB and M2M100.
The random-weight fixtures tend to repeat one token; the "probe" options (repetition penalty and
no-repeat n-grams) make each step's choice depend on the ranking of many tokens.
"""

from __future__ import annotations

import functools
import weakref

import numpy as np
import pytest

import transmuter_mlx as tm
from tests.fixtures.generation_models import build
from transmuter_mlx.generation import seq2seq
from transmuter_mlx.generation.config import GenerationConfig
from transmuter_mlx.generation.loop import generate
from transmuter_mlx.generation.seq2seq import EncoderDecoderSession
from transmuter_mlx.pipelines.text_to_text import TextToText

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FAMILIES = ("t5", "marian", "m2m100", "nllb")
BACKENDS = ("mlx", "torch")
TEXTS = ["the cat sat on the mat", "hello world, this is a longer sentence about many things we know", "a"]
PROBE = {"repetition_penalty": 1.3, "no_repeat_ngram_size": 3}
LANGUAGES = {
    "m2m100": ("__fr__", "__de__", "fr", "de"),
    "nllb": ("fra_Latn", "deu_Latn", "fra_Latn", "deu_Latn"),
}


@functools.cache
def _reference(family: str):
    folder = build(family)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    return tok, model


def reference(family: str, texts: list[str], src: str | None = None, tgt: str | None = None, **options):
    """transformers' new tokens of each returned sequence, grouped by input, with pad after eos kept."""
    tok, model = _reference(family)
    if src is not None:
        tok.src_lang = src
    enc = tok(texts, return_tensors="pt", padding=True)
    if src is not None:
        tok.src_lang = {"m2m100": "en", "nllb": "eng_Latn"}[family]
    if tgt is not None:
        options["forced_bos_token_id"] = (
            tok.convert_tokens_to_ids(tgt) if family == "nllb" else tok.get_lang_id(tgt)
        )
    with torch.no_grad():
        out = model.generate(**enc, **options).tolist()
    n = options.get("num_return_sequences", 1)
    return [[row[1:] for row in out[i * n : (i + 1) * n]] for i in range(len(texts))]


def assert_same(family: str, ours: list[list[int]], theirs: list[list[int]]) -> None:
    """Each of our sequences is transformers' one, which may go on with padding after it stopped."""
    pad, eos = _pads(family)
    assert len(ours) == len(theirs)
    for mine, ref in zip(ours, theirs):
        assert ref[: len(mine)] == mine, (mine, ref)
        rest = ref[len(mine) :]
        assert all(t == pad for t in rest), (mine, ref)
        assert not rest or mine[-1] in eos, (mine, ref)


@functools.cache
def _pads(family: str) -> tuple[int, list[int]]:
    config = GenerationConfig.from_repo(build(family))
    return config.pad_id, config.eos_ids


@functools.cache
def pipe(family: str, backend: str, batch: int = 1):
    return tm.text.text_to_text(str(build(family)), backend=backend, compile={"batch_size": batch})


def ours(family: str, backend: str, texts: list[str], batch: int = 1, **options) -> list[list[list[int]]]:
    return [seqs for seqs, _ in pipe(family, backend, batch).generate_ids(texts, options)]


# ---------------------------------------------------------------------- greedy
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_batch_one_and_three(family, backend):
    for options in ({"max_new_tokens": 24}, {"max_new_tokens": 32, **PROBE}):
        options = {**options, "num_beams": 1}
        alone = [reference(family, [t], **options)[0] for t in TEXTS]
        assert_same(family, ours(family, backend, TEXTS[:1], **options)[0], alone[0])
        batched = ours(family, backend, TEXTS, batch=3, **options)
        for mine, ref in zip(batched, reference(family, TEXTS, **options)):
            assert_same(family, mine, ref)
        for mine, ref in zip(batched, alone):
            assert_same(family, mine, ref)


# ---------------------------------------------------------------------- beam search
BEAMS = [
    {"num_beams": 3, "length_penalty": 0.6, "num_return_sequences": 2, "max_new_tokens": 20, **PROBE},
    {
        "num_beams": 4,
        "length_penalty": 1.5,
        "early_stopping": True,
        "max_new_tokens": 24,
        "no_repeat_ngram_size": 2,
    },
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_beam_search(family, backend):
    for options in BEAMS:
        for mine, ref in zip(
            ours(family, backend, TEXTS, batch=3, **options), reference(family, TEXTS, **options)
        ):
            assert_same(family, mine, ref)


@pytest.mark.parametrize("family", ["marian", "m2m100"])
def test_defaults_of_generation_config(family):
    """Marian asks for 4 beams (max_length 64, bad_words_ids [[pad]], renormalize_logits); the
    M2M100 fixture for 2 beams with early stopping."""
    p = pipe(family, "mlx", 3)
    assert p.generation.num_beams > 1
    for mine, ref in zip(ours(family, "mlx", TEXTS, batch=3), reference(family, TEXTS)):
        assert_same(family, mine, ref)
    result = p(TEXTS[0])["results"]
    assert len(result) == 1


# ---------------------------------------------------------------------- languages
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", ["m2m100", "nllb"])
def test_source_and_target_languages(family, backend):
    src, tgt, src_ref, tgt_ref = LANGUAGES[family]
    options = {"max_new_tokens": 20, "num_beams": 1, **PROBE}
    theirs = reference(family, TEXTS, src=src_ref, tgt=tgt_ref, **options)
    mine = ours(
        family, backend, TEXTS, batch=3, source_language_token=src, target_language_token=tgt, **options
    )
    for m, r in zip(mine, theirs):
        assert_same(family, m, r)
        assert m[0][0] == pipe(family, backend, 3).tokenizer.token_to_id(tgt)
    beams = {"num_beams": 3, "num_return_sequences": 2, "max_new_tokens": 16, "length_penalty": 0.8}
    theirs = reference(family, TEXTS[:2], src=src_ref, tgt=tgt_ref, **beams)
    mine = ours(
        family, backend, TEXTS[:2], batch=3, source_language_token=src, target_language_token=tgt, **beams
    )
    for m, r in zip(mine, theirs):
        assert_same(family, m, r)


@pytest.mark.parametrize("family", ["m2m100", "nllb"])
def test_source_language_token_in_the_encoding(family):
    src, _, src_ref, _ = LANGUAGES[family]
    tok, _ = _reference(family)
    tok.src_lang = src_ref
    theirs = tok(TEXTS)["input_ids"]
    tok.src_lang = {"m2m100": "en", "nllb": "eng_Latn"}[family]
    ids, mask, lengths = pipe(family, "mlx").encode(TEXTS, src)
    assert [row[:n].tolist() for row, n in zip(ids, lengths)] == theirs
    assert lengths == [len(t) for t in theirs] and mask.sum(-1).tolist() == lengths


# ---------------------------------------------------------------------- results and text
@pytest.mark.parametrize("family", FAMILIES)
def test_results_text_and_summary(family):
    tok, _ = _reference(family)
    options = {"max_new_tokens": 12, "num_beams": 3, "num_return_sequences": 2, **PROBE}
    out = pipe(family, "mlx", 3)(TEXTS, **options)
    assert isinstance(out, list) and len(out) == 3
    widths = set()
    for text, result, ref in zip(TEXTS, out, reference(family, TEXTS, **options)):
        assert len(result["results"]) == 2
        for item, ids in zip(result["results"], ref):
            decoded = tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            if family == "marian":  # MarianTokenizer (slow, no fast version) strips the decoded text
                assert item["text"].strip() == decoded
            else:
                assert item["text"] == decoded
            summary = item["token_summary"]
            assert summary["input"] == len(tok(text)["input_ids"])
            assert 1 <= summary["output"] <= 12
            widths.add(summary["padding"] + summary["input"])  # the compiled length of the batch
    assert len(widths) == 1 and widths <= {32, 128}
    single = pipe(family, "mlx", 3)(TEXTS[0], max_new_tokens=4, num_beams=1)
    assert set(single) == {"results"} and set(single["results"][0]) == {"text", "token_summary"}


@pytest.mark.parametrize("family", ["t5", "nllb"])
def test_empty_text_matches_transformers(family):
    options = {"max_new_tokens": 10, "num_beams": 1, **PROBE}
    assert_same(family, ours(family, "mlx", [""], **options)[0], reference(family, [""], **options)[0])
    assert pipe(family, "mlx")([]) == []


def test_task_names_and_aliases():
    folder = str(build("t5"))
    for task in ("text2text-generation", "translation", "summarization", "text_to_text"):
        assert isinstance(tm.pipeline(task, folder), TextToText)


# ---------------------------------------------------------------------- bad input
def test_max_new_tokens_zero_is_an_error():
    with pytest.raises(ValueError, match="max_new_tokens must be greater than 0"):
        pipe("t5", "mlx")("a", max_new_tokens=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        tm.text.text_to_text(str(build("t5")), max_new_tokens=0)


@pytest.mark.parametrize("option", ["source_language_token", "target_language_token"])
def test_unknown_language_code(option):
    with pytest.raises(ValueError) as err:
        pipe("nllb", "mlx")("a", **{option: "xx_Yyyy"})
    message = str(err.value)
    assert "xx_Yyyy" in message and option in message and "tokenizer.json" in message
    assert len(message) < 400
    with pytest.raises(ValueError, match="xx_Yyyy"):
        tm.text.text_to_text(str(build("m2m100")), target_language_token="xx_Yyyy")


def test_source_language_without_language_template():
    with pytest.raises(ValueError, match="no language token"):
        pipe("t5", "mlx")("a", source_language_token="</s>")


def test_unknown_option_is_a_type_error():
    with pytest.raises(TypeError, match="num_beam"):
        pipe("t5", "mlx")("a", num_beam=2)


# ---------------------------------------------------------------------- the session
def test_split_decoders_equal_the_merged_one():
    folder = build("marian")
    onnx = folder / "onnx"
    enc = tm.load(onnx / "encoder_model.onnx")
    merged = EncoderDecoderSession(enc, tm.load(onnx / "decoder_model_merged.onnx"))
    split = EncoderDecoderSession(
        enc, tm.load(onnx / "decoder_model.onnx"), tm.load(onnx / "decoder_with_past_model.onnx")
    )
    tok, _ = _reference("marian")
    batch = tok(TEXTS, return_tensors="np", padding=True)
    config = GenerationConfig.from_repo(folder).update(max_new_tokens=16, num_beams=3, **PROBE)
    results = []
    for session in (merged, split):
        session.encode({"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]})
        results.append(generate(session, [[config.start_id]] * 3, config).sequences)
    assert results[0] == results[1]
    assert merged.layout.heads == 4 and merged.layout.head_dim == 16 and len(merged.layout.names) == 4


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", ["t5", "marian"])
def test_beams_of_one_input_read_its_cross_attention_cache_once(family, backend, monkeypatch):
    """One input's beams share its cross-attention cache at the steps (batch 1, which the decoder's attention
    broadcasts over them): each text alone with 3 beams still equals transformers', and the check that the decoder
    broadcasts the cache (run once per decoder, at the first step) found that it does."""
    shares = weakref.WeakKeyDictionary()
    monkeypatch.setattr(seq2seq, "_SHARES", shares)
    for text in TEXTS[:2]:
        for mine, ref in zip(ours(family, backend, [text], **BEAMS[0]), reference(family, [text], **BEAMS[0])):
            assert_same(family, mine, ref)
    assert list(shares.values()) == [True]


class ReshapesByRows:
    """A decoder whose steps read the cross-attention cache by the rows' count (as transformers' Whisper reshapes
    the encoder states by it): from a cache of batch 1, other logits of the same shape."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, feeds, **options):
        out = self.model(feeds, **options)
        cross = [v for n, v in feeds.items() if ".encoder." in n]
        if cross and self.backend.shape(cross[0])[0] != self.backend.shape(out["logits"])[0]:
            out = {**out, "logits": self.backend.add(out["logits"], self.backend.asarray(np.float32(1.0)))}
        return out


def test_beams_keep_their_copies_where_the_decoder_does_not_broadcast_the_cache(monkeypatch):
    monkeypatch.setattr(seq2seq, "_SHARES", weakref.WeakKeyDictionary())
    onnx = build("marian") / "onnx"
    encoder, decoder = tm.load(onnx / "encoder_model.onnx"), tm.load(onnx / "decoder_model_merged.onnx")
    tok, _ = _reference("marian")
    batch = tok(TEXTS[1:2], return_tensors="np")
    config = GenerationConfig.from_repo(build("marian")).update(max_new_tokens=12, num_beams=3, **PROBE)
    results = []
    for model in (ReshapesByRows(decoder), decoder):
        session = EncoderDecoderSession(encoder, model)
        session.encode({"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]})
        results.append(generate(session, [[config.start_id]], config).sequences)
        rows = {session.B.shape(session.cache[n])[0] for n in session.layout.cross}
        assert rows == ({3} if model is not decoder else {1}) and seq2seq._SHARES[model] is (model is decoder)
    assert results[0] == results[1]


def test_session_needs_encode_first():
    onnx = build("t5") / "onnx"
    session = EncoderDecoderSession(
        tm.load(onnx / "encoder_model.onnx"), tm.load(onnx / "decoder_model_merged.onnx")
    )
    with pytest.raises(RuntimeError, match="encode"):
        session.prefill([[0]])
    assert np.isfinite(np.asarray(session.layout.heads))


# ---------------------------------------------------------------------- bad words and renormalization
@pytest.mark.parametrize("backend", ["numpy", "mlx"])
def test_bad_words_and_logit_normalization_match_transformers(backend):
    from transformers.generation import logits_process as LP

    from transmuter_mlx.converters.backends import get_backend
    from transmuter_mlx.generation import processors as P

    B = get_backend(backend)
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((4, 12)) * 3).astype(np.float32)
    tokens = [[0, 5, 6], [1, 2, 5], [5, 6, 5], [3, 3, 3]]
    bad = [[4], [5, 6, 7], [6, 5, 8], [9]]
    config = GenerationConfig(bad_words_ids=bad, eos_token_id=9, renormalize_logits=True)
    chain = P.build_processors(config)
    assert [type(p).__name__ for p in chain] == ["NoBadWords", "LogitNormalization"]
    rows = P.Rows(tokens, [1] * 4, [20] * 4, [0] * 4)
    mine = B.to_numpy(P.apply(chain, B, B.asarray(scores), rows))
    ids, theirs = torch.as_tensor(tokens), torch.as_tensor(scores.copy())
    theirs = LP.NoBadWordsLogitsProcessor(bad, eos_token_id=9)(ids, theirs)
    theirs = LP.LogitNormalization()(ids, theirs).numpy()
    assert np.array_equal(np.isneginf(mine), np.isneginf(theirs))
    np.testing.assert_allclose(mine[np.isfinite(theirs)], theirs[np.isfinite(theirs)], rtol=1e-5, atol=1e-5)


def test_generation_config_reads_bad_words_and_renormalize():
    config = GenerationConfig.from_repo(build("marian"))
    assert config.bad_words_ids == [[config.pad_token_id]] and config.renormalize_logits is True


def test_seeded_sampling_repeats_and_batches_alike():
    options = {"do_sample": True, "seed": 7, "top_k": 20, "temperature": 0.9, "max_new_tokens": 12, "num_beams": 1}
    alone = ours("m2m100", "mlx", TEXTS[:1], num_return_sequences=2, **options)
    again = ours("m2m100", "mlx", TEXTS, batch=3, num_return_sequences=2, **options)
    assert alone[0] == again[0] and len(again[1]) == 2
    out = pipe("m2m100", "mlx")(TEXTS[0], num_return_sequences=2, **options)
    assert len(out["results"]) == 2
