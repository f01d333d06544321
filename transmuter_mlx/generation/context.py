"""How far a decoder row may go: the positions of the model's context, and what a longer request gets.

>>> from transmuter_mlx import zoo
>>> from transmuter_mlx.generation.config import GenerationConfig
>>> from transmuter_mlx.generation.context import ContextLimit
>>> gpt2 = ContextLimit.of(zoo.family("gpt2").ModelArgs.from_dict({"n_positions": 256}))
>>> gpt2.kind, gpt2.positions, gpt2.max_length(GenerationConfig(max_new_tokens=16), 10)
('absolute', 256, 26)
>>> gpt2.max_length(GenerationConfig(max_new_tokens=300), 10)
Traceback (most recent call last):
ValueError: max_new_tokens=300 after a prompt of 10 tokens needs 310 positions, more than the 256 absolute positions of the model (n_positions of config.json); pass max_new_tokens=246 or less
>>> llama = ContextLimit.of(zoo.family("llama").ModelArgs.from_dict({"max_position_embeddings": 256}))
>>> llama.kind, llama.max_length(GenerationConfig(max_new_tokens=10**9), 10)
('rotary', 256)

The kinds, the position encoding of the model's zoo family (``ModelArgs.POSITIONS``):

- ``absolute``: a table of position embeddings, learned (GPT-2, OPT, BART) or sinusoidal (Marian, M2M100,
  NLLB), of ``max_position_embeddings`` / ``n_positions`` rows. A row cannot go past it (transformers'
  PyTorch models raise an IndexError there; the table lookup of an ONNX graph reads out of bounds), so a
  request past it is a ``ValueError`` before decoding.
- ``rotary``: rotary positions (Llama, Qwen2, Mistral, Phi-3, ...). A row's
  length is capped at ``max_position_embeddings``: the model was not trained past it, and the
  GroupQueryAttention exports hold cos/sin caches of that many positions. (transformers goes on past it;
  a request of ``max_new_tokens=10**9`` means "until eos or the end of the context" here.)
- ``relative``: relative attention buckets (T5): no table, so no hard end; a row's length is capped at the
  context the repository declares (``n_positions``, else the tokenizer's ``model_max_length``, else
  :data:`DEFAULT_POSITIONS`), so that a huge request does not run forever.
- ``unknown``: a config.json without positions: capped as ``relative``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import GenerationConfig

__all__ = ["DEFAULT_POSITIONS", "ContextLimit"]

DEFAULT_POSITIONS = 4096  # the cap of a decoder that declares no context at all


@dataclass(frozen=True)
class ContextLimit:
    """The most positions a row (prompt and new tokens) may take, and whether going past them is an error
    (``kind == "absolute"``) or a cap (the other kinds). ``source`` names where ``positions`` came from."""

    positions: int
    kind: str
    source: str

    @classmethod
    def of(cls, args: Any, declared: int | None = None) -> ContextLimit:
        """The limit of a decoder family's ``ModelArgs`` (``positions``, and its kind ``POSITIONS``);
        ``declared`` is the tokenizer's ``model_max_length``, the cap of a model whose config gives no positions."""
        if args.positions:
            return cls(int(args.positions), args.POSITIONS, f"{args.POSITIONS_KEY} of config.json")
        kind = "relative" if args.POSITIONS == "relative" else "unknown"
        if declared:
            return cls(int(declared), kind, "model_max_length of tokenizer_config.json")
        return cls(DEFAULT_POSITIONS, kind, "the default of transmuter-mlx")

    @property
    def hard(self) -> bool:
        """Whether a request past the positions is an error (a table of positions) rather than a cap."""
        return self.kind == "absolute"

    def describe(self) -> str:
        """``"the 256 absolute positions of the model (n_positions of config.json)"``."""
        what = {"absolute": "absolute positions", "rotary": "rotary positions"}.get(self.kind, "positions")
        return f"the {self.positions} {what} of the model ({self.source})"

    def max_length(self, config: GenerationConfig, prompt_length: int,
                   max_position_embeddings: int | None = None) -> int:
        """The ``max_length`` (prompt included) of a row of ``prompt_length`` tokens under ``config``:
        ``config.lengths``, capped at the positions (a ValueError past a table of absolute positions, before any
        decoding), and a ValueError when it leaves no room for a new token (as transformers' ``generate``)."""
        requested, _ = config.lengths(prompt_length, max_position_embeddings)
        if requested > self.positions and self.hard:
            option, value = _length_option(config)
            room = self.positions - prompt_length
            fix = (f"pass {option}={room if option == 'max_new_tokens' else self.positions} or less"
                   if room > 0 else "shorten the prompt")
            raise ValueError(f"{option}={value} after a prompt of {_tokens(prompt_length)} needs {requested} positions, "
                             f"more than {self.describe()}; {fix}")
        option, value = _length_option(config)
        if prompt_length >= requested:  # transformers' generate raises here too
            raise ValueError(f"the prompt has {_tokens(prompt_length)} and {option} is {value}: no room for a new "
                             "token; pass max_new_tokens instead")
        if prompt_length >= self.positions:
            raise ValueError(f"the prompt has {_tokens(prompt_length)}, which leaves no room for a new token in "
                             f"{self.describe()}")
        return min(requested, self.positions)


def _tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _length_option(config: GenerationConfig) -> tuple[str, Any]:
    """The option that set a row's length, for messages: max_new_tokens when given, else max_length."""
    if config.max_new_tokens is not None:
        return "max_new_tokens", config.max_new_tokens
    return "max_length", config.max_length
