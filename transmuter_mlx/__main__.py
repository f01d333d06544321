"""Command line: ``python -m transmuter_mlx TASK MODEL [INPUT ...]``, ``python -m transmuter_mlx list`` and
``python -m transmuter_mlx serve TASK=MODEL ...`` (the HTTP server, see :mod:`transmuter_mlx.server`).

>>> main(["list"])
tasks (modality, processor, function, default model; aliases):
  text-embedding  text  tokenizer  tm.text.text_embedding  Xenova/all-MiniLM-L6-v2  (aliases: feature-extraction, ...)
...
model families (config.json model_type, by zoo module):
  ast  ast, audio-spectrogram-transformer
  bart  bart, blenderbot, ...
...
0

Each INPUT (or each line of stdin when there is none) is one input of the task; the results
are printed as JSON, one line per input (arrays as lists). How a task reads its INPUTs and its own
flags (``--question``, ``--labels``, ``--query``, ``--pair``, ...) is the ``command_line`` of its row
in the task table (transmuter_mlx/pipelines/command_line.py); this module has no per-task code.
Task options go in ``--option key=value`` (the value is parsed as JSON when it can be).
An image task's INPUTs are image paths or URLs, an audio task's audio files; the images in its
results (a depth map, masks, an upscaled image) are written as PNG files to ``--output DIR``, and
synthesized speech as WAV files, and printed as their paths.
``--stream`` (the generation tasks) prints each input's text as it is generated, a line per input.
When the reader of stdout goes away (``... --stream | head -c 5``), the command stops its decoding and
exits quietly with 141 (128 + SIGPIPE, what a shell reports for a tool that SIGPIPE ended).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from .pipelines.command_line import CommandLine, Flag

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
    streaming = ", ".join(name for name, spec in command_lines().items() if spec.streams)
    parser.add_argument("--stream", action="store_true", help=f"{streaming}: print the generated text as it comes")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a task option")
    parser.add_argument("--output", metavar="DIR",
                        help="where images (depth maps, masks, upscaled images) and speech in results go, as PNG and WAV files")
    for flag, tasks in task_flags().items():
        parser.add_argument(f"--{flag.name}", metavar=flag.metavar, help=f"{', '.join(tasks)}: {flag.help}")
    return parser


def command_lines() -> dict[str, CommandLine]:
    """Each task's command line, from the task table."""
    from .pipelines import TASKS

    return {name: row.command_line for name, row in TASKS.items()}


def task_flags() -> dict[Flag, list[str]]:
    """Every task flag of the table, with the tasks that take it."""
    flags: dict[Flag, list[str]] = {}
    for name, spec in command_lines().items():
        for flag in spec.flags:
            flags.setdefault(flag, []).append(name)
    return flags


def given_flags(args: argparse.Namespace, spec: CommandLine) -> dict[str, str]:
    """The task flags given on the command line; a ValueError for a flag of other tasks."""
    flags = task_flags()
    given = {f.name: getattr(args, f.name) for f in flags if getattr(args, f.name) is not None}
    for name in given.keys() - {f.name for f in spec.flags}:
        owners = [task for f, tasks in flags.items() if f.name == name for task in tasks]
        raise ValueError(f"--{name} is for {', '.join(owners)}")
    return given


def task_inputs(task: str, args: argparse.Namespace, stream: bool) -> tuple[dict[str, Any], list[Any]]:
    """The options that the task's flags stand for, and its inputs, as the task's command line reads them."""
    spec = command_lines()[task]
    try:
        if stream and not spec.streams:
            streaming = ", ".join(name for name, s in command_lines().items() if s.streams)
            raise ValueError(f"--stream is for the generation tasks ({streaming})")
        given = given_flags(args, spec)
        return spec.task_options(given), spec.read_inputs(lambda: read_texts(args), given)
    except ValueError as e:
        raise ValueError(f"{task}: {e}") from None


def parse_option(text: str) -> tuple[str, Any]:
    """``"top_k=3"`` -> ``("top_k", 3)``; a value that is not JSON stays a str."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--option needs KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def read_texts(args: argparse.Namespace) -> list[str]:
    """The INPUTs, or each line of stdin when there are none."""
    return list(args.inputs) or [line.rstrip("\n") for line in sys.stdin]


def to_json(value: Any) -> Any:
    """A result's array (numpy, mx.array, a torch tensor on any device) as JSON numbers."""
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "detach"):  # a torch tensor, maybe on a GPU: numpy cannot read it in place
        value = value.detach().cpu()
    return np.asarray(value).tolist()


