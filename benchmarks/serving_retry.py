"""What one bad input costs a ``tm.Serving``: 50 concurrent calls, all good or one bad, on two pipelines.

    python benchmarks/serving_retry.py            # a table on stdout
    python benchmarks/serving_retry.py --runs 5   # median of 5 runs per cell

The 50 inputs are queued at once (so every run has the same batches: 6 of 8 and one of 2, the bad input in
the fourth), each case runs once to compile its shapes, then the cases take turns ``--runs`` times. The bad input raises when
its batch runs (a non-str input: the pipeline's input check). ``singles`` is the
rule Serving had before (after a batch raises, each of its inputs runs alone, each such run a full
compiled batch); ``now`` is Serving's rule (the pipeline's ``input_errors`` where it has one, else
halves of the batch). Pipelines: text-generation on the GPT-2 fixture (16 new tokens) and
text-classification on the BERT fixture, both with ``compile={"batch_size": 8}``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import transmuter_mlx as tm

CALLS = 50
BAD_AT = 25


class SinglesServing(tm.Serving):
    """Serving with the rule it had before: after a batch raised, each of its inputs runs alone."""

    def _isolate(self, part: list, error: Exception) -> None:
        if len(part) == 1:
            self._fail(part[0], error)
            return
        for request in part:
            if request.streamed:
                self._fail(request, error)
                continue
            self._count(retries=1)
            try:
                (result,) = self._call([request])
            except Exception as own_error:
                self._fail(request, own_error)
            else:
                request.future.set_result(result)


def serve(serving_class: type[tm.Serving], pipe: Any, inputs: list[Any]) -> tuple[float, tm.ServingStats]:
    """Seconds until every one of ``inputs``, queued at once as separate calls, has its result or error."""
    with serving_class(pipe, batch_timeout_ms=20) as serving:
        start = time.perf_counter()
        futures, _ = serving._submit(inputs, {})
        for future in futures:
            future.exception(600)
        return time.perf_counter() - start, serving.stats


def pipelines() -> dict[str, tuple[Any, list[Any]]]:
    from tests.fixtures.generation_models import build as build_generation
    from tests.fixtures.text_models import build as build_text

    words = "the cat sat on a mat and looked at dog for long time while birds sang".split()
    texts = [" ".join(words[i % 7: i % 7 + 3 + i % 5]) for i in range(CALLS)]
    generation = tm.text.generation(str(build_generation("gpt2")), max_new_tokens=16, compile={"batch_size": 8})
    classification = tm.pipeline("text-classification", str(build_text("bert-sst3")), compile={"batch_size": 8})
    return {"text-generation (gpt2)": (generation, texts), "text-classification (bert)": (classification, texts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"| pipeline | case | seconds (median of {args.runs}) | vs all good | batches | retries |")
    print("|---|---|---|---|---|---|")
    for name, (pipe, texts) in pipelines().items():
        bad = texts[:BAD_AT] + [3] + texts[BAD_AT + 1:]
        cases = {"all good": (tm.Serving, texts), "one bad, singles (before)": (SinglesServing, bad),
                 "one bad, now": (tm.Serving, bad)}
        for serving_class, inputs in cases.values():
            serve(serving_class, pipe, inputs)  # warm-up: compiles the shapes of each case
        runs: dict[str, list] = {case: [] for case in cases}
        for _ in range(args.runs):  # the cases take turns, so that a busy machine slows them alike
            for case, (serving_class, inputs) in cases.items():
                runs[case].append(serve(serving_class, pipe, inputs))
        base = statistics.median(t for t, _ in runs["all good"])
        for case, timed in runs.items():
            seconds, stats = statistics.median(t for t, _ in timed), timed[-1][1]
            print(f"| {name} | {case} | {seconds:.2f} | {seconds / base:.2f}x | {stats.batches} | {stats.retries} |")


if __name__ == "__main__":
    main()
