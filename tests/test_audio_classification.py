"""audio-classification (AST, wav2vec2 classifiers): parity with transformers' pipeline on the fixture's
PyTorch model, batching, options and bad input."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tests.fixtures.audio_models import build
from tests.fixtures.speech import speech
from tests.predictions import check_same
from transmuter_mlx.pipelines.audio_classification import AudioClassification

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4  # scores and logits against transformers' PyTorch pipeline
FIXTURES = ("ast", "wav2vec2-cls")


@functools.cache
def pipe(fixture: str, backend: str = "mlx", batch_size: int = 1) -> AudioClassification:
    return AudioClassification(str(build(fixture)), backend=backend, compile={"batch_size": batch_size})


@functools.cache
def reference(fixture: str):
    return transformers.pipeline("audio-classification", model=str(build(fixture)))


def clips(fixture: str = "ast") -> list[np.ndarray]:
    """Real speech at 16 kHz: shorter than the fixture AST's 0.64 s window (padded), longer (cut); the
    wav2vec2 fixture makes a frame of 20 samples (a real one of 320), so its clips stay short."""
    wave, _ = speech("beckett")
    return [wave[:4000], wave[16000:48000], wave if fixture == "ast" else wave[48000:56000]]


@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("fixture", FIXTURES)
def test_scores_and_logits_match_transformers(fixture: str, backend: str) -> None:
    classify, ref = pipe(fixture, backend), reference(fixture)
    waves = clips(fixture)
    for wave in waves:
        check_same(classify(wave, top_k=None), ref(wave, top_k=None), TOLERANCE)
    for function in ("none", "sigmoid"):  # the logits themselves, and the other score function
        check_same(classify(waves[0], top_k=None, function_to_apply=function),
                   ref(waves[0], top_k=None, function_to_apply=function), TOLERANCE)
    # the model's scores differ between clips (a constant head would make the comparison void)
    best = [{p["label"]: p["score"] for p in classify(w, top_k=None)["predictions"]} for w in waves]
    assert max(abs(best[0][k] - best[1][k]) for k in best[0]) > 100 * TOLERANCE


def test_fixed_frames_run_in_batches_equal_to_one_by_one() -> None:
    waves = clips() + [clips()[0] * 0.5]
    single, batched = pipe("ast"), pipe("ast", batch_size=3)
    assert batched.batch_size == 3
    for a, b in zip([single(w, top_k=None) for w in waves], batched(waves, top_k=None), strict=True):
        assert [p["label"] for p in a["predictions"]] == [p["label"] for p in b["predictions"]]
        np.testing.assert_allclose([p["score"] for p in a["predictions"]],
                                   [p["score"] for p in b["predictions"]], atol=1e-6)
    frames = {dict(k)["input_values"][0] for k in batched.model.signatures()}
    assert {f[0] for f in frames} == {3, 1}  # the 4th clip alone: a partial batch runs at the next power of two


def test_length_dependent_classifier_runs_each_clip_alone() -> None:
    classify = pipe("wav2vec2-cls", batch_size=4)
    assert classify.batch_size == 1
    waves = clips("wav2vec2-cls")
    for got, wave in zip(classify(waves, top_k=None), waves, strict=True):
        check_same(got, reference("wav2vec2-cls")(wave, top_k=None), TOLERANCE)
    lengths = {dict(k)["input_values"][0] for k in classify.model.signatures()}
    assert lengths == {(1, len(w)) for w in waves}  # unpadded: each clip at its own length


def test_top_k_default_clip_and_none() -> None:
    classify, ref = pipe("ast"), reference("ast")
    wave = clips()[1]
    labels = len(classify.args.id2label)
    assert len(classify(wave)["predictions"]) == min(5, labels)  # transformers' default top_k is 5
    for top_k in (1, 2, labels + 10, None):
        got = classify(wave, top_k=top_k)
        assert len(got["predictions"]) == (labels if top_k is None else min(top_k, labels))
        check_same(got, ref(wave, top_k=top_k), TOLERANCE)
    with pytest.raises(ValueError, match="top_k"):
        classify(wave, top_k=0)
    with pytest.raises(ValueError, match="function_to_apply"):
        classify(wave, function_to_apply="relu")


def test_audio_at_another_rate_is_resampled() -> None:
    import soxr

    classify = pipe("ast")
    wave = clips()[1]
    at_8k = soxr.resample(wave, 16000, 8000).astype(np.float32)
    want = classify(soxr.resample(at_8k, 8000, 16000).astype(np.float32), top_k=None)
    for item in ({"array": at_8k, "sampling_rate": 8000}, {"raw": at_8k, "sampling_rate": 8000}):
        got = classify(item, top_k=None)
        assert [p["label"] for p in got["predictions"]] == [p["label"] for p in want["predictions"]]
        np.testing.assert_allclose([p["score"] for p in got["predictions"]],
                                   [p["score"] for p in want["predictions"]], atol=1e-6)


@pytest.mark.parametrize("fixture", FIXTURES)
def test_bad_audio_is_an_error_naming_the_input(fixture: str) -> None:
    classify = pipe(fixture)
    good = clips()[1]
    with pytest.raises(ValueError, match="input 1"):
        classify([good, np.zeros(0, np.float32)])
    with pytest.raises(ValueError, match="input 1"):
        classify([good, np.full(8000, np.nan, np.float32)])
    with pytest.raises((TypeError, ValueError), match="input 0"):
        classify({"array": good})  # no sampling_rate
    least = getattr(classify.args, "min_samples", 0)
    if least:  # wav2vec2's convolutions: a clip too short for one frame
        with pytest.raises(ValueError, match=f"input 0: {least - 1} samples is too short"):
            classify(good[: least - 1])
        assert classify(good[:least])["predictions"]


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_q8_file_matches_onnxruntime_on_the_same_file(backend: str) -> None:
    """The q8 file quantizes activations at run time, so it is compared with onnxruntime on the same file
    (it is up to ~1e-2 from the fp32 model on these clips), through the same pipeline logic."""
    from parity.ort_model import OrtModel

    folder = build("ast")
    q8 = AudioClassification(str(folder), variant="q8", backend=backend)
    ort = AudioClassification(str(folder), model=OrtModel(folder / "onnx" / "model_quantized.onnx"))
    for wave in clips():
        for function in ("softmax", "none"):
            want = ort(wave, top_k=None, function_to_apply=function)["predictions"]
            check_same(q8(wave, top_k=None, function_to_apply=function), want, TOLERANCE)
