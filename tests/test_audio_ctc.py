"""automatic-speech-recognition with CTC heads (wav2vec2, HuBERT) against transformers 4.57.6's pipeline on
the fixtures' PyTorch models: the same text, the same character and word timestamps, the same text of
chunked long audio (``chunk_length_s`` windows and their strides), on mlx and torch; the CTC decoding
against ``Wav2Vec2CTCTokenizer`` on random frame tokens; the windows against ``chunk_iter`` and
``rescale_stride``; bad input and options as named errors."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.fixtures.audio_models import build
from tests.fixtures.speech import speech
from transmuter_mlx.hub import open_repo
from transmuter_mlx.pipelines.audio_ctc import (
    CTCRecognizer,
    CTCVocabulary,
    Window,
    frame_stride,
    window_sizes,
    windows,
)
from transmuter_mlx.pipelines.audio_speech import SpeechToText

BACKENDS = ("mlx", "torch")
FIXTURES = ("wav2vec2-ctc", "hubert-ctc")
RATE = 16000


@functools.cache
def clip(start_s: float, seconds: float) -> np.ndarray:
    wave, rate = speech("beckett")
    return wave[int(start_s * rate):int((start_s + seconds) * rate)].copy()


@functools.cache
def reference(name: str):
    import transformers

    return transformers.pipeline("automatic-speech-recognition", model=str(build(name)), device="cpu")


@functools.cache
def ours(name: str, backend: str) -> SpeechToText:
    return SpeechToText(build(name), backend=backend)


def expected(name: str, wave: np.ndarray, **options) -> dict:
    """transformers' result with plain floats (its timestamps are numpy floats)."""
    result = reference(name)(wave.copy(), **options)
    if "chunks" in result:
        result["chunks"] = [{"text": c["text"], "timestamp": tuple(float(t) for t in c["timestamp"])}
                            for c in result["chunks"]]
    return result


# ---------------------------------------------------------------- against the pipeline
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", FIXTURES)
def test_text_and_timestamps_equal_transformers(name: str, backend: str) -> None:
    asr = ours(name, backend)
    wave = clip(1.0, 1.5)
    for stamps in (None, "char", "word"):
        options = {} if stamps is None else {"return_timestamps": stamps}
        want = expected(name, wave, **options)
        got = asr(wave, **options)
        assert got == want, (stamps, got, want)
    assert len(want["chunks"]) >= 2  # several words: the fixture's head is not degenerate


@pytest.mark.parametrize("backend", BACKENDS)
def test_chunked_long_audio_equals_transformers(backend: str) -> None:
    """Windows with the default stride (chunk_length_s / 6) and with uneven strides; word timestamps
    are counted in the frames kept of each window, as the pipeline counts them."""
    asr, wave = ours("wav2vec2-ctc", backend), clip(0.0, 3.0)
    for options in ({"chunk_length_s": 1.2, "return_timestamps": "word"},
                    {"chunk_length_s": 1.0, "stride_length_s": (0.3, 0.2), "return_timestamps": "char"}):
        want = expected("wav2vec2-ctc", wave, **options)
        assert asr(wave, **options) == want, options
    assert want["text"] != expected("wav2vec2-ctc", wave)["text"]  # the windows change the text: they ran


@pytest.mark.parametrize("backend", BACKENDS)
def test_logits_close_to_pytorch(backend: str) -> None:
    """The margin under the equal texts: our frame logits against the PyTorch model's."""
    import torch
    import transformers

    folder = build("wav2vec2-ctc")
    model = transformers.Wav2Vec2ForCTC.from_pretrained(folder).eval()
    asr, wave = ours("wav2vec2-ctc", backend), clip(2.0, 1.5)
    feeds = {k: v[None] for k, v in asr.recognizer.processor.features(wave).items()}
    got = asr.recognizer.model(feeds)["logits"]
    got = np.asarray(got.float() if backend == "torch" else got, np.float32)
    with torch.no_grad():
        want = model(torch.from_numpy(feeds["input_values"])).logits.numpy()
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_a_batch_gives_each_input_its_own_result() -> None:
    """Each input runs alone (padding would change wav2vec2's normalisation and group norm)."""
    asr = ours("wav2vec2-ctc", "mlx")
    a, b = clip(0.5, 1.2), clip(4.0, 1.9)
    assert asr([a, b], return_timestamps="word") == [expected("wav2vec2-ctc", w, return_timestamps="word")
                                                     for w in (a, b)]


