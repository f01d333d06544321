"""automatic-speech-recognition with Moonshine against transformers 4.57.6's pipeline on the fixture's PyTorch
model: the same text and the same token ids as ``generate`` with the pipeline's generation config (5 beams,
the model's max_length; greedy and other options given at the call), chunked audio, on mlx and torch; the
pipeline's generation config for several generation_config.json files; bad input and options as named
errors."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.speech import speech
from transmuter_mlx.generation.config import GenerationConfig
from transmuter_mlx.hub import open_repo
from transmuter_mlx.pipelines.audio_moonshine import pipeline_generation_config
from transmuter_mlx.pipelines.audio_speech import SpeechToText
from transmuter_mlx.tokenizer import Tokenizer

BACKENDS = ("mlx", "torch")
CALLS = ({}, {"num_beams": 1}, {"num_beams": 2, "max_new_tokens": 6})


def fixture() -> Path:
    """F1's ``moonshine`` fixture when tests/fixtures/audio_models.py has one, else the one built here."""
    from tests.fixtures import audio_models

    return audio_models.build("moonshine") if "moonshine" in audio_models.SPECS else _own_fixture()


@dataclass(frozen=True)
class _Spec:
    name: str = "moonshine-asr"


def _fill(spec: _Spec, out: Path) -> None:
    """A tiny random Moonshine (weights shaken so that the decoder says more than one token), its
    byte-level BPE tokenizer, raw-audio feature extractor and max_length 16; optimum's encoder_model and
    decoder_model_merged."""
    import torch
    import transformers

    from tests.fixtures.generation_models import bytebpe_tokenizer, optimum_export, save_reference, setup_env

    setup_env()
    torch.manual_seed(0)
    tok = bytebpe_tokenizer(512, ["<unk>", "<s>", "</s>"], None, "</s>", bos_token="<s>", unk_token="<unk>")
    bos, eos = tok.convert_tokens_to_ids("<s>"), tok.convert_tokens_to_ids("</s>")
    config = transformers.MoonshineConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=37, encoder_num_hidden_layers=2,
        decoder_num_hidden_layers=2, encoder_num_attention_heads=2, decoder_num_attention_heads=2,
        max_position_embeddings=128, decoder_start_token_id=bos, bos_token_id=bos, eos_token_id=eos,
        pad_token_id=eos)  # fmt: skip
    model = transformers.MoonshineForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.3)
    save_reference(model, tok, out, {"decoder_start_token_id": bos, "bos_token_id": bos, "eos_token_id": eos,
                                     "pad_token_id": eos, "max_length": 16})
    transformers.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=False,
                                          return_attention_mask=True).save_pretrained(out)
    optimum_export(out, "automatic-speech-recognition-with-past")
    for name in ("decoder_model.onnx", "decoder_with_past_model.onnx"):  # the merged decoder serves
        (out / "onnx" / name).unlink(missing_ok=True)
    (out / "fixture.json").write_text(json.dumps({"spec": spec.name}))


def _own_fixture() -> Path:
    import importlib.metadata
    import inspect

    from tests.fixtures import bert

    key = hashlib.sha256(inspect.getsource(_fill).encode())
    for package in ("torch", "transformers", "optimum-onnx", "tokenizers"):
        key.update(importlib.metadata.version(package).encode())
    return bert.build(_Spec(), key=key.hexdigest()[:12], fill=_fill,
                      complete=lambda f: (f / "fixture.json").is_file() and (f / "onnx" / "encoder_model.onnx").is_file())


@functools.cache
def clip(start_s: float, seconds: float) -> np.ndarray:
    wave, rate = speech("beckett")
    return wave[int(start_s * rate):int((start_s + seconds) * rate)].copy()


@functools.cache
def reference():
    import transformers

    return transformers.pipeline("automatic-speech-recognition", model=str(fixture()), device="cpu")


@functools.cache
def ours(backend: str) -> SpeechToText:
    return SpeechToText(fixture(), backend=backend)


