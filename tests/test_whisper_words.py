"""generation/whisper_words against transformers 4.57.6's own token timestamps (``_median_filter``,
``_dynamic_time_warping``, ``WhisperGenerationMixin._extract_token_timestamps``) on random cross attentions:
exact equality (the filter picks input values; the DTW runs the same float32 costs; the timestamps are
frames x 0.02 s).

The attentions are softmaxes along the frames of noise, peaked around rising positions (a speech-like
alignment) or not (pure noise), some exactly 0 where they underflow; prompts of 1-4 tokens; num_frames
absent, one int, one per row or repeated over beams; beam search's beam_indices with finished beams.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from transmuter_mlx.generation import whisper_words as ww

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers.models.whisper import generation_whisper as gw  # noqa: E402

LAYERS, HEADS = 4, 6


class Outputs(dict):
    """transformers' generate output: keys tested with ``in``, read as attributes."""

    __getattr__ = dict.__getitem__


def attentions(rng: np.random.Generator, rows: int, tokens: int, frames: int) -> np.ndarray:
    """(rows, LAYERS, HEADS, tokens, frames) float32 softmaxes over the frames."""
    noise = rng.normal(0, float(rng.choice([0.5, 2.0, 8.0])), size=(rows, LAYERS, HEADS, tokens, frames))
    if rng.random() < 0.8:  # each token peaked at a rising frame, as speech aligns
        position = np.sort(rng.uniform(0, frames, size=(rows, 1, 1, tokens, 1)), axis=3)
        noise -= (np.arange(frames) - position) ** 2 / rng.uniform(2, 300)
    e = np.exp(noise - noise.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def steps_of(full: np.ndarray, num_input_ids: int) -> list[tuple[np.ndarray, ...]]:
    """Per decoding step, per layer: the prefill step holds the prompt's tokens, then one token a step."""
    steps, at = [], 0
    for size in [num_input_ids] + [1] * (full.shape[3] - num_input_ids):
        steps.append(tuple(np.ascontiguousarray(full[:, layer, :, at:at + size]) for layer in range(LAYERS)))
        at += size
    return steps


def reference(steps, heads, *, num_input_ids, sequences, num_frames=None, beam_indices=None) -> np.ndarray:
    outputs = Outputs(cross_attentions=tuple(tuple(torch.from_numpy(x) for x in step) for step in steps),
                      sequences=torch.zeros(sequences, dtype=torch.long))
    if beam_indices is not None:
        outputs["beam_indices"] = torch.from_numpy(beam_indices)
    model = SimpleNamespace(config=SimpleNamespace(decoder_layers=LAYERS, median_filter_width=7))
    if isinstance(num_frames, np.ndarray):
        num_frames = torch.from_numpy(num_frames)  # as generate passes it: attention_mask.sum(-1)
    result = gw.WhisperGenerationMixin._extract_token_timestamps(
        model, outputs, heads, num_frames=num_frames, num_input_ids=num_input_ids)
    return result.numpy()


def random_heads(rng) -> list[list[int]]:
    return [[int(rng.integers(LAYERS)), int(rng.integers(HEADS))] for _ in range(int(rng.integers(1, 6)))]


def random_frames(rng, rows: int, frames: int):
    kind = rng.integers(4)
    if kind == 0:
        return None
    if kind == 1:
        return int(rng.integers(2, 2 * frames + 2))
    if kind == 2:
        return np.full(rows, int(rng.integers(2, 2 * frames + 2)), dtype=np.int64)
    return rng.integers(2, 2 * frames + 2, size=rows).astype(np.int64)


def test_token_timestamps_random():
    rng = np.random.default_rng(7)
    for case in range(60):
        rows, num_input_ids = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        generated, frames = int(rng.integers(1, 30)), int(rng.integers(8, 150))
        full = attentions(rng, rows, num_input_ids + generated - 1, frames)
        steps, heads = steps_of(full, num_input_ids), random_heads(rng)
        num_frames = random_frames(rng, rows, frames)
        expected = reference(steps, heads, num_input_ids=num_input_ids, sequences=(rows, num_input_ids + generated),
                             num_frames=num_frames)
        got = ww.token_timestamps(steps, heads, num_input_ids=num_input_ids, num_frames=num_frames)
        assert got.dtype == np.float32 and got.shape == expected.shape, case
        np.testing.assert_array_equal(got, expected, err_msg=f"case {case}")
        layers = [np.concatenate([s[layer] for s in steps], axis=2) for layer in range(LAYERS)]
        np.testing.assert_array_equal(ww.token_timestamps(layers, heads, num_input_ids=num_input_ids,
                                                          num_frames=num_frames), expected)


def test_token_timestamps_long_alignment():
    """Whisper-sized: 1500 frames (30 s), a hundred tokens, the audio's frames cut by num_frames."""
    rng = np.random.default_rng(8)
    for case in range(2):
        full = attentions(rng, 1, 3 + 100, 1500)
        steps, heads = steps_of(full, 3), random_heads(rng)
        num_frames = np.array([int(rng.integers(1000, 3001))])
        expected = reference(steps, heads, num_input_ids=3, sequences=(1, 104), num_frames=num_frames)
        got = ww.token_timestamps(steps, heads, num_input_ids=3, num_frames=num_frames)
        np.testing.assert_array_equal(got, expected, err_msg=f"case {case}")
        assert got[0, -1] > 10 * 0.02  # aligned across the audio, not stuck at its start


def test_token_timestamps_beam_search():
    """Beam search: each returned sequence takes at each step the attention rows of its beam; beams that
    ended early are -1 after their end."""
    rng = np.random.default_rng(9)
    for case in range(40):
        beams, sequences, num_input_ids = int(rng.integers(2, 5)), int(rng.integers(1, 3)), int(rng.integers(1, 5))
        generated, frames = int(rng.integers(2, 20)), int(rng.integers(8, 120))
        full = attentions(rng, beams * sequences, num_input_ids + generated - 1, frames)
        steps, heads = steps_of(full, num_input_ids), random_heads(rng)
        beam_indices = rng.integers(0, beams * sequences, size=(sequences, generated)).astype(np.int64)
        for row in range(sequences):  # an ended sequence: -1 after its end
            beam_indices[row, int(rng.integers(1, generated + 1)):] = -1
        num_frames = random_frames(rng, sequences, frames) if rng.random() < 0.5 else None
        length = int((beam_indices != -1).sum(-1).max()) + num_input_ids
        expected = reference(steps, heads, num_input_ids=num_input_ids, sequences=(sequences, length),
                             num_frames=num_frames, beam_indices=beam_indices)
        got = ww.token_timestamps(steps, heads, num_input_ids=num_input_ids, num_frames=num_frames,
                                  beam_indices=beam_indices)
        np.testing.assert_array_equal(got, expected, err_msg=f"case {case}")


def test_single_generated_token_gives_zeros():
    rng = np.random.default_rng(10)
    steps = steps_of(attentions(rng, 2, 3, 50), 3)  # the prefill only: nothing generated to align
    expected = reference(steps, [[1, 2]], num_input_ids=3, sequences=(2, 4))
    got = ww.token_timestamps(steps, [[1, 2]], num_input_ids=3)
    np.testing.assert_array_equal(got, expected)
    assert got.shape == (2, 4) and not got.any()


def test_median_filter_random():
    rng = np.random.default_rng(11)
    for case in range(120):
        shape = tuple(int(n) for n in rng.integers(1, 6, size=int(rng.integers(3, 5))))
        shape = (*shape[:-1], int(rng.integers(1, 40)))
        x = rng.normal(size=shape).astype(np.float32)
        if rng.random() < 0.5:
            x = np.round(x)  # ties
        if rng.random() < 0.3:
            x[rng.random(shape) < 0.1] = rng.choice([np.nan, np.inf, -np.inf])
        width = int(rng.choice([1, 3, 5, 7, 9]))
        expected = gw._median_filter(torch.from_numpy(x), width).numpy()
        np.testing.assert_array_equal(ww.median_filter(x, width), expected, err_msg=f"case {case}")
    with pytest.raises(ValueError, match="odd"):
        ww.median_filter(x, 4)


def test_dynamic_time_warping_random():
    rng = np.random.default_rng(12)
    for case in range(150):
        n, m = int(rng.integers(1, 25)), int(rng.integers(1, 60))
        matrix = rng.normal(size=(n, m))
        if rng.random() < 0.4:
            matrix = np.round(matrix * 2)  # many ties: the tie rules decide
        if rng.random() < 0.1:
            matrix[int(rng.integers(n))] = np.nan  # a NaN row (a frame all tokens attend alike)
        expected = gw._dynamic_time_warping(matrix)
        got = ww.dynamic_time_warping(matrix)
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b, err_msg=f"case {case}")