def test_input_at_another_rate_is_resampled() -> None:
    asr = ours("wav2vec2-ctc", "mlx")
    wave, rate = speech("beckett_48k")
    piece = wave[:rate * 2]
    import soxr

    assert asr({"raw": piece, "sampling_rate": rate}) == asr(soxr.resample(piece, rate, RATE, quality="HQ"))


# ---------------------------------------------------------------- the decoding
def _tokenizer(tmp_path: Path, **options):
    import transformers

    chars = ["<pad>", "<s>", "</s>", "<unk>", "|", *"ETAONIHSRDL'"]
    (tmp_path / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(chars)}))
    tok = transformers.Wav2Vec2CTCTokenizer(str(tmp_path / "vocab.json"), **options)
    tok.save_pretrained(tmp_path)
    return tok, len(chars)


@pytest.mark.parametrize("options", [{}, {"do_lower_case": True}, {"clean_up_tokenization_spaces": True},
                                     {"replace_word_delimiter_char": "_"}])
def test_decoding_equals_wav2vec2_ctc_tokenizer(tmp_path: Path, options: dict) -> None:
    """Random frame tokens (repeats, blanks, delimiters, special tokens, ids past the vocabulary)."""
    tok, n = _tokenizer(tmp_path, **options)
    vocab = CTCVocabulary.from_repo(open_repo(tmp_path))
    rng = np.random.default_rng(0)
    weights = np.r_[8.0, 0.3, 0.3, 0.3, 3.0, np.ones(n - 5), 0.2]
    for length in [0, 1, 2, 5, *rng.integers(10, 200, 40)]:
        ids = rng.choice(n + 1, size=length, p=weights / weights.sum()).tolist()
        text, chars = vocab.decode(ids, "char")
        out = tok.decode(ids, output_char_offsets=True, output_word_offsets=True)
        assert text == out["text"] == tok.decode(ids)
        assert chars == [{**o, "start_offset": int(o["start_offset"]), "end_offset": int(o["end_offset"])}
                         for o in out["char_offsets"]]
        assert vocab.decode(ids, "word")[1] == out["word_offsets"]


