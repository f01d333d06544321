"""Reliability rows: streams. The chunks of a stream join to exactly the text the same call returns
without ``stream=True`` (also through ``tm.Serving``), and a consumer may leave a stream at any point
(``break``, a closed pipe, dropping it): its decoding stops and its thread releases its MLX state, so the
process exits 0 (MLX aborts one that exits while a thread still runs on its streams)."""

from __future__ import annotations

import functools
from typing import Any

import transmuter_mlx as tm
from tests.reliability import Exits, Raises, Returns, case  # noqa: F401

# Prompts that end in indentation, after which the GPT-2 fixture generates runs of spaces and then
# punctuation or contractions: transformers' clean-up (" ." -> ".", " 's" -> "'s") removes a space that
# TextStreamer's last-space rule had already streamed (found by tests/test_streaming.py's random prompts).
INDENTED_PROMPTS = (" x.'s?? f    .", "    !'def    ", " x f    ! f你好 ", "  return 🎉\n    ",
                    "'s  . f  .def 🎉hellohello  ", " x 🎉.returnreturn    ")


@functools.cache
def _gpt2(backend: str) -> Any:
    from tests.fixtures.generation_models import build

    return tm.text.generation(str(build("gpt2")), backend=backend, max_new_tokens=24)


def _joins_to_the_text(pairs: list[tuple[str, str]], backend: str) -> None:
    for joined, returned in pairs:
        assert joined == returned


@case("streams", "text-generation: the chunks join to the returned text (GPT-2, prompts ending in indentation)",
      Returns(_joins_to_the_text))
def _indented_prompts(backend: str) -> list[tuple[str, str]]:
    pipe = _gpt2(backend)
    return [("".join(pipe(p, stream=True)), pipe(p)["results"][0]["text"]) for p in INDENTED_PROMPTS]


LEFT_EARLY = """
import transmuter_mlx as tm
from tests.fixtures.generation_models import build
pipe = tm.text.generation(str(build("gpt2")), backend=BACKEND, max_new_tokens=200)
for i, chunk in enumerate(pipe("hello", stream=True)):
    if i == 2:
        break
print("left after", i + 1, "chunks")
"""
case("streams", "a stream left early (break) at the end of a script: exit 0",
     Exits(LEFT_EARLY, 0, r"left after 3 chunks"))(None)

SERVING_LEFT_OPEN = """
import transmuter_mlx as tm
from tests.fixtures.generation_models import build
pipe = tm.text.generation(str(build("gpt2")), backend=BACKEND, max_new_tokens=200, compile={"batch_size": 2})
serving = tm.Serving(pipe, batch_timeout_ms=100)
left, other = serving.run("hello", stream=True), serving.run("world", stream=True)
for i, chunk in enumerate(left):
    if i == 2:
        break
print("left after", i + 1, "chunks; the other stream and the Serving still open")
"""
case("streams", "a Serving stream left early, its batch-mate and the Serving left open at exit: exit 0",
     Exits(SERVING_LEFT_OPEN, 0, r"left after 3 chunks"))(None)

CLI_PIPE_CLOSED = """
import subprocess, sys
from tests.fixtures.generation_models import build
cli = subprocess.Popen([sys.executable, "-m", "transmuter_mlx", "text-generation", str(build("gpt2")), "x",
                        "--stream", "--backend", BACKEND, "--option", "max_new_tokens=200"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
head = cli.stdout.read(5)  # ... --stream | head -c 5
cli.stdout.close()
err = cli.stderr.read().decode()
quiet = not any(s in err for s in ("Broken pipe", "BrokenPipeError", "Traceback", "terminate called"))
print(f"read {len(head)} bytes; cli exit {cli.wait(200)}; quiet {quiet}")
"""
case("streams", "CLI: --stream | head -c 5 stops the decoding and exits quietly with 141 (128 + SIGPIPE)",
     Exits(CLI_PIPE_CLOSED, 0, r"read 5 bytes; cli exit 141; quiet True"))(None)
