"""text-to-speech: VITS / MMS-TTS and SpeechT5 against PyTorch transformers, seeds, speaker embeddings, bad input.

With ``noise=False`` the audio equals transformers' (VitsModel with noise_scale = noise_scale_duration = 0;
SpeechT5's generate_speech with its vocoder and a dropout that keeps every value) in length and within 1e-4
per sample, on the mlx and torch backends.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import numpy as np
import pytest

from transmuter_mlx.hub import RepoNotFoundError
from transmuter_mlx.pipelines.audio_tts import TextToSpeech

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from tests.fixtures.tts_models import NO_STOP, STOP_BIAS, build, speecht5_variant  # noqa: E402

TOLERANCE = 1e-4
TEXTS = ("Hello, my dog is cute.", "HI there")
_PIPES: dict = {}


def pipe(name: str, backend: str = "mlx", **options) -> TextToSpeech:
    key = (name, backend, tuple(sorted((k, str(v)) for k, v in options.items())))
    if key not in _PIPES:
        folder = speecht5_variant(STOP_BIAS) if name == "speecht5" else build(name)
        _PIPES[key] = TextToSpeech(folder, backend=backend, **options)
    return _PIPES[key]


# ---------------------------------------------------------------------------------------------- VITS
@functools.cache
def vits_torch():
    folder = build("vits")
    model = T.VitsModel.from_pretrained(folder).eval()
    model.noise_scale = model.noise_scale_duration = 0.0  # copied from config.json when built
    return T.VitsTokenizer.from_pretrained(folder), model


def vits_reference(text: str) -> np.ndarray:
    tokenizer, model = vits_torch()
    ids = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        return model(**ids).waveform[0].numpy()


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_vits_without_noise_is_transformers_with_noise_scales_0(backend: str) -> None:
    speak = pipe("vits", backend)
    for text in TEXTS:
        want = vits_reference(text)
        got = speak(text, noise=False)
        assert got["sampling_rate"] == 16000 and got["audio"].dtype == np.float32 and got["audio"].ndim == 1
        assert got["audio"].shape == want.shape
        np.testing.assert_allclose(got["audio"], want, atol=TOLERANCE, rtol=0)
        assert np.abs(want).max() > 0.1  # a real signal, not silence


def test_vits_text_is_prepared_as_the_vits_tokenizer_does() -> None:
    speak = pipe("vits")
    tokenizer = vits_torch()[0]
    for text in (*TEXTS, "  Spaces  and  CAPS ", "x<pad>y", "naïve café!", "a\tb\nc"):
        assert speak.synthesizer.ids(0, text).tolist() == tokenizer(text).input_ids, text


def test_vits_seed_decides_the_audio() -> None:
    speak = pipe("vits")
    text = TEXTS[0]
    a, b, c = (speak({"text": text, "seed": s})["audio"] for s in (1, 1, 2))
    np.testing.assert_array_equal(a, b)
    assert a.shape != c.shape or np.abs(a - c).max() > 1e-3
    # the noise is drawn on the host: one seed, the same audio on another backend
    other = pipe("vits", "torch")({"text": text, "seed": 1})["audio"]
    assert other.shape == a.shape
    np.testing.assert_allclose(other, a, atol=TOLERANCE, rtol=0)
    # inputs without a seed get random ones; a batch runs each text alone
    x, y = speak([text, text])
    assert x["audio"].shape != y["audio"].shape or np.abs(x["audio"] - y["audio"]).max() > 1e-3
    noiseless = speak({"text": text, "seed": 5}, noise=False)["audio"]  # no noise: the seed is not used
    np.testing.assert_array_equal(noiseless, speak(text, noise=False)["audio"])


def test_vits_vocabulary_from_tokenizer_json_and_no_phonemizer(tmp_path: Path) -> None:
    """A transformers.js export may have only tokenizer.json: its ``model.vocab`` is the vocabulary."""
    import json

    folder = tmp_path / "vits"
    shutil.copytree(build("vits"), folder)
    vocab = json.loads((folder / "vocab.json").read_text())
    (folder / "vocab.json").unlink()
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordLevel", "vocab": vocab}}))
    speak = TextToSpeech(folder)
    assert speak.synthesizer.ids(0, TEXTS[0]).tolist() == vits_torch()[0](TEXTS[0]).input_ids
    assert "tokenizer.json of" in speak.synthesizer.text.source
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "phonemize": True}))
    with pytest.raises(ValueError, match="phonemizes its text"):
        TextToSpeech(folder)


@pytest.mark.parametrize("item, error, message", [
    ("", ValueError, "input 0: the text is empty"),
    ("   ", ValueError, "input 0: the text is empty"),
    ("!!! ¿¡", ValueError, "input 0: the text has no character of the model's vocabulary"),
    ({"text": "hi", "speaker_embedding": [0.0] * 8}, ValueError, "takes no speaker embedding"),
    ({"text": "hi", "seed": -1}, ValueError, "input 0: seed must be a non-negative int"),
    ({"text": "hi", "seed": 1.5}, ValueError, "input 0: seed must be a non-negative int"),
    ({"text": "hi", "voice": 1}, ValueError, r"input 0 has unknown key\(s\) \['voice'\]"),
    ({"seed": 1}, TypeError, "input 0: the text must be a str"),
    (3, TypeError, "input 0 is a int"),
])
def test_vits_bad_input_is_a_named_error(item, error, message) -> None:
    with pytest.raises(error, match=message):
        pipe("vits")(item)


def test_bad_options_are_named_errors() -> None:
    with pytest.raises(TypeError, match="noise must be True or False"):
        pipe("vits")("hi", noise="no")
    with pytest.raises(TypeError, match="unknown call option"):
        pipe("vits")("hi", seed=1)
    with pytest.raises(ValueError, match="the speaker_embedding option: a VITS model takes no speaker embedding"):
        TextToSpeech(build("vits"), speaker_embedding=[0.0] * 8)


# ---------------------------------------------------------------------------------------------- SpeechT5
SPEAKER = np.random.default_rng(0).standard_normal(8).astype(np.float32)  # the fixture's speaker_embedding_dim


@functools.cache
def speecht5_torch(bias: float):
    folder = build("speecht5")
    model = T.SpeechT5ForTextToSpeech.from_pretrained(folder).eval()
    vocoder = T.SpeechT5HifiGan.from_pretrained(folder / "vocoder").eval()
    with torch.no_grad():
        model.speech_decoder_postnet.prob_out.weight.neg_()
        model.speech_decoder_postnet.prob_out.bias.fill_(bias)
    # the dropout that stays on at inference, keeping every value (as noise=False does)
    model.speecht5.decoder.prenet._consistent_dropout = lambda x, p: x * (1 / (1 - p))
    return T.SpeechT5Tokenizer.from_pretrained(folder), model, vocoder


def speecht5_reference(text: str, speaker: np.ndarray, bias: float = STOP_BIAS, maxlenratio: float = 20.0):
    tokenizer, model, vocoder = speecht5_torch(bias)
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return model.generate_speech(ids, torch.from_numpy(speaker)[None], vocoder=vocoder,
                                     maxlenratio=maxlenratio).numpy()


# (not a run of characters outside the vocabulary: SentencePiece makes it one <unk>, tokenizer.json one each)
@pytest.mark.parametrize("text", ["hello world", "A quick test, 4.", "  two  spaces ", "ünïcode"])
def test_speecht5_tokenizer_json_is_the_sentencepiece_tokenizer(text: str) -> None:
    """The fixture's tokenizer.json (what transformers.js exports carry, and what we read) gives the ids of
    transformers' slow SpeechT5Tokenizer."""
    from transmuter_mlx.tokenizer import Tokenizer

    folder = build("speecht5")
    slow = T.SpeechT5Tokenizer.from_pretrained(folder)
    assert Tokenizer.from_repo(folder)([text]).input_ids[0].tolist() == slow(text)["input_ids"]


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_speecht5_without_noise_is_transformers_generate_speech(backend: str) -> None:
    speak = pipe("speecht5", backend, speaker_embedding=SPEAKER)
    text = TEXTS[0]
    want = speecht5_reference(text, SPEAKER)
    got = speak(text, noise=False)
    assert got["sampling_rate"] == 16000 and got["audio"].dtype == np.float32
    # stopped by the threshold at step 5: 5 steps of 2 frames, 16 samples per frame (the vocoder's upsampling)
    assert got["audio"].shape == want.shape == (5 * 2 * 16,)
    np.testing.assert_allclose(got["audio"], want, atol=TOLERANCE, rtol=0)
    assert np.abs(want).max() > 0.05


