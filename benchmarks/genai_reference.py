"""Greedy generation with onnxruntime-genai: the speed reference for our decoding loop.

Runs in the onnxruntime-genai venv (``.cache/venv-genai``, made by ``tests/fixtures/genai_models.py``),
not the project's: it imports only onnxruntime_genai. The folder needs a ``genai_config.json`` (the
``qwen2-genai`` fixture has one, pointing at ``onnx/model_q4.onnx``).

    .cache/venv-genai/bin/python benchmarks/genai_reference.py FOLDER
    .cache/venv-genai/bin/python benchmarks/genai_reference.py FOLDER --model onnx/model.onnx --json
    .cache/venv-genai/bin/python benchmarks/genai_reference.py FOLDER --prompt-ids 1,2,3 --max-new-tokens 32

Prints the generated ids, the prompt (prefill) time, and decode tokens/s (median of ``--runs``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def generate(folder: str, prompt_ids: list[int], max_new_tokens: int, model: str | None = None):
    """Greedy ids after ``prompt_ids``, the prefill seconds and the per-token decode seconds."""
    import onnxruntime_genai as og

    config = og.Config(folder)
    if model:
        config.overlay(json.dumps({"model": {"decoder": {"filename": model}}}))
    m = og.Model(config)
    params = og.GeneratorParams(m)
    params.set_search_options(
        do_sample=False,
        max_length=len(prompt_ids) + max_new_tokens,
        min_length=len(prompt_ids) + max_new_tokens,
    )  # no early stop at eos
    gen = og.Generator(m, params)
    t0 = time.perf_counter()
    gen.append_tokens([prompt_ids])
    prefill = time.perf_counter() - t0
    steps = []
    while not gen.is_done():
        t = time.perf_counter()
        gen.generate_next_token()
        steps.append(time.perf_counter() - t)
    return [int(i) for i in gen.get_sequence(0)[len(prompt_ids) :]], prefill, steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("--model", help="decoder file relative to the folder (default: genai_config.json's)")
    p.add_argument("--prompt", default="Hello world, the quick brown fox", help="text (og.Tokenizer)")
    p.add_argument("--prompt-ids", help="comma-separated ids instead of --prompt")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.prompt_ids:
        ids = [int(x) for x in a.prompt_ids.split(",")]
    else:
        import onnxruntime_genai as og

        ids = [int(i) for i in og.Tokenizer(og.Model(a.folder)).encode(a.prompt)]
    runs = [generate(a.folder, ids, a.max_new_tokens, a.model) for _ in range(max(1, a.runs))]
    tokens = runs[0][0]
    decode = (
        statistics.median(statistics.median(r[2]) for r in runs if r[2]) if any(r[2] for r in runs) else 0.0
    )
    result = {
        "prompt_ids": ids,
        "generated_ids": tokens,
        "prefill_s": statistics.median(r[1] for r in runs),
        "decode_tokens_per_s": (1.0 / decode) if decode else None,
    }
    if a.json:
        print(json.dumps(result))
    else:
        print(f"prompt {len(ids)} ids, generated {tokens}")
        print(
            f"prefill {result['prefill_s'] * 1e3:.2f} ms, decode {result['decode_tokens_per_s'] or 0:.1f} tokens/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
