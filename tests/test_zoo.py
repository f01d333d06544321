"""The zoo: one module per model family, found by config.json's model_type; pipelines and generation read
family facts only through it. A new family of an existing kind is one REMAP line (qwen3, checked here against
transformers' generate) or one module."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

import transmuter_mlx as tm
from tests.fixtures.generation_models import build
from transmuter_mlx import zoo

ROOT = Path(__file__).resolve().parents[1]
MODULE_NAMES = ("ModelArgs", "FILES", "TASKS", "DEFAULT_VARIANT")


@pytest.mark.parametrize("model_type", zoo.families())
def test_every_family_declares_what_differs(model_type: str) -> None:
    family = zoo.family(model_type)
    for name in MODULE_NAMES:
        assert hasattr(family, name), f"{family.__name__} has no {name}"
    args = family.ModelArgs.from_dict({"model_type": model_type, "not_a_key_of_any_family": 1})
    assert args.model_type == model_type
    assert family.TASKS and all(isinstance(stems, tuple) for stems in family.FILES.values())


def test_an_unknown_model_type_names_the_families() -> None:
    with pytest.raises(zoo.UnknownFamilyError, match=r"model_type 'not-a-family' is not supported; supported "
                                                     r"families: .*llama.*t5"):
        zoo.family({"model_type": "not-a-family"})


def test_pipelines_and_generation_never_test_model_type() -> None:
    """Family facts live in zoo/ (house rule 7): no model_type anywhere in pipelines/, generation/, processors/."""
    found = []
    for folder in ("pipelines", "generation", "processors"):
        for path in sorted((ROOT / "transmuter_mlx" / folder).glob("*.py")):
            found += [f"{path.name}:{i}" for i, line in enumerate(path.read_text().splitlines(), 1)
                      if re.search(r"model_type", line)]
    assert found == []


def test_a_task_the_family_does_not_serve_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"fill-mask: .*qwen3.* is a model of the llama family, which does not serve "
                                         r"this task; it serves text-generation"):
        tm.pipeline("fill-mask", str(build("qwen3")))


@functools.cache
def _transformers_greedy(prompt: str, new: int) -> list[int]:
    transformers = pytest.importorskip("transformers")
    folder = str(build("qwen3"))
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = tok(prompt, return_tensors="pt").input_ids
    out = model.generate(ids, do_sample=False, max_new_tokens=new, min_new_tokens=new)
    return out[0, ids.shape[1]:].tolist()


@pytest.mark.parametrize("backend", ["mlx", "torch"])
def test_a_family_added_by_one_remap_line(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """qwen3 runs as llama does (rotary decoder; its head size a key of its own): without its REMAP line the
    repository is refused, with it generation gives transformers' tokens."""
    folder = str(build("qwen3"))
    monkeypatch.delitem(zoo.REMAP, "qwen3")
    with pytest.raises(zoo.UnknownFamilyError, match="model_type 'qwen3' is not supported"):
        tm.text.generation(folder, backend=backend)
    monkeypatch.setitem(zoo.REMAP, "qwen3", "llama")
    generate = tm.text.generation(folder, backend=backend, max_new_tokens=12, min_new_tokens=12)
    assert generate.args.head_dim == 32 != generate.args.hidden_size // generate.args.num_attention_heads
    prompt = "The quick brown fox"
    ((_, ((ours,), _)),) = generate.generate_outputs([prompt], [None], generate.call_options({}))
    assert ours == _transformers_greedy(prompt, 12)
