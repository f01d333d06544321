"""The audio feature extractors against transformers 4.57.6's own, on real speech (tests.fixtures.speech).

Tolerances: transformers computes Whisper's log-mel with torch when torch is installed (float32 FFT,
MKL) and with numpy otherwise (float64 FFT); our spectrogram is the numpy one, vectorised, and equals it
exactly (asserted at 1e-6). transformers' two paths differ from each other by up to 6.2e-5 on the
synthesized minute and 1.4e-5 on the recorded clip (the float32 FFT's rounding), so the torch path is
asserted at 1e-4. wav2vec2's normalisation is the same float32 arithmetic (asserted at 1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fixtures.speech import speech
from transmuter_mlx.audio_input import load_audio
from transmuter_mlx.processors import Processor
from transmuter_mlx.processors.audio import AudioFeatures, AudioProcessor

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def beckett() -> np.ndarray:
    wave, rate = speech("beckett")
    assert rate == 16000
    return wave


@pytest.fixture(scope="module")
def long() -> np.ndarray:
    wave, rate = speech("long")
    assert rate == 16000 and len(wave) > 30 * rate
    return wave


def _ours(reference) -> AudioProcessor:
    """Our processor of a transformers feature extractor's saved config."""
    return AudioProcessor.from_config(reference.to_dict())


def _whisper(bins: int):
    return transformers.WhisperFeatureExtractor(feature_size=bins)


# ---------------------------------------------------------------------- Whisper
TORCH_TOLERANCE = 1e-4  # against transformers' torch path (see the module docstring); 6.2e-5 measured


def _check_whisper(got: np.ndarray, wave: np.ndarray, reference, length: int | None = 480000) -> None:
    """``got`` against both transformers paths: numpy (exact) and torch (its float32 FFT)."""
    if length is None:  # long-form: the whole clip
        expected = reference(wave, sampling_rate=16000, truncation=False, padding="longest",
                             return_attention_mask=True, return_tensors="np")["input_features"][0]
        padded = wave
    else:
        expected = reference(wave, sampling_rate=16000, return_tensors="np")["input_features"][0]
        padded = np.zeros(length, np.float32)
        padded[: min(len(wave), length)] = wave[:length]
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.abs(got - expected).max() <= TORCH_TOLERANCE
    numpy_path = reference._np_extract_fbank_features(padded[None], "cpu")[0]
    assert np.abs(got - numpy_path).max() <= 1e-6


@pytest.mark.parametrize("bins", [80, 128])
def test_whisper_matches_transformers_on_speech(beckett: np.ndarray, long: np.ndarray, bins: int) -> None:
    reference = _whisper(bins)
    ours = _ours(reference)
    assert np.abs(ours.mel_filters - reference.mel_filters).max() == 0.0
    for wave in (beckett, long):
        got = ours.features(wave)
        assert set(got) == {"input_features"} and got["input_features"].shape == (bins, 3000)
        _check_whisper(got["input_features"], wave, reference)