def test_bad_input():
    rng = np.random.default_rng(13)
    steps = steps_of(attentions(rng, 1, 5, 30), 2)
    with pytest.raises(ValueError, match="layer 7 is not among"):
        ww.token_timestamps(steps, [[7, 0]], num_input_ids=2)
    with pytest.raises(ValueError, match="head 9 of layer 1 is out of its 6 heads"):
        ww.token_timestamps(steps, [[1, 9]], num_input_ids=2)
    with pytest.raises(ValueError, match=r"step 0, layer 0\): expected \(batch, heads, tokens, frames\)"):
        ww.token_timestamps([[s[0][0] for s in steps]], [[0, 0]], num_input_ids=2)
    with pytest.raises(ValueError, match="num_input_ids"):
        ww.token_timestamps(steps, [[0, 0]], num_input_ids=9)
    with pytest.raises(ValueError, match="num_frames"):
        ww.token_timestamps(steps, [[0, 0]], num_input_ids=2, num_frames=[1.5])
    with pytest.raises(ValueError, match="cross_attentions: empty"):
        ww.token_timestamps([], [[0, 0]], num_input_ids=2)
    with pytest.raises(ValueError, match="beam_indices"):
        ww.token_timestamps(steps, [[0, 0]], num_input_ids=2, beam_indices=np.zeros((1, 9), np.int64) + 3)


