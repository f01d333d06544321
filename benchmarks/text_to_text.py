"""Text-to-text speed: a T5 of t5-small's shape, ours beside onnxruntime and transformers.

The model is a T5 with t5-small's layer sizes (d_model 512, 6 + 6 layers, 8 heads, d_ff 2048), random weights and
t5-small's 32,128-word vocabulary (the fixtures' small sentencepiece model, the rest added tokens; the head untied,
as T5 v1.1's, since a random tied one picks the start token at every step), exported by optimum
(``encoder_model.onnx``, ``decoder_model_merged.onnx``: the decoder with and without its cache in the two branches
of one If). Every engine translates the same 8 sentences, ``B`` at a time, greedy, exactly
``--new-tokens`` new tokens each (``min_new_tokens`` = ``max_new_tokens``). Engines, each in a process of its own
(``--one-process``: all in this one, their passes interleaved):

- ``mlx``, ``torch``: ``tm.text.text_to_text(folder, backend=..., compile={"batch_size": B})``;
- ``onnxruntime``: the same pipeline of ours with onnxruntime sessions of the same two ONNX files as its
  encoder and decoder (``model=EncoderDecoderSession(...)``, onnxruntime's default threads);
- ``transformers``: ``AutoModelForSeq2SeqLM.generate`` on the PyTorch weights, batches of ``B``.

Each cell is the median of ``--runs`` timed passes after a warm-up pass: new tokens per second, and the ratio to
onnxruntime and to transformers (above 1: faster). The last column says whether the engine's texts equal
transformers' decoded ones.

    python benchmarks/text_to_text.py          # table, and benchmarks/results/text_to_text.md
"""

from __future__ import annotations

import functools
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

TEXTS = [
    "translate English to German: The house is wonderful and the garden is large.",
    "summarize: the committee met on tuesday to discuss the budget for the coming year and agreed on most points.",
    "translate English to French: I would like a cup of coffee, please.",
    "the quick brown fox jumps over the lazy dog",
    "question: where is the station? context: the station is at the end of the main street, near the river.",
    "a",
    "translate English to German: We are going to the mountains next week if the weather is good.",
    "summarize: rain is expected in the north, while the south stays dry and warm until the weekend.",
]


def model_folder() -> Path:
    from tests.fixtures.generation_models import GenSpec, build

    return build(GenSpec("t5-small-shape", "t5", hidden_size=512, num_hidden_layers=6, num_attention_heads=8,
                         intermediate_size=2048, max_position_embeddings=512, vocab_size=32128))


def translator(kind: str, folder: Path, batch: int, new: int) -> Any:
    """``texts -> texts`` of one engine at batch ``batch``, ``new`` tokens each."""
    if kind == "transformers":
        import torch
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(folder)
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder).eval()

        def run(texts: list[str]) -> list[str]:
            out = []
            for i in range(0, len(texts), batch):
                enc = tok(texts[i : i + batch], return_tensors="pt", padding=True)
                with torch.inference_mode():
                    ids = model.generate(**enc, max_new_tokens=new, min_new_tokens=new, num_beams=1, do_sample=False)
                out += tok.batch_decode(ids, skip_special_tokens=True)
            return out

        return run
    import transmuter_mlx as tm

    options: dict[str, Any] = {"compile": {"batch_size": batch}}
    if kind == "onnxruntime":
        from parity.ort_model import OrtModel
        from transmuter_mlx.generation.seq2seq import EncoderDecoderSession

        # threads=0: onnxruntime's default (a thread per core), as ours and transformers use every core
        options["model"] = EncoderDecoderSession(OrtModel(folder / "onnx" / "encoder_model.onnx", threads=0, exact=False),
                                                 OrtModel(folder / "onnx" / "decoder_model_merged.onnx", threads=0, exact=False))
    else:
        options["backend"] = kind
    pipe = tm.text.text_to_text(str(folder), **options)

    def run(texts: list[str]) -> list[str]:
        results = pipe(texts, max_new_tokens=new, min_new_tokens=new, num_beams=1)
        return [r["results"][0]["text"] for r in results]

    return run


def runner(kind: str, batch: int, new: int) -> Any:
    """``() -> texts`` of one engine at batch ``batch`` on ``TEXTS``, ``new`` tokens each."""
    return functools.partial(translator(kind, model_folder(), batch, new), TEXTS)


def measure(engines: list[str], batches: list[int], runs: int, new: int, verbose: bool, worker: Any = None) -> dict:
    """The cells at each batch; ``worker``: each engine in a process of its own (``passes_per_batch``)."""
    model_folder()  # built once, before any worker
    results = passes_per_batch(engines, batches, lambda kind, b: runner(kind, b, new), runs, verbose,
                               lambda s: {"tokens_per_s": round(new * len(TEXTS) / s, 1)}, worker)
    return {"new_tokens": new, "texts": len(TEXTS), **results}


def markdown(results: dict, runs: int) -> str:
    lines = [
        "# Text-to-text: a T5 of t5-small's shape",
        "",
        f"T5 with t5-small's layer sizes, 32,128-word vocabulary and an untied head (random weights), optimum's merged "
        f"decoder; {results['texts']} texts, B at a time, greedy, {results['new_tokens']} new tokens each; median "
        f"of {runs} passes after a warm-up"
        f"{'' if results.get('one_process') else ', each engine in a process of its own'}; onnxruntime on its default "
        "threads. Ratios above 1: ours is faster. "
        "Produced by `python benchmarks/text_to_text.py`.",
        "",
    ]
    lines += engines_table(results, LABELS, "new tokens/s", lambda cell: f"{cell['tokens_per_s']:.0f}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = worker_arguments(engines_arguments(__doc__, ROOT / "benchmarks" / "results" / "text_to_text.md"))
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_passes(runner(args.worker[0], int(args.worker[1]), args.new_tokens), args.runs)
    worker = None if args.one_process else worker_command(__file__, sys.argv[1:] if argv is None else argv)
    results = measure(args.engines.split(","), [int(b) for b in args.batches.split(",")], args.runs,
                      args.new_tokens, args.verbose, worker) | {"one_process": args.one_process}
    return publish(results, markdown(results, args.runs), args)


if __name__ == "__main__":
    sys.exit(main())
