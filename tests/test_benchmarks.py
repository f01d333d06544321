"""The benchmarks' engines on the test fixtures: each script builds its engines in code that only a benchmark run
reaches (benchmarks/vision.py stopped running for a day over an argument its own OrtModel did not take). Here every
engine of the vision, text-to-text and speech benchmarks is built as the script builds it and run on a fixture, and
their results agree: ours and onnxruntime's (the same pipeline) with transformers'.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fixtures.images import image_path

pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

ENGINES = ("mlx", "torch", "onnxruntime", "transformers")


def test_vision_engines_agree_with_transformers(monkeypatch):
    from benchmarks import vision
    from tests.fixtures.vision_models import build

    monkeypatch.setitem(vision.MODELS, "vit", ("image-classification", "logits"))
    paths = [str(image_path("chelsea")), str(image_path("coffee"))]
    scores = {kind: vision.Engine(kind, "vit", build("vit"), 2).predict(paths) for kind in ENGINES}
    for kind in ENGINES[:3]:
        for ours, theirs in zip(scores[kind], scores["transformers"], strict=True):
            assert ours.keys() == theirs.keys(), kind
            np.testing.assert_allclose([ours[k] for k in theirs], list(theirs.values()), rtol=0, atol=1e-5,
                                       err_msg=kind)
    assert vision.agreement("image-classification", scores["mlx"], scores["transformers"]).endswith("top-1 2/2")


def test_vision_depth_engines_agree_with_transformers(monkeypatch):
    from benchmarks import vision
    from tests.fixtures.vision_models import build

    monkeypatch.setitem(vision.MODELS, "depth_anything", ("depth-estimation", "predicted_depth"))
    paths = [str(image_path("chelsea")), str(image_path("coffee"))]  # two sizes: one image a call
    depths = {kind: vision.Engine(kind, "depth_anything", build("depth_anything"), 1).predict(paths) for kind in ENGINES}
    for kind in ENGINES[:3]:
        for ours, theirs in zip(depths[kind], depths["transformers"], strict=True):
            assert ours.shape == theirs.shape, kind
            # the spec's depth tolerance: 1e-4 of the reference map's largest value
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4 * np.abs(theirs).max(), err_msg=kind)


def test_text_to_text_engines_agree_with_transformers():
    from benchmarks.text_to_text import TEXTS, translator
    from tests.fixtures.generation_models import build

    texts = {kind: translator(kind, build("t5"), 2, 6)(TEXTS[:4]) for kind in ENGINES}
    assert texts["mlx"] == texts["torch"] == texts["onnxruntime"] == texts["transformers"]


def test_speech_engines_agree_with_transformers():
    from benchmarks.audio import transcriber
    from tests.fixtures.speech import speech
    from tests.fixtures.whisper_real import build

    audio, _ = speech("beckett")
    texts = {kind: transcriber(kind, build("whisper-tiny.en"), 1)(audio) for kind in ENGINES}
    assert texts["mlx"] == texts["torch"] == texts["onnxruntime"] == texts["transformers"]
    assert texts["mlx"].strip()


def test_model_sweep_engines_agree_with_pytorch(monkeypatch, tmp_path):
    from benchmarks import model_sweep

    tiny = model_sweep.Family("semantic-segmentation", lambda T: T.SegformerForSemanticSegmentation(T.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16], num_attention_heads=[1, 2],
        decoder_hidden_size=16, num_labels=3)), {"pixel_values": (1, 3, 64, 64)})
    monkeypatch.setattr(model_sweep, "CACHE", tmp_path)
    monkeypatch.setitem(model_sweep.FAMILIES, "tiny-segformer", tiny)
    # the engines in this process (a worker process would not see the monkeypatched family)
    cells = model_sweep.measure(["tiny-segformer"], list(ENGINES), 1, False, rounds=1,
                                isolated=False)["models"]["tiny-segformer"]
    for kind in ENGINES:
        assert "seconds" in cells[kind], cells[kind]
        # its resizes and attention: float32 rounding of the same computation (1e-5 of the largest logit)
        assert cells[kind]["output_equals_transformers"] < 1e-5, (kind, cells[kind])
    assert "| tiny-segformer |" in model_sweep.markdown({"models": {"tiny-segformer": cells},
                                                          "environment": model_sweep.environment([])})
    # what a worker process hands back: its median seconds on stdout, its output in the named file
    out = tmp_path / "torch.npy"
    assert model_sweep.main(["--worker", "tiny-segformer", "torch", "--runs", "1", "--worker-output", str(out)]) == 0
    model, path, feeds = model_sweep.build("tiny-segformer")
    want = model_sweep.runner("transformers", model, path, feeds)()
    assert model_sweep.relative_difference(want, np.load(out)) < 1e-5


def test_pipeline_benchmarks_run_each_engine_in_a_worker(capsys):
    """The pipeline benchmarks' engines each in a process of their own: a worker prints its median and last output as
    one JSON line, the parent makes the cells of them (a worker that fails is an error cell), and the worker's command
    line keeps this run's options but its engines, batches and output."""
    import json
    import sys

    from benchmarks import _report

    calls = iter([1, 2, 3, 4])
    assert _report.worker_passes(lambda: f"text {next(calls)}", 3) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["output"] == "text 4" and line["seconds"] >= 0  # a warm-up pass, then three timed ones

    def worker(kind: str) -> list[str]:
        result = {"seconds": {"torch": 0.5, "onnxruntime": 0.25}[kind], "output": "same"} if kind != "mlx" else None
        code = f"print('a log line'); print({json.dumps(json.dumps(result))})" if result else "raise SystemExit(3)"
        return [sys.executable, "-c", code]

    cells = _report.isolated_passes(["mlx", "torch", "onnxruntime"], worker, False)
    assert cells["mlx"]["error"].startswith("error: RuntimeError: worker exited 3")
    assert cells["torch"] == {"seconds": 0.5, "output_equals_transformers": None, "vs_onnxruntime": 0.5}
    command = _report.worker_command("bench.py", ["--engines", "mlx,torch", "--runs", "2", "--output=x.md", "--json",
                                                  "--new-tokens", "8"])
    assert command("torch", 4) == [sys.executable, "bench.py", "--runs", "2", "--new-tokens", "8", "--worker", "torch", "4"]