@pytest.mark.slow
def test_real_whisper_pipeline(monkeypatch):
    """The real whisper-tiny.en in transformers' pipeline on real speech, 4 s windows two at a time, 2 beams,
    word timestamps: every ``_extract_token_timestamps`` call (real cross attentions, beam_indices, the
    windows' num_frames) and the ``_decode_asr`` call (strides, padded rows, merges) give exactly what ours do
    on the same inputs."""
    import copy

    from transformers import pipeline
    from transformers.models.whisper import tokenization_whisper, tokenization_whisper_fast

    from tests.fixtures.speech import speech
    from tests.fixtures.whisper_real import build
    from transmuter_mlx.generation import whisper_text as wt
    from transmuter_mlx.tokenizer import Tokenizer

    folder = build("whisper-tiny.en")
    calls: dict[str, list] = {"times": [], "asr": []}
    extract = gw.WhisperGenerationMixin._extract_token_timestamps
    decode_asr = tokenization_whisper._decode_asr

    def spy_extract(self, outputs, heads, time_precision=0.02, num_frames=None, num_input_ids=None):
        result = extract(self, outputs, heads, time_precision, num_frames, num_input_ids)
        calls["times"].append(dict(
            steps=[[x.numpy().copy() for x in step] for step in outputs.cross_attentions], heads=heads,
            num_frames=num_frames.numpy() if isinstance(num_frames, torch.Tensor) else num_frames,
            num_input_ids=num_input_ids, expected=result.numpy(),
            beam_indices=outputs["beam_indices"].numpy() if "beam_indices" in outputs else None))
        return result

    def spy_decode(tokenizer, model_outputs, **options):
        windows = [{k: (np.asarray(v) if k == "tokens" else [np.asarray(x) for x in v] if k == "token_timestamps"
                        else v) for k, v in o.items()} for o in model_outputs]
        text, optional = decode_asr(tokenizer, model_outputs, **options)
        calls["asr"].append((copy.deepcopy(windows), options, {"text": text, **optional}))
        return text, optional

    monkeypatch.setattr(gw.WhisperGenerationMixin, "_extract_token_timestamps", spy_extract)
    monkeypatch.setattr(tokenization_whisper_fast, "_decode_asr", spy_decode)
    transformers_logging = pytest.importorskip("transformers.utils.logging")
    transformers_logging.set_verbosity_error()
    asr = pipeline("automatic-speech-recognition", model=str(folder))
    wave, _ = speech("beckett")
    result = asr(wave.copy(), return_timestamps="word", chunk_length_s=4.0, batch_size=2,
                 generate_kwargs={"num_beams": 2})
    assert len(result["chunks"]) > 10 and len(calls["times"]) > 1 and len(calls["asr"]) == 1
    assert all(call["beam_indices"] is not None for call in calls["times"])
    for call in calls["times"]:
        got = ww.token_timestamps(call["steps"], call["heads"], num_input_ids=call["num_input_ids"],
                                  num_frames=call["num_frames"], beam_indices=call["beam_indices"])
        np.testing.assert_array_equal(got, call["expected"])
    windows, options, expected = calls["asr"][0]
    assert expected == result
    assert wt.decode_asr(Tokenizer.from_folder(folder), windows, **options) == result
