"""Text-to-text speed: a T5 of t5-small's shape, ours beside onnxruntime and transformers.

The model is a T5 with t5-small's layer sizes (d_model 512, 6 + 6 layers, 8 heads, d_ff 2048), random weights and
the fixtures' small sentencepiece vocabulary (~600 tokens, so the head is small next to t5-small's 32,128),
exported by optimum (``encoder_model.onnx``, ``decoder_model_merged.onnx``: the decoder with and without its cache
in the two branches of one If). Every engine translates the same 8 sentences, ``B`` at a time, greedy, exactly
``--new-tokens`` new tokens each (``min_new_tokens`` = ``max_new_tokens``). Engines, side by side in one process:

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

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks._report import environment, error_cell  # noqa: E402

ENGINES = ("mlx", "torch", "onnxruntime", "transformers")
LABELS = {"mlx": "ours: mlx", "torch": "ours: torch", "onnxruntime": "onnxruntime (our loop)",
          "transformers": "transformers"}
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
                         intermediate_size=2048, max_position_embeddings=512))


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
        options["model"] = EncoderDecoderSession(OrtModel(folder / "onnx" / "encoder_model.onnx", threads=0),
                                                 OrtModel(folder / "onnx" / "decoder_model_merged.onnx", threads=0))
    else:
        options["backend"] = kind
    pipe = tm.text.text_to_text(str(folder), **options)

    def run(texts: list[str]) -> list[str]:
        results = pipe(texts, max_new_tokens=new, min_new_tokens=new, num_beams=1)
        return [r["results"][0]["text"] for r in results]

    return run


def measure(engines: list[str], batches: list[int], runs: int, new: int, verbose: bool) -> dict:
    folder = model_folder()
    results: dict = {"new_tokens": new, "texts": len(TEXTS), "batches": {}}
    for batch in batches:
        runners, texts, times, errors = {}, {}, {e: [] for e in engines}, {}
        for kind in engines:
            try:
                runners[kind] = translator(kind, folder, batch, new)
                texts[kind] = runners[kind](TEXTS)  # warm-up: plans every shape
            except Exception as e:  # noqa: BLE001 - one engine's failure leaves the others' numbers
                errors[kind] = error_cell(e, verbose)
        for _ in range(runs):  # interleaved: other jobs on a shared machine slow every engine alike
            for kind, run in runners.items():
                if kind in errors:
                    continue
                t0 = time.perf_counter()
                try:
                    texts[kind] = run(TEXTS)
                except Exception as e:  # noqa: BLE001
                    errors[kind] = error_cell(e, verbose)
                    continue
                times[kind].append(time.perf_counter() - t0)
        cells = {}
        for kind in engines:
            if kind in errors:
                cells[kind] = {"error": errors[kind]}
                continue
            s = statistics.median(times[kind])
            cells[kind] = {"seconds": round(s, 3), "tokens_per_s": round(new * len(TEXTS) / s, 1),
                           "text_equals_transformers": texts.get("transformers") == texts[kind]
                           if "transformers" in texts else None}
        for cell in cells.values():
            for ref in ("onnxruntime", "transformers"):
                if "seconds" in cell and "seconds" in cells.get(ref, {}):
                    cell[f"vs_{ref}"] = round(cells[ref]["seconds"] / cell["seconds"], 2)
        results["batches"][batch] = cells
        if verbose:
            print(f"batch {batch}: {json.dumps(cells)}", file=sys.stderr)
    results["environment"] = environment(["mlx", "torch", "onnxruntime", "transformers", "numpy"])
    return results


def markdown(results: dict, runs: int) -> str:
    lines = [
        "# Text-to-text: a T5 of t5-small's shape",
        "",
        f"T5 with t5-small's layer sizes (random weights, the fixtures' ~600-token vocabulary), optimum's merged "
        f"decoder; {results['texts']} texts, B at a time, greedy, {results['new_tokens']} new tokens each; median "
        f"of {runs} passes after a warm-up; onnxruntime on its default threads. Ratios above 1: ours is faster. "
        "Produced by `python benchmarks/text_to_text.py`.",
        "",
        "| B | engine | seconds | new tokens/s | vs onnxruntime | vs transformers | text = transformers' |",
        "|---|---|---|---|---|---|---|",
    ]
    for batch, cells in results["batches"].items():
        for kind, cell in cells.items():
            if "error" in cell:
                lines.append(f"| {batch} | {LABELS[kind]} | {cell['error']} | | | | |")
                continue
            same = cell["text_equals_transformers"]
            lines.append(
                f"| {batch} | {LABELS[kind]} | {cell['seconds']:.2f} | {cell['tokens_per_s']:.0f} | "
                f"{cell.get('vs_onnxruntime', '')} | {cell.get('vs_transformers', '')} | "
                f"{'' if same is None else 'yes' if same else 'no'} |"
            )
    env = results["environment"]
    lines += ["", "Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "text_to_text.md"))
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    results = measure(args.engines.split(","), [int(b) for b in args.batches.split(",")], args.runs,
                      args.new_tokens, args.verbose)
    if args.json:
        print(json.dumps(results, indent=1))
    text = markdown(results, args.runs)
    print(text)
    if args.output:
        Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
