"""Logits processors, warpers, sampling keys and beam search against transformers 4.57.

Processors run on random logits and random token histories on the numpy, mlx and torch backends and
are compared with transformers' classes (1e-6). Beam search is driven by the logits of a tiny random
GPT-2 in torch and compared token for token with ``model.generate(num_beams=...)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from transmuter_mlx.converters.backends import get_backend
from transmuter_mlx.generation import processors as P
from transmuter_mlx.generation.beam import BeamSearch
from transmuter_mlx.generation.config import GenerationConfig
from transmuter_mlx.generation.sampling import RowKeys, greedy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers.generation import logits_process as LP  # noqa: E402

BACKENDS = ["numpy", "mlx", "torch"]
EOS = [3, 7]


def _data(seed: int, rows: int = 5, length: int = 12, vocab: int = 40, low_vocab: int = 6):
    rng = np.random.default_rng(seed)
    scores = (rng.standard_normal((rows, vocab)) * 3).astype(np.float32)
    tokens = rng.integers(0, low_vocab, (rows, length))  # a small alphabet: repeats and n-grams
    return scores, tokens


def _ours(backend: str, processor, scores: np.ndarray, tokens, prompt_lengths=None, max_length=0, min_length=0):
    B = get_backend(backend)
    rows = P.Rows([list(map(int, t)) for t in tokens],
                  prompt_lengths if prompt_lengths is not None else [0] * len(tokens),
                  [max_length] * len(tokens), [min_length] * len(tokens))
    return B.to_numpy(processor(B, B.asarray(scores), rows))


def _theirs(processor, scores: np.ndarray, tokens) -> np.ndarray:
    return processor(torch.as_tensor(np.asarray(tokens, np.int64)), torch.as_tensor(scores.copy())).numpy()


def _same(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert np.array_equal(np.isneginf(ours), np.isneginf(theirs))
    finite = np.isfinite(theirs)
    np.testing.assert_allclose(ours[finite], theirs[finite], rtol=1e-6, atol=1e-6)


CASES = {
    "repetition_penalty": (lambda: P.RepetitionPenalty(1.3), lambda: LP.RepetitionPenaltyLogitsProcessor(1.3)),
    "repetition_penalty_below_1": (lambda: P.RepetitionPenalty(0.7),
                                   lambda: LP.RepetitionPenaltyLogitsProcessor(0.7)),
    "no_repeat_ngram_2": (lambda: P.NoRepeatNGram(2), lambda: LP.NoRepeatNGramLogitsProcessor(2)),
    "no_repeat_ngram_3": (lambda: P.NoRepeatNGram(3), lambda: LP.NoRepeatNGramLogitsProcessor(3)),
    "temperature": (lambda: P.Temperature(0.7), lambda: LP.TemperatureLogitsWarper(0.7)),
    "top_k": (lambda: P.TopK(5), lambda: LP.TopKLogitsWarper(5)),
    "top_k_min_keep": (lambda: P.TopK(2, 3), lambda: LP.TopKLogitsWarper(2, min_tokens_to_keep=3)),
    "top_p": (lambda: P.TopP(0.8), lambda: LP.TopPLogitsWarper(0.8)),
    "top_p_min_keep": (lambda: P.TopP(0.05, 3), lambda: LP.TopPLogitsWarper(0.05, min_tokens_to_keep=3)),
    "min_p": (lambda: P.MinP(0.1), lambda: LP.MinPLogitsWarper(0.1)),
    "min_p_min_keep": (lambda: P.MinP(0.9, 4), lambda: LP.MinPLogitsWarper(0.9, min_tokens_to_keep=4)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_processor_matches_transformers(case, backend, seed):
    ours, theirs = CASES[case]
    scores, tokens = _data(seed)
    _same(_ours(backend, ours(), scores, tokens), _theirs(theirs(), scores, tokens))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("length,min_length", [(12, 15), (12, 12), (12, 5)])
def test_min_length(backend, length, min_length):
    scores, tokens = _data(length + min_length, length=length)
    ours = _ours(backend, P.MinLength(EOS), scores, tokens, min_length=min_length)
    _same(ours, _theirs(LP.MinLengthLogitsProcessor(min_length, EOS), scores, tokens))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("prompt,min_new", [(8, 5), (8, 4), (2, 3)])
def test_min_new_tokens(backend, prompt, min_new):
    scores, tokens = _data(prompt * min_new)
    ours = _ours(backend, P.MinNewTokens(min_new, EOS), scores, tokens, prompt_lengths=[prompt] * 5)
    _same(ours, _theirs(LP.MinNewTokensLengthLogitsProcessor(prompt, min_new, EOS), scores, tokens))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("length", [1, 2])
def test_forced_bos(backend, length):
    scores, tokens = _data(length, length=length)
    _same(_ours(backend, P.ForcedBOS(9), scores, tokens), _theirs(LP.ForcedBOSTokenLogitsProcessor(9), scores, tokens))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("max_length", [13, 14, 12])
def test_forced_eos(backend, max_length):
    scores, tokens = _data(max_length)
    ours = _ours(backend, P.ForcedEOS(EOS), scores, tokens, max_length=max_length)
    _same(ours, _theirs(LP.ForcedEOSTokenLogitsProcessor(max_length, EOS), scores, tokens))


@pytest.mark.parametrize("backend", ["numpy", "mlx"])
def test_rows_count_their_own_tokens(backend):
    """Rows of different lengths in one batch: each row gets what transformers gives it alone."""
    rng = np.random.default_rng(5)
    histories = [list(rng.integers(0, 6, n)) for n in (1, 4, 9, 13)]
    prompts, max_lengths, min_lengths = [1, 2, 5, 8], [10, 5, 20, 14], [3, 6, 9, 2]
    scores = (rng.standard_normal((4, 40)) * 3).astype(np.float32)
    chain = [P.RepetitionPenalty(1.2), P.NoRepeatNGram(2), P.MinLength(EOS), P.MinNewTokens(4, EOS),
             P.ForcedBOS(11), P.ForcedEOS(EOS)]
    B = get_backend(backend)
    ours = B.to_numpy(P.apply(chain, B, B.asarray(scores), P.Rows(histories, prompts, max_lengths, min_lengths)))
    for r, tokens in enumerate(histories):
        theirs = LP.LogitsProcessorList([
            LP.RepetitionPenaltyLogitsProcessor(1.2), LP.NoRepeatNGramLogitsProcessor(2),
            LP.MinLengthLogitsProcessor(min_lengths[r], EOS),
            LP.MinNewTokensLengthLogitsProcessor(prompts[r], 4, EOS),
            LP.ForcedBOSTokenLogitsProcessor(11), LP.ForcedEOSTokenLogitsProcessor(max_lengths[r], EOS)])
        _same(ours[r:r + 1], _theirs(theirs, scores[r:r + 1], [tokens]))


def _tiny_gpt2(vocab: int = 24, seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=128, n_embd=32, n_layer=2, n_head=2,
                                     initializer_range=0.3, bos_token_id=1, eos_token_id=2)
    return transformers.GPT2LMHeadModel(config).eval()


OPTIONS = [
    dict(repetition_penalty=1.3, no_repeat_ngram_size=2, min_new_tokens=3),
    dict(do_sample=True, temperature=0.8, top_k=7, top_p=0.9, min_p=0.05, repetition_penalty=1.1),
    dict(min_length=7, forced_bos_token_id=4, forced_eos_token_id=[2, 5]),
    dict(num_beams=3, do_sample=True, top_k=4),
]


@pytest.mark.parametrize("options", OPTIONS)
def test_processor_order_matches_get_logits_processor(options):
    model = _tiny_gpt2()
    theirs_config = transformers.GenerationConfig(eos_token_id=[2, 5], max_length=30, **options)
    model._prepare_special_tokens(theirs_config, device="cpu")
    if theirs_config.min_new_tokens:  # what ``_prepare_generated_length`` does before (prompt of 4 tokens)
        theirs_config.min_length = theirs_config.min_new_tokens + 4
    theirs = model._get_logits_processor(theirs_config, input_ids_seq_length=4, device="cpu")
    names = {"RepetitionPenalty": "RepetitionPenaltyLogitsProcessor", "NoRepeatNGram": "NoRepeatNGramLogitsProcessor",
             "MinLength": "MinLengthLogitsProcessor", "MinNewTokens": "MinNewTokensLengthLogitsProcessor",
             "ForcedBOS": "ForcedBOSTokenLogitsProcessor", "ForcedEOS": "ForcedEOSTokenLogitsProcessor",
             "Temperature": "TemperatureLogitsWarper", "TopK": "TopKLogitsWarper", "TopP": "TopPLogitsWarper",
             "MinP": "MinPLogitsWarper"}
    ours = P.build_processors(GenerationConfig(eos_token_id=[2, 5], max_length=30, **options))
    assert [names[type(p).__name__] for p in ours] == [type(p).__name__ for p in theirs]
    for mine, their in zip(ours, theirs):
        if hasattr(their, "min_tokens_to_keep"):
            assert mine.min_tokens_to_keep == their.min_tokens_to_keep


# ---------------------------------------------------------------- token selection
@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_takes_first_maximum(backend):
    scores = np.array([[0, 3, 3, 1], [2, 2, 2, 2], [-1, -5, -1, -9]], np.float32)
    B = get_backend(backend)
    assert greedy(B, B.asarray(scores)).tolist() == torch.argmax(torch.as_tensor(scores), -1).tolist() == [1, 0, 0]


def test_row_keys_do_not_depend_on_neighbours():
    B = get_backend("mlx")
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((3, 100)) * 2).astype(np.float32)
    alone = [RowKeys([11]).sample(B, B.asarray(scores[1:2]))[0] for _ in range(1)]
    batch = RowKeys([5, 11, 12]).sample(B, B.asarray(scores))
    assert batch[1] == alone[0]
    walk_alone, walk_batch, keys_alone, keys_batch = [], [], RowKeys([11]), RowKeys([3, 11])
    for _ in range(20):
        walk_alone.append(keys_alone.sample(B, B.asarray(scores[1:2]))[0])
        walk_batch.append(keys_batch.sample(B, B.asarray(scores[:2]))[1])
    assert walk_alone == walk_batch and len(set(walk_alone)) > 3
    numpy_path = RowKeys([5, 11, 12]).sample(get_backend("numpy"), scores)
    assert numpy_path.tolist() == batch.tolist()


def test_sampling_follows_the_distribution():
    B = get_backend("mlx")
    probs = np.array([0.5, 0.3, 0.2, 0.0], np.float32)
    logits = np.log(np.maximum(probs, 1e-30)).astype(np.float32)
    logits[3] = -np.inf
    keys = RowKeys(list(range(4000)))
    counts = np.bincount(keys.sample(B, B.asarray(np.tile(logits, (4000, 1)))), minlength=4) / 4000
    np.testing.assert_allclose(counts, probs, atol=0.03)
    assert counts[3] == 0


# ---------------------------------------------------------------- beam search
def _run_beam(model, prompts: list[list[int]], config: GenerationConfig):
    """Our BeamSearch driven by the torch model's logits (no cache: the rows are re-run in full)."""
    n = config.num_beams
    lengths = [config.lengths(len(p)) for p in prompts]
    search = BeamSearch([len(p) for p in prompts], [m for m, _ in lengths], n, config.eos_ids,
                        config.length_penalty, config.early_stopping, config.num_return_sequences, config.pad_id)
    chain = P.build_processors(config)
    B = get_backend("torch")
    while not search.done:
        rows = [prompts[r // n] + new for r, new in enumerate(search.new_tokens())]
        with torch.no_grad():
            logits = torch.cat([model(torch.tensor([row])).logits[:, -1, :].float() for row in rows])
        log_probs = torch.log_softmax(logits, -1)
        info = P.Rows(rows, [len(prompts[r // n]) for r in range(len(rows))],
                      [lengths[r // n][0] for r in range(len(rows))], [lengths[r // n][1] for r in range(len(rows))])
        search.step(P.apply(chain, B, log_probs, info).numpy())
    return search.results()


BEAM_CASES = [
    dict(num_beams=3, length_penalty=1.0, early_stopping=False, num_return_sequences=1),
    dict(num_beams=3, length_penalty=0.8, early_stopping=True, num_return_sequences=2),
    dict(num_beams=4, length_penalty=1.3, early_stopping=False, num_return_sequences=2),
    dict(num_beams=4, length_penalty=1.3, early_stopping="never", num_return_sequences=2),
    dict(num_beams=3, length_penalty=0.8, early_stopping="never", num_return_sequences=3),
    dict(num_beams=4, length_penalty=-0.5, early_stopping=True, num_return_sequences=4),
    dict(num_beams=3, length_penalty=1.0, early_stopping=False, num_return_sequences=2,
         no_repeat_ngram_size=2, repetition_penalty=1.2),
]


@pytest.mark.parametrize("case", range(len(BEAM_CASES)))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_matches_generate(case, seed):
    options = BEAM_CASES[case]
    model = _tiny_gpt2(seed=seed)
    rng = np.random.default_rng(seed)
    prompts = [list(map(int, rng.integers(3, 24, 5))) for _ in range(2)]
    eos = [2, 6] if seed == 2 else 2
    config = GenerationConfig(eos_token_id=eos, pad_token_id=0, max_new_tokens=14, **options)
    ours = _run_beam(model, prompts, config)
    for i, prompt in enumerate(prompts):
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 do_sample=False, max_new_tokens=14, eos_token_id=eos, pad_token_id=0,
                                 output_scores=True, return_dict_in_generate=True, **options)
        theirs = out.sequences[:, len(prompt):].tolist()
        width = len(theirs[0])
        fill = 2  # transformers fills with ``pad_token_id or eos_token_id[0]``: a pad id of 0 gives eos
        mine = [seq + [fill] * (width - len(seq)) for seq, _ in ours[i]]
        assert mine == theirs, (i, mine, theirs)
        np.testing.assert_allclose([s for _, s in ours[i]], out.sequences_scores.numpy(), rtol=1e-5)


def test_beam_search_batch_equals_alone():
    model = _tiny_gpt2(seed=3)
    prompts = [[5, 9, 11], [4, 4, 8, 19, 20, 7, 3], [12]]
    config = GenerationConfig(eos_token_id=2, pad_token_id=0, max_new_tokens=10, num_beams=3, num_return_sequences=2)
    together = _run_beam(model, prompts, config)
    assert together == [_run_beam(model, [p], config)[0] for p in prompts]