def test_vocabulary_from_tokenizer_json_only(tmp_path: Path) -> None:
    """A repository with a tokenizer.json (WordLevel + CTC decoder) and no vocab.json."""
    chars = ["<pad>", "<s>", "</s>", "<unk>", "|", "A", "B"]
    (tmp_path / "tokenizer.json").write_text(json.dumps({
        "model": {"type": "WordLevel", "vocab": {c: i for i, c in enumerate(chars)}, "unk_token": "<unk>"},
        "decoder": {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": True},
        "added_tokens": [{"id": i, "content": c} for i, c in enumerate(chars[:4])]}))
    vocab = CTCVocabulary.from_repo(open_repo(tmp_path))
    assert vocab.decode([5, 5, 0, 5, 4, 6, 4, 1, 9], "word") == ("AA B <s><unk>", [
        {"word": "AA", "start_offset": 0, "end_offset": 4}, {"word": "B", "start_offset": 5, "end_offset": 6},
        {"word": "<s><unk>", "start_offset": 7, "end_offset": 9}])


def test_windows_equal_chunk_iter_and_rescale_stride() -> None:
    from transformers.pipelines.automatic_speech_recognition import chunk_iter, rescale_stride

    class Identity:
        sampling_rate = RATE

        def __call__(self, chunk, **_):
            return {"input_values": chunk}

    rng = np.random.default_rng(1)
    for n in [1000, 16000, 31999, 32000, 32001, *rng.integers(20000, 200000, 20)]:
        wave = np.arange(n, dtype=np.float32)
        for chunk_s, stride_s in [(1.0, None), (2.0, (0.3, 0.1)), (0.5, 0.1), (1.7, 0.25)]:
            sizes = window_sizes(chunk_s, stride_s, RATE, 320, "asr")
            theirs = list(chunk_iter(wave, Identity(), *sizes))
            mine = list(windows(wave, *sizes))
            assert len(mine) == len(theirs)
            for w, t in zip(mine, theirs):
                np.testing.assert_array_equal(w.samples, t["input_values"])
                assert (w.samples.shape[0], w.left, w.right) == t["stride"]
                frames, left, right = rescale_stride([t["stride"]], 1 / 320)[0]
                assert frame_stride(w, 320) == (left, frames - right)
    assert frame_stride(Window(np.zeros(800, np.float32)), 320) == (0, 2)  # 2.5 frames: half to even


# ---------------------------------------------------------------- errors
def test_bad_input_is_a_named_error() -> None:
    asr = ours("wav2vec2-ctc", "mlx")
    least = asr.recognizer.min_samples
    good = clip(0.0, 0.5)
    nan = good.copy()
    nan[7] = np.nan
    cases = [(np.zeros(0, np.float32), r"input 1: .*empty"), (np.zeros(1, np.float32), r"input 1: 1 sample is too"),
             (np.zeros(least - 1, np.float32), rf"input 1: {least - 1} samples is too short.*at least {least}"),
             (nan, r"input 1: .*NaN")]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            asr([good, bad])
    asr(np.zeros(least, np.float32))  # the shortest input runs


def test_bad_options_are_named_errors() -> None:
    asr, wave = ours("wav2vec2-ctc", "mlx"), clip(0.0, 1.0)
    ratio, least = asr.recognizer.ratio, asr.recognizer.min_samples
    assert ratio < least  # a window of one frame's samples is too short for the convolutions
    for options, message in [({"return_timestamps": True}, r"return_timestamps must be 'char' or 'word'"),
                             ({"max_new_tokens": 5}, r"CTC model, which has no 'max_new_tokens'"),
                             ({"language": "en"}, r"no 'language' option"),
                             ({"chunk_length_s": 1.0, "stride_length_s": 0.5}, r"longer than the strides"),
                             ({"chunk_length_s": -1}, r"chunk_length_s must be a positive"),
                             ({"chunk_length_s": 1.0, "stride_length_s": "x"}, r"stride_length_s must be"),
                             ({"chunk_length_s": ratio / RATE, "stride_length_s": 0}, rf"a window of {ratio} samples .*{least}")]:
        with pytest.raises(ValueError, match=message):
            asr(wave, **options)


def test_a_recognizer_takes_a_pipe_like_object() -> None:
    """The Recognizer protocol: built from what a pipe holds; a CTCVocabulary may be given as tokenizer."""
    repo = open_repo(build("hubert-ctc"))
    base = ours("hubert-ctc", "mlx")
    vocab = CTCVocabulary.from_repo(repo)
    pipe = SimpleNamespace(task=base.task, repo=repo, args=base.args, load_file=base.load_file,
                           options=SimpleNamespace(model=base.recognizer.model, featurizer=None, tokenizer=vocab))
    recognizer = CTCRecognizer(pipe)
    assert recognizer.vocabulary is vocab and recognizer.sampling_rate == RATE
    assert recognizer.ratio == int(np.prod(repo.config["conv_stride"]))
    wave = clip(3.0, 1.0)
    assert recognizer.recognize([wave], {"return_timestamps": "char"}) == [base(wave, return_timestamps="char")]


def test_a_classifier_is_not_a_ctc_head() -> None:
    with pytest.raises(ValueError, match=r"logits of shape \(1, \d+\).*not a CTC head"):
        SpeechToText(build("wav2vec2-cls"), tokenizer=CTCVocabulary({0: "<pad>"}))(clip(0.0, 0.5))


def test_stream_pieces_join_to_the_text() -> None:
    """stream=True: pieces as windows finish, from a waveform or from blocks of any size, joining to the
    text of a plain call; without chunk_length_s the text comes whole at the end."""
    asr, wave = ours("wav2vec2-ctc", "mlx"), clip(0.0, 3.0)
    blocks = np.split(wave, np.sort(np.random.default_rng(0).integers(0, wave.shape[0], 9)))
    for options in ({"chunk_length_s": 0.8}, {"chunk_length_s": 1.0, "stride_length_s": (0.3, 0.1)}):
        text = asr(wave, **options)["text"]
        pieces = list(asr(wave, stream=True, **options))
        assert "".join(pieces) == text and len(pieces) >= 2, (pieces, text)
        assert list(asr(iter(blocks), stream=True, **options)) == pieces
    assert list(asr(iter(blocks), stream=True)) == [asr(wave)["text"]]
    with pytest.raises(ValueError, match=r"stream=True gives text pieces only"):
        list(asr(wave, stream=True, return_timestamps="word"))
    with pytest.raises(ValueError, match=r"input 0: the stream gave no audio"):
        list(asr(iter([]), stream=True, chunk_length_s=1.0))