def test_whisper_long_form_matches_the_pipelines_call(long: np.ndarray) -> None:
    """Audio over 30 s: transformers' pipeline featurizes it whole (truncation=False, padding="longest")."""
    reference = _whisper(80)
    got = _ours(reference).long_features(long)
    assert got["input_features"].shape == (80, len(long) // 160)
    _check_whisper(got["input_features"], long, reference, None)
    expected = reference(long, sampling_rate=16000, truncation=False, padding="longest",
                         return_attention_mask=True, return_tensors="np")
    assert got["attention_mask"].dtype == np.int32
    np.testing.assert_array_equal(got["attention_mask"], expected["attention_mask"][0])


@pytest.mark.parametrize("seconds", [0.5, 30.0, 31.3])
def test_whisper_short_exact_and_truncated_clips(beckett: np.ndarray, seconds: float) -> None:
    """Padded or truncated to 30 s; the frame mask is what the pipeline's ``return_attention_mask=True`` gives."""
    reference = _whisper(80)
    ours = _ours(reference)
    n = int(seconds * 16000)
    wave = np.resize(beckett, n)  # the clip repeated to n samples
    _check_whisper(ours.features(wave)["input_features"], wave, reference)
    expected = reference(wave, sampling_rate=16000, return_attention_mask=True, return_tensors="np")
    mask = ours.frame_mask(min(n, ours.n_samples), ours.n_samples)
    np.testing.assert_array_equal(mask, expected["attention_mask"][0])
    assert mask.sum() == -(-min(n, 480000) // 160) and ours.num_frames(n) == n // 160


def test_whisper_batches_clips_of_any_length(beckett: np.ndarray) -> None:
    ours = _ours(_whisper(80))
    assert isinstance(ours, Processor) and ours.fixed_size and ours.kind == "audio" and ours.sampling_rate == 16000
    rows = [ours.preprocess(beckett[:n], index=i)[0] for i, n in enumerate((8000, 16000, 159414))]
    assert {ours.bucket(r) for r in rows} == {(80, 3000)}
    assert [r.num_samples for r in rows] == [8000, 16000, 159414] and [r.owner for r in rows] == [0, 1, 2]
    feeds = ours.collate(rows, (80, 3000))
    assert list(feeds) == ["input_features"] and feeds["input_features"].shape == (3, 80, 3000)
    np.testing.assert_array_equal(feeds["input_features"][1], rows[1].feeds["input_features"])


def test_whisper_long_form_memory_is_its_output_and_a_block() -> None:
    """Five minutes: the features (80 x 30000 float32, 9.6 MB) plus one block of frames, never a float64
    copy of the whole spectrogram nor a per-sample mask."""
    import tracemalloc

    wave = (np.random.default_rng(0).standard_normal(16000 * 300) * 0.1).astype(np.float32)
    ours = AudioProcessor.from_config({"feature_extractor_type": "WhisperFeatureExtractor"})
    tracemalloc.start()
    try:
        features = ours.long_features(wave)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert features["input_features"].shape == (80, 30000)
    assert peak < features["input_features"].nbytes + 16e6  # a block: 512 frames x 400 float64 and indices


# ---------------------------------------------------------------------- wav2vec2 / Moonshine
@pytest.mark.parametrize("normalize,mask", [(True, False), (True, True), (False, True)])
def test_wav2vec2_matches_transformers(beckett: np.ndarray, normalize: bool, mask: bool) -> None:
    reference = transformers.Wav2Vec2FeatureExtractor(do_normalize=normalize, return_attention_mask=mask)
    ours = _ours(reference)
    for wave in (beckett, beckett[:1], beckett[:16000] * 0.01):
        got = ours.features(wave)
        expected = reference(wave, sampling_rate=16000, return_tensors="np")
        assert set(got) == set(expected)
        assert got["input_values"].dtype == np.float32 and got["input_values"].shape == wave.shape
        assert np.abs(got["input_values"] - expected["input_values"][0]).max() <= 1e-6
        if mask:
            np.testing.assert_array_equal(got["attention_mask"], expected["attention_mask"][0])
    if normalize:  # zero mean, unit variance: the real numbers, not only agreement
        values = ours.features(beckett)["input_values"].astype(np.float64)
        assert abs(values.mean()) < 1e-5 and abs(values.std() - 1) < 1e-4


def test_wav2vec2_batches_only_clips_of_one_length(beckett: np.ndarray) -> None:
    ours = AudioProcessor.from_config({"feature_extractor_type": "Wav2Vec2FeatureExtractor",
                                       "return_attention_mask": True})
    assert not ours.fixed_size
    a, b, c = (ours.preprocess(beckett[:n], index=i)[0] for i, n in enumerate((4000, 4000, 5000)))
    assert ours.bucket(a) == ours.bucket(b) == (4000,) != ours.bucket(c)
    feeds = ours.collate([a, b], (4000,))
    assert feeds["input_values"].shape == feeds["attention_mask"].shape == (2, 4000)
    with pytest.raises(ValueError, match="cannot share the batch"):
        ours.collate([a, c], (4000,))


def test_moonshine_takes_the_raw_samples(beckett: np.ndarray) -> None:
    """Moonshine's repositories name Wav2Vec2FeatureExtractor with do_normalize false: the samples as they are."""
    reference = transformers.Wav2Vec2FeatureExtractor(do_normalize=False, return_attention_mask=True)
    ours = _ours(reference)
    np.testing.assert_array_equal(ours.features(beckett)["input_values"], beckett)


# ---------------------------------------------------------------------- AST
@pytest.mark.parametrize("samples", [400, 1000, 159414, None])  # one frame .. the 1024-frame window .. a minute
def test_ast_matches_transformers(beckett: np.ndarray, long: np.ndarray, samples: int | None) -> None:
    """transformers' numpy fbank (torchaudio is not installed; with it transformers calls Kaldi's fbank)."""
    reference = transformers.ASTFeatureExtractor()
    ours = _ours(reference)
    wave = long if samples is None else beckett[:samples]
    got = ours.features(wave)
    expected = reference(wave, sampling_rate=16000, return_tensors="np")
    assert got["input_values"].shape == (1024, 128) and got["input_values"].dtype == np.float32
    assert np.abs(got["input_values"] - expected["input_values"][0]).max() <= 1e-5
    assert ours.fixed_size and ours.bucket(ours.preprocess(wave, 0)[0]) == (1024, 128)


def test_ast_small_config_and_too_short_clip(beckett: np.ndarray) -> None:
    reference = transformers.ASTFeatureExtractor(num_mel_bins=32, max_length=64, do_normalize=False)
    ours = _ours(reference)
    got = ours.features(beckett)["input_values"]
    assert got.shape == (64, 32)
    assert np.abs(got - reference(beckett, sampling_rate=16000, return_tensors="np")["input_values"][0]).max() <= 1e-5
    with pytest.raises(ValueError, match="input 5: .*399 samples, fewer than one 25 ms frame"):
        ours.preprocess(beckett[:399], 5)


# ---------------------------------------------------------------------- CLAP
@pytest.fixture(scope="module")
def beckett_48k() -> np.ndarray:
    wave, rate = speech("beckett_48k")
    assert rate == 48000
    return wave


@pytest.mark.parametrize("truncation", ["fusion", "rand_trunc"])
@pytest.mark.parametrize("clip", ["short", "exact", "long"])
def test_clap_matches_transformers(beckett_48k: np.ndarray, monkeypatch, truncation: str, clip: str) -> None:
    """Within 1e-3 dB (7.6e-6 measured: the bilinear shrink of fusion); transformers' random crops are
    pinned to the first start of each range, which is what ours takes."""
    reference = transformers.ClapFeatureExtractor(truncation=truncation)
    ours = _ours(reference)
    wave = {"short": beckett_48k[:48000], "exact": np.resize(beckett_48k, 480000),
            "long": np.resize(beckett_48k, 48000 * 23 + 123)}[clip]
    monkeypatch.setattr(np.random, "choice", lambda options: options[0])
    monkeypatch.setattr(np.random, "randint", lambda low, high=None: 0)
    got = ours.features(wave)
    expected = reference(wave, sampling_rate=48000, return_tensors="np")
    views = 4 if truncation == "fusion" else 1
    assert got["input_features"].shape == (views, 1001, 64) and got["input_features"].dtype == np.float32
    assert np.abs(got["input_features"] - expected["input_features"][0]).max() <= 1e-3
    np.testing.assert_array_equal(got["is_longer"], expected["is_longer"][0])
    assert got["is_longer"].tolist() == [truncation == "fusion" or clip == "long"]
    if truncation == "fusion" and clip == "long":  # four different views: the shrunk whole and three crops
        assert len({float(v.sum()) for v in got["input_features"]}) == 4


@pytest.mark.parametrize("padding", ["repeat", "repeatpad", "pad"])
def test_clap_paddings_batch(beckett_48k: np.ndarray, padding: str) -> None:
    reference = transformers.ClapFeatureExtractor(padding=padding, truncation="rand_trunc")
    ours = _ours(reference)
    rows = [ours.preprocess(beckett_48k[:n], i)[0] for i, n in enumerate((30000, 100000))]
    for row in rows:
        wave = beckett_48k[: row.num_samples]
        expected = reference(wave, sampling_rate=48000, return_tensors="np")["input_features"][0]
        assert np.abs(row.feeds["input_features"] - expected).max() <= 1e-3
    feeds = ours.collate(rows, ours.bucket(rows[0]))
    assert feeds["input_features"].shape == (2, 1, 1001, 64) and feeds["is_longer"].shape == (2, 1)


# ---------------------------------------------------------------------- SpeechT5
@pytest.mark.parametrize("normalize", [False, True])
def test_speecht5_matches_transformers(beckett: np.ndarray, normalize: bool) -> None:
    reference = transformers.SpeechT5FeatureExtractor(do_normalize=normalize)
    ours = _ours(reference)
    got = ours.features(beckett)
    expected = reference(audio=beckett, sampling_rate=16000, return_tensors="np")
    assert set(got) == set(expected) == {"input_values", "attention_mask"}
    assert np.abs(got["input_values"] - expected["input_values"][0]).max() <= 1e-6
    np.testing.assert_array_equal(got["attention_mask"], expected["attention_mask"][0])
    target = ours.target_features(beckett)
    expected = reference(audio_target=beckett, sampling_rate=16000, return_tensors="np")
    assert target["input_values"].shape == (623, 80)
    assert np.abs(target["input_values"] - expected["input_values"][0]).max() <= 1e-5
    np.testing.assert_array_equal(target["attention_mask"], expected["attention_mask"][0])


# ---------------------------------------------------------------------- dispatch
def test_config_dispatch_and_errors() -> None:
    with pytest.raises(ValueError, match="names no feature_extractor_type"):
        AudioProcessor.from_config({}, "automatic-speech-recognition")
    with pytest.raises(ValueError, match="'FooFeatureExtractor' is not supported; supported: .*Whisper"):
        AudioProcessor.from_config({"feature_extractor_type": "FooFeatureExtractor"})
    whisper = AudioProcessor.from_config({"feature_extractor_type": "WhisperFeatureExtractor",
                                          "sampling_rate": None, "feature_size": 128})
    assert whisper.sampling_rate == 16000 and whisper.feature_size == 128


def test_a_repository_without_the_type_takes_its_model_types(tmp_path) -> None:
    """As AutoFeatureExtractor: a preprocessor_config.json naming no type takes config.json's model_type's."""
    import json

    from transmuter_mlx.hub import open_repo

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "hubert"}))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"do_normalize": False}))
    ours = AudioProcessor.from_repo(open_repo(tmp_path), "audio-classification")
    assert type(ours).__name__ == "Wav2Vec2Features" and not ours.do_normalize


