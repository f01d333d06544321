"""Image classification, image embedding and zero-shot image classification: batching, options, bad input, CLI.

Their parity with transformers (the numbers of ``python -m parity vision``) is tests/test_vision_parity.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import transmuter_mlx as tm
from tests.fixtures.images import image_path
from tests.fixtures.vision_models import build

pytest.importorskip("transformers")


_PIPES: dict = {}


def pipe(task: str, fixture: str, **options):
    key = (task, fixture, json.dumps(options, sort_keys=True))
    if key not in _PIPES:
        _PIPES[key] = tm.pipeline(task, str(build(fixture)), **options)
    return _PIPES[key]


def images(*names: str) -> list[str]:
    return [str(image_path(n)) for n in names]


@pytest.mark.parametrize("task, fixture, options", [
    ("image-classification", "vit", {"top_k": None}),
    ("zero-shot-image-classification", "clip", {"labels": ["a cat", "a dog", "a cup"]}),
])
def test_batches_of_fixed_size_images_equal_single_images(task: str, fixture: str, options: dict) -> None:
    photos = images("chelsea", "coffee", "astronaut", "odd_333x217", "gray")
    single = pipe(task, fixture, **options)
    batched = pipe(task, fixture, compile={"batch_size": 2}, **options)
    assert batched.batch_size == 2
    for a, b in zip([single(p) for p in photos], batched(photos), strict=True):
        assert [p["label"] for p in a["predictions"]] == [p["label"] for p in b["predictions"]]
        np.testing.assert_allclose([p["score"] for p in a["predictions"]],
                                   [p["score"] for p in b["predictions"]], atol=1e-6)
    pixel_shapes = {dict(k)["pixel_values"][0] for k in batched.model.signatures()}
    assert pixel_shapes == {(2, 3, 32, 32), (1, 3, 32, 32)}  # the last image alone, not filled to 2 rows


def test_inputs_of_every_kind_give_the_same_result() -> None:
    from PIL import Image

    classify = pipe("image-classification", "vit", top_k=None)
    path = image_path("chelsea")
    image = Image.open(path)
    want = classify(str(path))["predictions"]
    for item in (path, image, np.asarray(image.convert("RGB")), path.read_bytes()):
        got = classify(item)["predictions"]
        assert [p["label"] for p in got] == [p["label"] for p in want]
        np.testing.assert_allclose([p["score"] for p in got], [p["score"] for p in want], atol=1e-6)


def test_top_k_and_function_to_apply() -> None:
    classify = pipe("image-classification", "vit")
    photo = str(image_path("chelsea"))
    assert len(classify(photo)["predictions"]) == 5  # transformers' default top_k, all 5 labels
    assert len(classify(photo, top_k=2)["predictions"]) == 2
    logits = classify(photo, top_k=None, function_to_apply="none")["predictions"]
    soft = classify(photo, top_k=None)["predictions"]
    raw = np.array([p["score"] for p in logits])
    np.testing.assert_allclose(sorted(np.exp(raw - raw.max()) / np.exp(raw - raw.max()).sum(), reverse=True),
                               [p["score"] for p in soft], atol=1e-6)
    with pytest.raises(ValueError, match="top_k"):
        classify(photo, top_k=0)


def test_image_embedding_l2_norm_and_backend_array() -> None:
    import mlx.core as mx

    embed = pipe("image-embedding", "clip", embedding_processor="l2_norm")
    vector = embed(str(image_path("coffee")))["embedding"]
    assert isinstance(vector, mx.array)
    assert abs(float((vector * vector).sum()) - 1.0) < 1e-5
    with pytest.raises(ValueError, match="embedding_processor"):
        tm.vision.image_embedding(str(build("clip")), embedding_processor="l3")("x")


def test_zero_shot_labels_at_build_or_call_and_missing_labels() -> None:
    photo = str(image_path("chelsea"))
    at_build = pipe("zero-shot-image-classification", "clip", labels=["a cat", "a dog"])(photo)
    at_call = pipe("zero-shot-image-classification", "clip")(photo, candidate_labels=["a cat", "a dog"])
    assert at_build == at_call
    unlabelled = pipe("zero-shot-image-classification", "clip")
    with pytest.raises(ValueError, match="no candidate labels"):
        unlabelled(photo)
    with pytest.raises(ValueError, match="no candidate labels"):
        unlabelled(photo, labels=[])
    with pytest.raises(ValueError, match="hypothesis_template"):
        unlabelled(photo, labels=["a"], hypothesis_template="no slot")


def test_siglip_scores_are_independent_sigmoids() -> None:
    classify = pipe("zero-shot-image-classification", "siglip")
    photo = str(image_path("chelsea"))
    two = {p["label"]: p["score"] for p in classify(photo, labels=["a cat", "a dog"])["predictions"]}
    one = {p["label"]: p["score"] for p in classify(photo, labels=["a cat"])["predictions"]}
    assert abs(two["a cat"] - one["a cat"]) < 1e-6  # a label's score does not depend on the others
    assert abs(sum(two.values()) - 1.0) > 1e-3


def test_bad_images_name_the_input() -> None:
    classify = pipe("image-classification", "vit")
    with pytest.raises(FileNotFoundError, match="input 1"):
        classify([str(image_path("chelsea")), "/no/such/image.png"])
    with pytest.raises(TypeError, match="input 0"):
        classify(np.zeros((8, 8, 3), np.float32))


def test_cli_prints_json(capsys) -> None:
    from transmuter_mlx.__main__ import main

    photo = str(image_path("chelsea"))
    assert main(["image-classification", str(build("vit")), photo, "--option", "top_k=2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == json.loads(json.dumps(pipe("image-classification", "vit")(photo, top_k=2)))
    assert main(["zero-shot-image-classification", str(build("clip")), photo, "--labels", "a cat, a dog"]) == 0
    assert sorted(p["label"] for p in json.loads(capsys.readouterr().out)["predictions"]) == ["a cat", "a dog"]


def test_cli_writes_images_in_results(tmp_path) -> None:
    from PIL import Image

    from transmuter_mlx.__main__ import media_to_files

    result = {"segments": [{"label": "a", "mask": Image.new("L", (3, 2), 255)}], "score": 1.0}
    written = media_to_files(result, str(tmp_path), "0")
    assert written == {"segments": [{"label": "a", "mask": str(tmp_path / "0-segments-0-mask.png")}], "score": 1.0}
    assert np.asarray(Image.open(written["segments"][0]["mask"])).tolist() == [[255] * 3] * 2
    with pytest.raises(ValueError, match="--output DIR"):
        media_to_files(result, None, "0")


def test_siglip_label_text_is_what_siglip_tokenizer_encodes(tmp_path) -> None:
    """transformers' SiglipTokenizer lowercases and strips punctuation before its sentencepiece model: its
    tokens of a text are the sentencepiece tokens of ``label_text(text)``."""
    spm = pytest.importorskip("sentencepiece")
    from transformers import SiglipTokenizer

    from transmuter_mlx.zoo.siglip import label_text

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["this is a photo of a cat", "two dogs and a remote control, on a couch!"] * 50))
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "spiece"), vocab_size=28,
                                   model_type="unigram", minloglevel=2)
    class AsIs(SiglipTokenizer):  # the same tokenizer, without its text rules
        def canonicalize_text(self, text, *, keep_punctuation_exact_string=None):
            return text

    tok = SiglipTokenizer(vocab_file=str(tmp_path / "spiece.model"))
    as_is = AsIs(vocab_file=str(tmp_path / "spiece.model"), do_lower_case=False)
    for text in ("This is a photo of Cats, Dogs!", "  A   remote-control?? ", "Hello. World."):
        assert as_is.tokenize(text) != tok.tokenize(text), text  # the rules matter for this text
        assert as_is.tokenize(label_text(text)) == tok.tokenize(text), text