def test_speecht5_merged_decoder_gives_the_same_audio() -> None:
    speak = TextToSpeech(speecht5_variant(STOP_BIAS, merged=True), speaker_embedding=SPEAKER)
    assert speak.synthesizer.merged and speak.synthesizer.with_past is None
    got = speak(TEXTS[0], noise=False)["audio"]
    want = speecht5_reference(TEXTS[0], SPEAKER)
    assert got.shape == want.shape == (5 * 2 * 16,)
    np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)
    a, b = (speak({"text": TEXTS[0], "seed": 7})["audio"] for _ in range(2))  # random operators in its If branches
    np.testing.assert_array_equal(a, b)


def test_speecht5_vocoder_of_another_repository(tmp_path: Path) -> None:
    folder, vocoder = tmp_path / "speecht5", tmp_path / "hifigan"
    shutil.copytree(speecht5_variant(STOP_BIAS), folder)
    (vocoder / "onnx").mkdir(parents=True)
    (folder / "onnx" / "decoder_postnet_and_vocoder.onnx").rename(vocoder / "onnx" / "model.onnx")
    speak = TextToSpeech(folder, vocoder=vocoder, speaker_embedding=SPEAKER)
    np.testing.assert_array_equal(speak(TEXTS[1], noise=False)["audio"],
                                  pipe("speecht5", speaker_embedding=SPEAKER)(TEXTS[1], noise=False)["audio"])
    with pytest.raises(ValueError, match="the vocoder .* has no onnx/model.onnx"):
        TextToSpeech(folder, vocoder=tmp_path, speaker_embedding=SPEAKER)
    with pytest.raises(RepoNotFoundError, match="Xenova/speecht5_hifigan"):  # the default, not in the offline cache
        TextToSpeech(folder, speaker_embedding=SPEAKER)
    with pytest.raises(ValueError, match="takes no vocoder"):
        TextToSpeech(build("vits"), vocoder=vocoder)


