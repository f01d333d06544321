"""Command line: ``python -m transmuter_mlx TASK MODEL [INPUT ...]`` and ``python -m transmuter_mlx list``.

>>> main(["list"])                                             # doctest: +SKIP

Each INPUT (or each line of stdin when there is none) is one input of the task; the results
are printed as JSON, one line per input (arrays as lists). Structured inputs:
``--question Q --context C`` (question answering; without --context each INPUT is a context),
``--labels a,b,c`` (zero-shot classification), ``--query Q`` with the documents as INPUTs
(ranking: one input), ``--pair TEXT`` (each INPUT paired with TEXT, text classification).
Task options go in ``--option key=value`` (the value is parsed as JSON when it can be).
``--stream`` (the generation tasks) prints each input's text as it is generated, a line per input.
When the reader of stdout goes away (``... --stream | head -c 5``), the command stops its decoding and
exits quietly with 141 (128 + SIGPIPE, what a shell reports for a tool that SIGPIPE ended).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import numpy as np

EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: the exit status of a Unix tool whose reader closed the pipe


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m transmuter_mlx",
        description="Run a task pipeline on a Hugging Face ONNX repository or a local folder.",
        epilog="`python -m transmuter_mlx list` prints the tasks and the model families. "
        "Example: python -m transmuter_mlx fill-mask Xenova/bert-base-uncased "
        "'Paris is the [MASK] of France.'",
    )
    parser.add_argument("task", help="a task or alias (see `list`)")
    parser.add_argument("model", nargs="?", help="repo id (org/name) or local folder")
    parser.add_argument("inputs", nargs="*", help="inputs; read from stdin (one per line) when none")
    parser.add_argument("--json", action="store_true", default=True, help="print JSON lines (the default)")
    parser.add_argument("--pretty", action="store_true", help="indent the JSON")
    parser.add_argument("--backend", default="mlx", choices=("mlx", "torch"))
    parser.add_argument("--device", help="torch device, e.g. cuda")
    parser.add_argument("--variant", help="ONNX variant: fp32, fp16, q8, q4, ...")
    parser.add_argument("--offline", action="store_true", help="use only the Hugging Face cache")
    parser.add_argument("--batch-size", type=int, help="rows per compiled batch")
    parser.add_argument("--stream", action="store_true",
                        help="print the generated text as it comes (text-generation, text2text, translation, ...)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a task option")
    parser.add_argument("--question", help="question answering: the question")
    parser.add_argument("--context", help="question answering: the context")
    parser.add_argument("--labels", help="zero-shot classification: comma-separated labels")
    parser.add_argument("--query", help="ranking: the query (the inputs are the documents)")
    parser.add_argument("--pair", help="text classification: the text_pair of every input")
    return parser


def parse_option(text: str) -> tuple[str, Any]:
    """``"top_k=3"`` -> ``("top_k", 3)``; a value that is not JSON stays a str."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--option needs KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def make_inputs(args: argparse.Namespace, texts: list[str]) -> list[Any]:
    """The task inputs that the structured flags describe."""
    if args.question is not None:
        contexts = [args.context] if args.context is not None else texts
        return [{"question": args.question, "context": c} for c in contexts]
    if args.query is not None:
        return [{"query": args.query, "documents": texts}]
    if args.pair is not None:
        return [(t, args.pair) for t in texts]
    return texts


def to_json(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return np.asarray(value).tolist()  # mx.array, np.ndarray


def list_all() -> str:
    from . import zoo
    from .pipelines import ALIASES, TASKS

    lines = ["tasks:"]
    for name, row in TASKS.items():
        aliases = ", ".join(a for a, t in ALIASES.items() if t == name)
        lines.append(f"  {name:26} {row.modality:6} default {row.default_model}  (aliases: {aliases})")
    lines.append("model families (config.json model_type): " + ", ".join(zoo.families()))
    return "\n".join(lines)


def print_streams(pipe: Any, inputs: list[Any]) -> int:
    """Each input's text chunks to stdout as they are generated, then a newline."""
    if not callable(getattr(pipe, "stream_many", None)):
        raise ValueError(f"{pipe.task}: --stream is for the generation tasks (text-generation, text2text-generation, "
                         "translation, summarization)")
    for item in inputs:
        with pipe(item, stream=True) as chunks:  # leaving early (a closed pipe) stops the decoding
            for chunk in chunks:
                sys.stdout.write(chunk)
                sys.stdout.flush()
        sys.stdout.write("\n")
    return 0


def stdout_closed() -> int:
    """The exit status when stdout's reader went away; further writes (Python's flush at exit) go nowhere,
    so that no "Broken pipe" error is printed."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE_CLOSED


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["list"]:
        print(list_all())
        return 0
    args = build_parser().parse_args(argv)
    from .pipelines import UnknownTaskError, pipeline, resolve_task

    try:
        resolve_task(args.task)
    except UnknownTaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    options: dict[str, Any] = dict(parse_option(o) for o in args.option)
    options["backend"] = args.backend
    for name in ("device", "variant"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    if args.offline:
        options["offline"] = True
    if args.batch_size:
        options["compile"] = {**options.get("compile", {}), "batch_size": args.batch_size}
    if args.labels is not None:
        options["labels"] = [x.strip() for x in args.labels.split(",") if x.strip()]
    texts = list(args.inputs)
    if not texts and not (args.question is not None and args.context is not None):
        texts = [line.rstrip("\n") for line in sys.stdin]
    stream = args.stream or bool(options.pop("stream", False))
    try:
        pipe = pipeline(args.task, args.model, **options)
        if stream:
            return print_streams(pipe, make_inputs(args, texts))
        results = pipe(make_inputs(args, texts))
        for result in results:
            print(json.dumps(result, default=to_json, ensure_ascii=False, indent=2 if args.pretty else None))
            sys.stdout.flush()
    except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly, as Unix tools do
        return stdout_closed()
    except (TypeError, ValueError, OSError) as e:  # bad task, option, input or repository
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
