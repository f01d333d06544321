"""automatic-speech-recognition with Moonshine against transformers 4.57.6's pipeline on the fixture's PyTorch
model: the same text and the same token ids as ``generate`` with the pipeline's generation config (5 beams,
the model's max_length; greedy and other options given at the call), chunked audio, on mlx and torch; the
pipeline's generation config for several generation_config.json files; bad input and options as named
errors."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.audio_models import build
from tests.fixtures.speech import speech
from transmuter_mlx.generation.config import GenerationConfig
from transmuter_mlx.hub import open_repo
from transmuter_mlx.pipelines.audio_moonshine import pipeline_generation_config
from transmuter_mlx.pipelines.audio_speech import SpeechToText
from transmuter_mlx.tokenizer import Tokenizer

BACKENDS = ("mlx", "torch")
CALLS = ({}, {"num_beams": 1}, {"num_beams": 2, "max_new_tokens": 6})


def fixture() -> Path:
    return build("moonshine")


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


def test_stream_pieces_join_to_the_text() -> None:
    """stream=True: a piece per decoded window, from a waveform or from blocks of any size, joining to the
    text of a plain call; without chunk_length_s the text comes whole at the end."""
    asr, wave = ours("mlx"), clip(0.0, 4.0)
    blocks = np.split(wave, np.sort(np.random.default_rng(0).integers(0, wave.shape[0], 7)))
    options = {"chunk_length_s": 1.5, "num_beams": 1}
    text = asr(wave, **options)["text"]
    pieces = list(asr(wave, stream=True, **options))
    assert "".join(pieces) == text and len(pieces) >= 2, (pieces, text)
    assert list(asr(iter(blocks), stream=True, **options)) == pieces
    assert list(asr(iter(blocks), stream=True, num_beams=1)) == [asr(wave, num_beams=1)["text"]]
    with pytest.raises(ValueError, match=r"gives no timestamps"):
        list(asr(wave, stream=True, return_timestamps=True))