def test_preprocess_names_the_input_of_bad_audio() -> None:
    ours = AudioProcessor.from_config({"feature_extractor_type": "WhisperFeatureExtractor"}, "my-task")
    with pytest.raises(ValueError, match="my-task: input 2: the audio is empty"):
        ours.preprocess(np.zeros(0, np.float32), 2)
    assert isinstance(ours.preprocess(np.zeros(300, np.float32), 0)[0], AudioFeatures)
    with pytest.raises(TypeError, match="my-task: input 1: a stream of audio blocks has no features"):
        ours.preprocess(iter([np.zeros(300, np.float32)]), 1)
    with pytest.raises(ValueError, match="my-task: input 3: the audio has NaN"):
        ours.preprocess({"raw": np.full(10, np.nan), "sampling_rate": 8000}, 3)


# ---------------------------------------------------------------------- the pipeline base
class _FakeModel:
    """A Model-like graph: declares its inputs (fp16 ``input_values``), records the feeds of each call."""

    def __init__(self, dtype: type = np.float16) -> None:
        from types import SimpleNamespace

        self.inputs = [SimpleNamespace(name="input_values", dtype=np.dtype(dtype))]
        self.backend = SimpleNamespace(is_array=lambda value: False, to_numpy=np.asarray)
        self.calls: list[dict[str, np.ndarray]] = []

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(feeds)
        values = feeds["input_values"].astype(np.float32)
        return {"logits": values.reshape(len(values), -1).sum(axis=1, keepdims=True)}