def reference_ids(wave: np.ndarray, **options) -> list[int]:
    """``generate`` as the pipeline calls it (its generation config, the samples' attention mask)."""
    import torch

    pipe = reference()
    features = pipe.feature_extractor(wave, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
    with torch.no_grad():
        out = pipe.model.generate(features["input_values"], attention_mask=features["attention_mask"],
                                  generation_config=pipe.generation_config, **options)
    return out[0].tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_text_and_tokens_equal_transformers(backend: str) -> None:
    asr, wave = ours(backend), clip(1.0, 1.5)
    recognizer = asr.recognizer
    found = []
    for options in CALLS:
        want = reference_ids(wave, **options)
        assert recognizer.window_ids(wave, recognizer.config_for(options)) == want, options
        found.append(want)
    assert len({len(ids) for ids in found}) > 1 and len(set(found[0])) > 2  # options matter; not one token
    assert asr(wave) == reference()(wave.copy())  # the text, as the pipeline decodes it
    whole = speech("beckett")[0]  # 413 encoder frames: the decoder's mask of samples, downsampled, has 2+
    assert recognizer.window_ids(whole, recognizer.config_for({"num_beams": 1})) == reference_ids(whole, num_beams=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_chunked_audio_equals_transformers(backend: str) -> None:
    """Windows of a seq2seq model: their tokens joined (the pipeline keeps no strides for them)."""
    asr, wave = ours(backend), clip(0.0, 4.0)
    options = {"chunk_length_s": 1.5, "stride_length_s": (0.2, 0.3), "num_beams": 1}
    want = reference()(wave.copy(), **options)
    assert asr(wave, **options) == want
    assert want != reference()(wave.copy(), num_beams=1)


def test_a_batch_gives_each_input_its_own_result() -> None:
    """Each input runs alone (the encoder's group norm sees the whole input)."""
    a, b = clip(0.3, 1.1), clip(5.0, 1.7)
    assert ours("mlx")([a, b], num_beams=1) == [reference()(w.copy(), num_beams=1) for w in (a, b)]


@pytest.mark.parametrize("generation", [
    None,  # the fixture's (max_length 16, _from_model_config)
    {},  # no generation_config.json: config.json's keys
    {"num_beams": 3, "max_new_tokens": 9, "eos_token_id": 2, "decoder_start_token_id": 1},
    {"max_length": 20, "length_penalty": 0.5, "decoder_start_token_id": 1, "eos_token_id": [2, 7]},
    {"num_beams": 1, "max_length": 30, "no_repeat_ngram_size": 3, "decoder_start_token_id": 1},
])
def test_generation_config_equals_the_pipelines(tmp_path: Path, generation: dict | None) -> None:
    import transformers

    folder = tmp_path / "moonshine"
    shutil.copytree(fixture(), folder)
    if generation is not None:
        (folder / "generation_config.json").unlink()
        if generation:
            (folder / "generation_config.json").write_text(json.dumps(generation))
    want = transformers.pipeline("automatic-speech-recognition", model=str(folder), device="cpu").generation_config
    repo = open_repo(folder)
    got = pipeline_generation_config(repo, pad_token_id=Tokenizer.from_repo(repo).pad_token_id)
    for name in GenerationConfig.fields():
        if name not in ("seed", "stop_strings"):
            assert getattr(got, name) == getattr(want, name), name


def test_bad_input_is_a_named_error() -> None:
    asr = ours("mlx")
    least = asr.recognizer.min_samples
    good = clip(0.0, 0.5)
    nan = good.copy()
    nan[3] = np.inf
    for bad, message in [(np.zeros(0, np.float32), r"input 1: .*empty"),
                         (np.zeros(least - 1, np.float32), rf"input 1: {least - 1} samples is too short.*{least}"),
                         (nan, r"input 1: .*(NaN|infinite)")]:
        with pytest.raises(ValueError, match=message):
            asr([good, bad], num_beams=1)
    assert least == 895
    asr(np.zeros(least, np.float32), num_beams=1)  # the shortest input runs


def test_bad_options_are_named_errors() -> None:
    asr, wave = ours("mlx"), clip(0.0, 1.0)
    for options, message in [({"return_timestamps": True}, r"gives no timestamps"),
                             ({"return_timestamps": "word"}, r"gives no timestamps"),
                             ({"language": "en"}, r"no 'language' option"),
                             ({"num_beams": 0}, r"num_beams"),
                             ({"num_beams": 2, "num_return_sequences": 2}, r"num_return_sequences must be 1"),
                             ({"chunk_length_s": 0.04, "stride_length_s": 0}, r"a window of 640 samples")]:
        with pytest.raises(ValueError, match=message):
            asr(wave, **options)
