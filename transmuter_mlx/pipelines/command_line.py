"""How ``python -m transmuter_mlx TASK MODEL INPUT...`` reads a task's inputs and prints its results.

>>> QUESTIONS.read_inputs(lambda: ["The tower is in Paris."], {"question": "Where is the tower?"})
[{'question': 'Where is the tower?', 'context': 'The tower is in Paris.'}]
>>> PAIRED_TEXTS.read_inputs(lambda: ["A man eats."], {"pair": "Someone is eating."})
[('A man eats.', 'Someone is eating.')]
>>> LABELLED_TEXTS.task_options({"labels": "urgent, phone"})
{'labels': ['urgent', 'phone']}

Each row of the task table (``tasks.TASKS``) holds one :class:`CommandLine`; the command line
reads nothing else about a task, so a new task brings its own input forms and flags here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AUDIO",
    "GENERATED_TEXTS",
    "IMAGES",
    "LABELLED_AUDIO",
    "LABELLED_IMAGES",
    "LABELLED_TEXTS",
    "PAIRED_TEXTS",
    "QUERIES",
    "QUESTIONS",
    "SPEECH",
    "TEXTS",
    "CommandLine",
    "Flag",
]

#: the INPUTs of the command line, or the lines of stdin when there are none (read only when called)
ReadTexts = Callable[[], list[str]]
#: a task's own flags as given: name -> value, None when not given
GivenFlags = Mapping[str, str | None]


@dataclass(frozen=True)
class Flag:
    """A flag that some tasks take: ``--labels a,b`` (``option`` turns it into the task option of the
    same name) or ``--question Q`` (no ``option``: the task's ``inputs`` read it)."""

    name: str
    metavar: str
    help: str
    option: Callable[[str], Any] | None = None


def each_text(texts: ReadTexts, flags: GivenFlags) -> list[Any]:
    """Each INPUT is one input, as it is."""
    return texts()


def each_with_pair(texts: ReadTexts, flags: GivenFlags) -> list[Any]:
    """Each INPUT; with ``--pair P``, each INPUT paired with P: ``(INPUT, P)``."""
    pair = flags.get("pair")
    return [(text, pair) for text in texts()] if pair is not None else texts()


def json_objects(texts: list[str], form: str, flag: str) -> list[dict[str, Any]]:
    """Each INPUT as a JSON object (``form`` and ``flag`` name the alternatives in the error)."""
    objects = []
    for i, text in enumerate(texts):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise ValueError(f"INPUT {i} is not a JSON object {form}: {text!r:.80}; or give {flag}")
        objects.append(value)
    return objects


def question_and_contexts(texts: ReadTexts, flags: GivenFlags) -> list[Any]:
    """``--question Q``: one input per context (``--context C``, else each INPUT); without it, each
    INPUT is a JSON object ``{"question": ..., "context": ...}``."""
    question, context = flags.get("question"), flags.get("context")
    if question is None:
        if context is not None:
            raise ValueError("--context needs --question")
        return json_objects(texts(), '{"question": ..., "context": ...}', "--question")
    contexts = [context] if context is not None else texts()
    return [{"question": question, "context": c} for c in contexts]


def query_and_documents(texts: ReadTexts, flags: GivenFlags) -> list[Any]:
    """``--query Q``: one input whose documents are the INPUTs; without it, each INPUT is a JSON object
    ``{"query": ..., "documents": [...]}``."""
    query = flags.get("query")
    if query is None:
        return json_objects(texts(), '{"query": ..., "documents": [...]}', "--query")
    return [{"query": query, "documents": texts()}]


def comma_separated(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [x.strip() for x in text.split(",") if x.strip()]


def as_is(result: Any) -> Any:
    return result


@dataclass(frozen=True)
class CommandLine:
    """A task's command line: its flags, how INPUT strings become its inputs, whether ``--stream``
    applies, and what of each result is printed as JSON (arrays become lists)."""

    flags: tuple[Flag, ...] = ()
    inputs: Callable[[ReadTexts, GivenFlags], list[Any]] = each_text
    streams: bool = False
    printed: Callable[[Any], Any] = as_is

    def task_options(self, given: GivenFlags) -> dict[str, Any]:
        """The task options that the flags given stand for (``--labels a,b`` -> ``labels=["a", "b"]``)."""
        return {
            f.name: f.option(given[f.name]) for f in self.flags if f.option and given.get(f.name) is not None
        }

    def read_inputs(self, texts: ReadTexts, given: GivenFlags) -> list[Any]:
        """The task's inputs from the INPUT strings (read through ``texts``) and the flags given."""
        return self.inputs(texts, {f.name: given.get(f.name) for f in self.flags})


PAIR = Flag("pair", "TEXT", "the text_pair of every input")
QUESTION = Flag("question", "Q", "the question; each INPUT (or --context) is a context")
CONTEXT = Flag("context", "C", "the one context of --question")
QUERY = Flag("query", "Q", "the query; the INPUTs are its documents (one input)")
LABELS = Flag("labels", "A,B,C", "the candidate labels, comma-separated", option=comma_separated)

TEXTS = CommandLine()
PAIRED_TEXTS = CommandLine(flags=(PAIR,), inputs=each_with_pair)
QUESTIONS = CommandLine(flags=(QUESTION, CONTEXT), inputs=question_and_contexts)
QUERIES = CommandLine(flags=(QUERY,), inputs=query_and_documents)
LABELLED_TEXTS = CommandLine(flags=(LABELS,))
GENERATED_TEXTS = CommandLine(streams=True)
IMAGES = CommandLine()  # each INPUT is an image: a path or a URL
LABELLED_IMAGES = CommandLine(flags=(LABELS,))
AUDIO = CommandLine()  # each INPUT is an audio file
LABELLED_AUDIO = CommandLine(flags=(LABELS,))
SPEECH = CommandLine(streams=True)  # audio files whose text is printed as it is recognized
