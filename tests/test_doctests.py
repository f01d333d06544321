"""The docstring examples of the public API run: one case per module of transmuter_mlx, its
converters and its zoo (imported as ``transmuter_mlx.converters`` / ``transmuter_mlx.zoo``).

Examples name Hub repositories as a user types them (``tm.text.fill_mask("Xenova/bert-base-uncased")``).
Here each repo id of ``REPOS`` resolves offline to the fixture of the same task and family: a temporary
huggingface_hub cache (``models--Xenova--bert-base-uncased/snapshots/<rev>/`` of links to the fixture's
files, ``refs/main``) that ``HF_HUB_CACHE`` points at, with ``HF_HUB_OFFLINE=1``. A module's repositories
are laid out (and their fixtures built) when its case runs; the examples run in a temporary folder.

The fixtures have random weights (all-MiniLM-L6-v2 excepted): examples show what holds for any model
(shapes, labels of the config, keys, scores summing to 1), never a real model's numbers.
"""

from __future__ import annotations

import doctest
import importlib
import io
import re
from pathlib import Path

import pytest
from huggingface_hub import constants as hf_constants

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"transmuter_mlx": "transmuter_mlx", "converters": "transmuter_mlx.converters",
            "zoo": "transmuter_mlx.zoo"}  # folder -> the package it is imported as
#: modules of an optional extra (its package -> the module), skipped where the extra is not installed
OPTIONAL = {"ray": "transmuter_mlx.server.ray_serve"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
REVISION = "d0c7e57" + "0" * 33  # the commit of every laid-out snapshot

#: repo id in the docs -> (fixture module, fixture): the fixture of the same task and family
REPOS: dict[str, tuple[str, str]] = {
    "Xenova/all-MiniLM-L6-v2": ("text", "minilm"),  # the real model
    "Xenova/bge-small-en-v1.5": ("text", "bert-embed-cls"),  # CLS pooling, normalized
    "Xenova/bert-base-uncased": ("text", "bert-mlm"),
    "Xenova/distilbert-base-uncased-finetuned-sst-2-english": ("text", "distilbert-sst2"),
    "Xenova/distilbert-base-uncased-mnli": ("text", "bert-nli"),
    "Xenova/ms-marco-MiniLM-L-6-v2": ("text", "bert-rerank"),
    "Xenova/bert-base-NER": ("text", "bert-ner"),
    "Xenova/distilbert-base-cased-distilled-squad": ("text", "bert-qa"),
    "Xenova/gpt2": ("generation", "gpt2"),
    "onnx-community/Qwen3-0.6B-ONNX": ("generation", "qwen3"),
    "onnx-community/Qwen2.5-0.5B-Instruct": ("generation", "qwen2"),
    "Xenova/t5-small": ("generation", "t5"),
    "Xenova/flan-t5-small": ("generation", "t5"),
    "Xenova/opus-mt-en-de": ("generation", "marian"),
    "Xenova/distilbart-cnn-6-6": ("generation", "marian"),  # no BART fixture: Marian, of zoo.bart
    "Xenova/nllb-200-distilled-600M": ("generation", "nllb"),
    "Xenova/m2m100_418M": ("generation", "m2m100"),
    "Xenova/vit-base-patch16-224": ("vision", "vit"),
    "Xenova/clip-vit-base-patch32": ("vision", "clip"),
    "onnx-community/depth-anything-v2-small": ("vision", "depth_anything"),
    "Xenova/segformer-b0-finetuned-ade-512-512": ("vision", "segformer"),
    "onnx-community/ormbg-ONNX": ("vision", "background"),
    "Xenova/swin2SR-classical-sr-x2-64": ("vision", "swin2sr"),
    "Xenova/detr-resnet-50": ("vision", "detr"),
    "Xenova/owlvit-base-patch32": ("vision", "owlvit"),
    "onnx-community/gliner_small-v2.1": ("gliner", "gliner-span"),
}


def _modules() -> list[tuple[str, Path]]:
    """(module name, file) of every source file of the public API that holds an example."""
    found = []
    for folder, package in PACKAGES.items():
        for file in sorted((ROOT / folder).rglob("*.py")):
            if ">>>" not in file.read_text(encoding="utf-8"):
                continue
            parts = [p for p in file.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            found.append((".".join([package, *parts]), file))
    return found


MODULES = _modules()


def _fixture(kind: str, name: str) -> Path:
    if kind == "text":
        from tests.fixtures.text_models import build
    elif kind == "vision":
        from tests.fixtures.vision_models import build
    elif kind == "gliner":
        from tests.fixtures.gliner_models import build
    else:
        from tests.fixtures.generation_models import build
    return build(name)


def _lay_out(cache: Path, repo_id: str) -> None:
    """``repo_id`` in the huggingface_hub cache layout: snapshot links to its fixture's files."""
    repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
    if (repo_dir / "refs" / "main").is_file():
        return
    source = _fixture(*REPOS[repo_id])
    snapshot = repo_dir / "snapshots" / REVISION
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        link = snapshot / file.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(file)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(REVISION)


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """An offline huggingface_hub cache that the examples' repo ids resolve in (filled per module)."""
    cache = tmp_path_factory.mktemp("hub")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(cache))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
        mp.setattr(hf_constants, "HF_HUB_OFFLINE", True)
        yield cache


def test_every_repo_of_an_example_has_a_fixture():
    """A repo id in an example that runs (``"org/name"`` on a ``>>>`` or ``...`` line) is one of REPOS."""
    example = re.compile(r"^\s*(>>>|\.\.\.) ")
    named = {
        (file.relative_to(ROOT).as_posix(), repo_id)
        for _, file in MODULES
        for line in file.read_text(encoding="utf-8").splitlines()
        if example.match(line) and "+SKIP" not in line
        for repo_id in re.findall(r"[\"']([\w.-]+/[\w.-]+)[\"']", line)
    }
    assert sorted((f, r) for f, r in named if r not in REPOS) == []


@pytest.mark.parametrize("name,file", MODULES, ids=[name for name, _ in MODULES])
def test_docstring_examples(name, file, hub_cache, tmp_path, monkeypatch):
    source = file.read_text(encoding="utf-8")
    for repo_id in REPOS:
        if re.search(rf"[\"']{re.escape(repo_id)}[\"']", source):
            _lay_out(hub_cache, repo_id)
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    for extra, package in OPTIONAL.items():
        if name.startswith(package):
            pytest.importorskip(extra, reason=f"{name} needs the {extra} extra")
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    for test in sorted(tests, key=lambda t: t.lineno or 0):
        runner.run(test, out=report.write)
    assert runner.failures == 0, f"{name}: {runner.failures} of {runner.tries} examples failed\n{report.getvalue()}"