def list_all() -> str:
    """The task table (modality, processor, function, default model, aliases) and the model families."""
    from . import zoo
    from .pipelines import ALIASES, TASKS

    lines = ["tasks (modality, processor, function, default model; aliases):"]
    for name, row in TASKS.items():
        aliases = ", ".join(a for a, t in ALIASES.items() if t == name) or "-"
        lines.append(f"  {name:26} {row.modality:10} {row.processor:9} tm.{row.function:32} "
                     f"{row.default_model}  (aliases: {aliases})")
    lines.append("model families (config.json model_type, by zoo module):")
    for module, model_types in families_by_module(zoo.families(), getattr(zoo, "REMAP", {})).items():
        lines.append(f"  {module:14} {', '.join(model_types)}")
    return "\n".join(lines)


def families_by_module(model_types: list[str], remap: Mapping[str, str]) -> dict[str, list[str]]:
    """``zoo.families()`` grouped by the zoo module serving them (``zoo.REMAP``): ``{"bert": ["albert", ...]}``."""
    groups: dict[str, list[str]] = {}
    for model_type in model_types:
        groups.setdefault(remap.get(model_type, model_type).replace("-", "_"), []).append(model_type)
    return dict(sorted(groups.items()))


def print_streams(pipe: Any, inputs: list[Any]) -> int:
    """Each input's text chunks to stdout as they are generated, then a newline."""
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


def common_options(args: argparse.Namespace) -> dict[str, Any]:
    """The pipeline options of ``--option`` and the flags of all tasks (``--backend``, ``--batch-size``, ...)."""
    options: dict[str, Any] = dict(parse_option(o) for o in args.option)
    options["backend"] = args.backend
    for name in ("device", "variant"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    if args.offline:
        options["offline"] = True
    if args.batch_size:
        options["compile"] = {**options.get("compile", {}), "batch_size": args.batch_size}
    return options


def media_to_files(value: Any, folder: str | None, stem: str) -> Any:
    """``value`` with each PIL image in it written to ``folder`` as ``<stem>.png``, and each audio result
    (``{"audio": samples, "sampling_rate": n}``) as ``<stem>.wav`` (``stem`` grows with the keys and list
    positions that lead to it: ``0-segments-1-mask.png``), replaced by the file's path; a ValueError when
    there is one and no folder."""
    if isinstance(value, dict) and isinstance(value.get("audio"), np.ndarray) and "sampling_rate" in value:
        import soundfile

        path = _output_path(folder, f"{stem}.wav", "audio", "WAV")
        soundfile.write(path, value["audio"], int(value["sampling_rate"]), subtype="FLOAT")
        return {**value, "audio": path}
    if isinstance(value, dict):
        return {k: media_to_files(v, folder, f"{stem}-{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [media_to_files(v, folder, f"{stem}-{i}") for i, v in enumerate(value)]
    if hasattr(value, "save") and hasattr(value, "mode") and hasattr(value, "size"):  # a PIL image
        path = _output_path(folder, f"{stem}.png", "images", "PNG")
        value.save(path)
        return path
    return value


def _output_path(folder: str | None, name: str, what: str, kind: str) -> str:
    if folder is None:
        raise ValueError(f"the results of this task hold {what}: give --output DIR to write them as {kind} files")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, name)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["list"]:
        print(list_all())
        return 0
    if argv[:1] == ["serve"]:
        from .server.run import main as serve_main

        return serve_main(argv[1:])
    args = build_parser().parse_args(argv)
    from .converters.errors import ConverterError
    from .pipelines import UnknownTaskError, pipeline, resolve_task

    try:
        task = resolve_task(args.task)
    except UnknownTaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    options = common_options(args)
    stream = args.stream or bool(options.pop("stream", False))
    try:
        task_options, inputs = task_inputs(task, args, stream)
        pipe = pipeline(task, args.model, **{**options, **task_options})  # a task flag beats --option
        if stream:
            return print_streams(pipe, inputs)
        printed = command_lines()[task].printed
        for index, result in enumerate(pipe(inputs)):
            result = media_to_files(printed(result), args.output, str(index))
            print(json.dumps(result, default=to_json, ensure_ascii=False, indent=2 if args.pretty else None))
            sys.stdout.flush()
    except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly, as Unix tools do
        return stdout_closed()
    except (TypeError, ValueError, OSError, ConverterError) as e:  # bad task, option, input, repository or file
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