def _pipeline(tmp_path, extractor: dict, batch_size: int):
    import json

    from transmuter_mlx.pipelines.audio import AudioPipeline

    class Sums(AudioPipeline):
        task = "audio-classification"

        def postprocess(self, prepared, outputs, options):
            return float(outputs[0]["logits"][0]), prepared.data.shape[0]

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "audio-spectrogram-transformer",
                                                      "id2label": {"0": "a"}}))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(extractor))
    return Sums(tmp_path, model=_FakeModel(), compile={"batch_size": batch_size})


def test_audio_pipeline_batches_fixed_size_features_and_casts_feeds(tmp_path, beckett: np.ndarray) -> None:
    extractor = {"feature_extractor_type": "ASTFeatureExtractor", "num_mel_bins": 16, "max_length": 32}
    pipe = _pipeline(tmp_path, extractor, batch_size=2)
    assert pipe.sampling_rate == 16000 and pipe.batch_size == 2
    x48, _ = speech("beckett_48k")
    inputs = [beckett[:8000], {"raw": x48[:24000], "sampling_rate": 48000}, beckett[:20000]]
    results = pipe(inputs)
    calls = pipe.model.calls
    assert [c["input_values"].shape for c in calls] == [(2, 32, 16), (1, 32, 16)]  # the last clip alone
    assert {c["input_values"].dtype for c in calls} == {np.dtype(np.float16)}  # the graph's declared dtype
    ours = _ours(transformers.ASTFeatureExtractor(num_mel_bins=16, max_length=32))
    for (total, _), wave in zip(results, (inputs[0], load_audio(inputs[1], 16000), inputs[2])):
        expected = ours.features(wave)["input_values"].astype(np.float16).astype(np.float32).sum()
        assert total == pytest.approx(float(expected), rel=1e-5)  # each row its own clip's features
    assert [s for _, s in results] == [8000, 8000, 20000]  # the dict resampled to 16 kHz
    with pytest.raises(TypeError, match="audio-classification: input 1: a stream of audio blocks"):
        pipe([beckett[:8000], iter([beckett[:100]])])
    with pytest.raises(ValueError, match="audio-classification: input 0: the audio is empty"):
        pipe(np.zeros(0, np.float32))


def test_audio_pipeline_runs_raw_waveforms_one_at_a_time(tmp_path, beckett: np.ndarray) -> None:
    pipe = _pipeline(tmp_path, {"feature_extractor_type": "Wav2Vec2FeatureExtractor"}, batch_size=4)
    assert pipe.batch_size == 1  # clips of different lengths: each at its own
    pipe([beckett[:4000], beckett[:5000]])
    assert [c["input_values"].shape for c in pipe.model.calls] == [(1, 4000), (1, 5000)]
    with pytest.raises(ValueError, match="takes \\['input_values'\\], which the feature extractor does not give"):
        pipe.declared_feeds({"input_features": np.zeros((1, 2))}, "the feature extractor")