def test_speecht5_stops_at_maxlen(monkeypatch) -> None:
    from transmuter_mlx.zoo import speecht5

    monkeypatch.setattr(speecht5, "MAX_LEN_RATIO", 1.0)  # 24 tokens / reduction factor 2: 12 steps
    folder = speecht5_variant(NO_STOP)
    speak = TextToSpeech(folder, speaker_embedding=SPEAKER)
    want = speecht5_reference(TEXTS[0], SPEAKER, NO_STOP, maxlenratio=1.0)
    got = speak(TEXTS[0], noise=False)["audio"]
    assert got.shape == want.shape == (12 * 2 * 16,)
    np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)


def test_speecht5_seed_decides_the_audio() -> None:
    speak = pipe("speecht5", speaker_embedding=SPEAKER)
    text = TEXTS[1]
    a, b, c = (speak({"text": text, "seed": s})["audio"] for s in (1, 1, 2))
    np.testing.assert_array_equal(a, b)
    assert a.shape != c.shape or np.abs(a - c).max() > 1e-4
    noiseless = speak(text, noise=False)["audio"]
    assert a.shape != noiseless.shape or np.abs(a - noiseless).max() > 1e-4


def test_speecht5_speaker_embedding_of_the_input_or_the_option() -> None:
    other = np.random.default_rng(1).standard_normal(8).astype(np.float32)
    by_option = pipe("speecht5", speaker_embedding=SPEAKER)
    plain = pipe("speecht5")
    text = TEXTS[1]
    want = by_option(text, noise=False)["audio"]
    np.testing.assert_array_equal(plain({"text": text, "speaker_embedding": SPEAKER}, noise=False)["audio"], want)
    np.testing.assert_array_equal(by_option({"text": text, "speaker_embedding": SPEAKER[None]}, noise=False)["audio"],
                                  want)  # transformers' (1, 512) shape
    mine = by_option({"text": text, "speaker_embedding": other}, noise=False)["audio"]  # the input's wins
    np.testing.assert_allclose(mine, speecht5_reference(text, other), atol=TOLERANCE, rtol=0)
    with pytest.raises(ValueError, match="input 0: SpeechT5 needs a speaker embedding of 8 values"):
        plain(text)
    with pytest.raises(ValueError, match=r"input 1: its speaker_embedding has shape \[7\]; the model takes 8"):
        plain([{"text": text, "speaker_embedding": SPEAKER}, {"text": text, "speaker_embedding": SPEAKER[:7]}])
    with pytest.raises(ValueError, match=r"the speaker_embedding option has shape \[512\]"):
        pipe("speecht5", speaker_embedding=np.zeros(512, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        plain({"text": text, "speaker_embedding": np.full(8, np.nan, np.float32)})
