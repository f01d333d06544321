"""A pipeline called on a generator, an iterator or a dataset gives its results lazily (pipelines/iterables.py):
equal to the results of the same inputs as a list, reading ``batch_size`` inputs ahead at most, in flat memory
over 10,000 texts; ``batch_size`` and ``progress`` are call options of every task."""

from __future__ import annotations

import types

import numpy as np
import pytest

import transmuter_mlx as tm
from tests.fixtures.text_models import build

TEXTS = [f"sentence number {i} of the stream" for i in range(23)]


@pytest.fixture(scope="module")
def embed():
    return tm.text.text_embedding(str(build("bert-embed-mean")))


def _same_embeddings(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g["embedding"]), np.asarray(w["embedding"]), atol=1e-5)


def test_a_generator_gives_its_results_lazily_in_batches(embed):
    read: list[int] = []

    def texts():
        for i, text in enumerate(TEXTS):
            read.append(i)
            yield text

    results = embed(texts(), batch_size=4)
    assert isinstance(results, types.GeneratorType) and read == []  # nothing runs before a result is asked for
    got = []
    for i, result in enumerate(results):
        assert len(read) <= (i // 4 + 1) * 4  # a batch is read when its first result is asked for
        got.append(result)
    _same_embeddings(got, embed(TEXTS))


def test_10000_texts_run_in_flat_memory(embed):
    """The results of a 10,000-text generator, each dropped when read: the process's resident memory after the
    last is within 20 MB of what it was after the 1,000th (the results alone would hold ~1.3 MB more, the
    inputs read ahead ~1 MB: a leak of one batch per step would be hundreds)."""
    import resource
    import sys

    def resident_mb() -> float:  # the peak so far: KB on Linux, bytes on macOS
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)

    texts = (f"text {i} " + "word " * (i % 40) for i in range(10_000))
    count, after_1000 = 0, None
    for count, result in enumerate(embed(texts, batch_size=32), 1):
        assert result["embedding"].shape == (32,)
        if count == 1000:
            after_1000 = resident_mb()
    assert count == 10_000
    assert resident_mb() - after_1000 < 20


def test_datasets_read_by_index_and_iterators(embed):
    class KeyDataset:  # as transformers.pipelines.pt_utils.KeyDataset: a length and items, no __iter__
        def __init__(self, rows: list[dict], key: str) -> None:
            self.rows, self.key = rows, key

        def __len__(self) -> int:
            return len(self.rows)

        def __getitem__(self, i: int) -> str:
            return self.rows[i][self.key]

    dataset = KeyDataset([{"text": t} for t in TEXTS], "text")
    _same_embeddings(list(embed(dataset, batch_size=8)), embed(TEXTS))
    _same_embeddings(list(embed(iter(TEXTS[:5]))), embed(TEXTS[:5]))
    assert list(embed(iter([]))) == []


def test_batch_size_and_progress_on_a_list(embed, capsys):
    """A list still gives a list; ``batch_size`` runs it in model batches of that size, and ``progress`` draws
    a bar with the count of inputs (on stderr)."""
    runs: list[int] = []
    twin = embed.with_batch_size(8)
    original = twin.run_model
    twin.run_model = lambda feeds: runs.append(len(feeds["input_ids"])) or original(feeds)
    embed.with_batch_size = lambda n: twin  # the pipeline the call runs with that batch size
    try:
        _same_embeddings(embed(TEXTS, batch_size=8, progress=True), embed(TEXTS))
    finally:
        del embed.with_batch_size
    assert runs and set(runs) == {8}  # 23 texts: batches of 8 (the last filled), never of the build's 1
    assert "23/23" in capsys.readouterr().err


def test_bad_call_options_raise_at_the_call_not_at_the_first_result(embed):
    with pytest.raises(TypeError, match="unknown call option"):
        embed(iter(TEXTS), top_k=3)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        embed(iter(TEXTS), batch_size=0)


def test_generation_over_a_generator():
    from tests.fixtures.generation_models import build as build_generation

    generate = tm.text.generation(str(build_generation("gpt2")))
    prompts = ["Hello there", "Once upon a time", "x y"]
    lazy = generate((p for p in prompts), batch_size=2, max_new_tokens=4)
    assert isinstance(lazy, types.GeneratorType)
    assert list(lazy) == generate(prompts, batch_size=2, max_new_tokens=4)  # token summaries count the padding


def test_speech_recognition_tells_a_dataset_of_clips_from_a_stream_of_blocks(tmp_path):
    """An iterable of audio files is inputs; an iterable of sample blocks stays one input (a stream)."""
    import soundfile as sf

    from tests.fixtures.audio_models import build as build_audio
    from tests.fixtures.speech import speech

    wave, rate = speech("beckett")
    clips = [wave[: 2 * rate], wave[2 * rate: 5 * rate]]
    paths = []
    for i, clip in enumerate(clips):
        paths.append(tmp_path / f"clip{i}.wav")
        sf.write(paths[-1], clip, rate)
    asr = tm.pipeline("automatic-speech-recognition", str(build_audio("whisper")), num_beams=1)
    assert list(asr(str(p) for p in paths)) == asr([str(p) for p in paths])
    blocks = (clips[0][i:i + 4000] for i in range(0, len(clips[0]), 4000))
    assert asr(blocks) == asr(clips[0])
