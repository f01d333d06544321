"""Reliability rows: inputs."""

from __future__ import annotations

from typing import Any

import transmuter_mlx as tm
from tests.reliability import BACKENDS, Exits, Raises, Returns, case  # noqa: F401

# ---------------------------------------------------------------------- lone surrogates (not Unicode text)
# A str with a lone surrogate ("\udc80": bytes decoded with errors="surrogateescape", half of a UTF-16 pair)
# has no UTF-8 encoding. transformers' tokenizer raises tokenizers' internal TypeError ("TextEncodeInput must
# be Union[...]"), naming neither the input nor the character; here it is a ValueError that names both,
# raised before any model runs. The text is not changed silently (offsets into it would be undefined).
SURROGATE = r"input 1: the (text|question) has a lone surrogate '\\udc80' \(U\+DC80\) at character 3"


def _surrogate_tokenizer(backend: str) -> Any:
    from tests.fixtures.generation_models import build
    from transmuter_mlx.tokenizer import Tokenizer

    return Tokenizer.from_repo(build("gpt2"))(["fine", "bad\udc80 text"])


def _surrogate_generation(backend: str) -> Any:
    from tests.fixtures.generation_models import build

    return tm.text.generation(str(build("gpt2")), backend=backend, max_new_tokens=2)(["fine", "bad\udc80 text"])


def _surrogate_question(backend: str) -> Any:
    from tests.fixtures.text_models import build

    qa = tm.pipeline("question-answering", str(build("bert-qa")), backend=backend)
    return qa([{"question": "Who?", "context": "Tom."}, {"question": "Who\udc80?", "context": "Tom."}])


case("inputs", "tokenizer: a lone surrogate", Raises(ValueError, SURROGATE))(_surrogate_tokenizer)
case("inputs", "text-generation: a lone surrogate",
     Raises(ValueError, r"text-generation: " + SURROGATE))(_surrogate_generation)
case("inputs", "question-answering: a lone surrogate in a question",
     Raises(ValueError, r"question-answering: " + SURROGATE))(_surrogate_question)
