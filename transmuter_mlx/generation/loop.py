"""The decoding loop: greedy selection, seeded sampling or beam search over a ``DecoderSession``.

>>> import numpy as np
>>> from transmuter_mlx.converters.backends import get_backend
>>> from transmuter_mlx.generation.config import GenerationConfig
>>> from transmuter_mlx.generation.loop import generate
>>> class Counting:  # a toy decoder: the next token is the last one plus one
...     B = get_backend("numpy")
...     def prefill(self, prompts):
...         self.last = [p[-1] for p in prompts]
...         return self.logits()
...     def step(self, tokens):
...         self.last = list(tokens)
...         return self.logits()
...     def reorder(self, rows):
...         self.last = [self.last[r] for r in rows]
...     def logits(self):
...         return np.eye(10, dtype=np.float32)[[(t + 1) % 10 for t in self.last]]
>>> out = generate(Counting(), [[1, 2], [6]], GenerationConfig(max_new_tokens=5, eos_token_id=9))
>>> out.sequences
[[3, 4, 5, 6, 7], [7, 8, 9]]
>>> out.token_summaries
[{'input': 2, 'output': 5, 'padding': 0}, {'input': 1, 'output': 3, 'padding': 0}]

A session holds the model and its KV cache; the loop holds the tokens. Each row counts its own
prompt, its own length limits and its own stop: an input gives the same tokens alone or in a batch.
Rows are the inputs (greedy), ``num_return_sequences`` copies of each input (sampling), or
``num_beams`` beams of each input (beam search).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .beam import BeamSearch
from .config import GenerationConfig
from .processors import Rows, apply, build_processors
from .sampling import RowKeys, host_tokens, pick

__all__ = ["DecoderSession", "Generated", "generate"]


class DecoderSession(Protocol):
    """A decoder with its KV cache. ``B`` is the backend of the logits it returns.

    ``prefill(prompts)`` runs the prompts (one token list per row, without padding: the session pads
    as its cache needs) and returns the logits of each row's last position, (rows, vocab).
    ``step(tokens)`` runs one token per row and returns (rows, vocab) logits; ``tokens`` are host int64 or,
    from ``generate``, the backend's array of picked tokens, not yet read by the host (keep it there).
    ``reorder(rows)`` makes row r continue from old row ``rows[r]`` (beam search).
    ``padding`` (optional) is the number of padding positions of each row after ``prefill``.
    ``reserve(steps, longest=n)`` (optional) is called before ``prefill`` with the most new tokens a row
    may get and the longest a row may be (prompt included).
    """

    B: Any

    def prefill(self, prompts: Sequence[Sequence[int]]) -> Any: ...
    def step(self, tokens: np.ndarray) -> Any: ...
    def reorder(self, rows: np.ndarray) -> None: ...


@dataclass
class Generated:
    """The new tokens of each returned sequence (input i's are ``sequences[i * n: (i + 1) * n]`` for
    n = ``num_return_sequences``), beam scores (beam search), and a token summary per input (its
    ``padding`` is that of the input's row, counted once however many sequences the input returns)."""

    sequences: list[list[int]]
    token_summaries: list[dict[str, int]]
    scores: list[float] | None = None
    stopped_by: list[str] = field(default_factory=list)


def generate(
    session: DecoderSession,
    prompts: Sequence[Sequence[int]],
    config: GenerationConfig,
    *,
    decode: Callable[[list[int]], str] | None = None,
    max_position_embeddings: int | None = None,
    on_step: Callable[[list[list[int]]], None] | None = None,
    max_length_cap: int | None = None,
    processors: Sequence[Any] = (),
) -> Generated:
    """Run ``config`` (its ``mode``) over ``prompts`` (decoder inputs, one per input).

    ``decode(tokens) -> str`` is needed for ``stop_strings``. ``on_step(new_tokens)`` is called after
    each step with every row's new tokens so far (greedy and sampling; for streaming).
    ``max_length_cap`` caps every row's length, prompt included (the model's context, see
    ``generation/context.py``): a session never reserves room for more. ``processors`` run after those of
    ``config`` (a family's own, such as Whisper's timestamp rules, as transformers appends custom processors).
    """
    prompts = [[int(t) for t in p] for p in prompts]
    if config.stop_strings and decode is None:
        raise ValueError("stop_strings need a decode function (the tokenizer's decode)")
    if config.mode == "beam":
        return _beam(session, prompts, config, decode, _bounds(prompts, config, max_position_embeddings,
                                                               max_length_cap), processors)
    copies = config.num_return_sequences if config.mode == "sample" else 1
    rows = [p for p in prompts for _ in range(copies)]
    bounds = _bounds(rows, config, max_position_embeddings, max_length_cap)
    info = Rows([list(p) for p in rows], [len(p) for p in rows], [b[0] for b in bounds], [b[1] for b in bounds])
    chain = [*build_processors(config), *processors]
    keys = None
    if config.mode == "sample":
        keys = RowKeys([config.seed] * len(rows), [(j, copies) for _ in prompts for j in range(copies)])
    pad = config.pad_id if config.pad_id is not None else 0
    live = [len(p) < m for p, (m, _) in zip(rows, bounds)]
    stopped_by = ["length" if not ok else "" for ok in live]
    B = session.B
    _reserve(session, rows, bounds)
    logits = session.prefill(rows)
    while any(live):
        scores = apply(chain, B, B.astype(logits, np.float32), info)
        picked = pick(B, scores, keys)
        if not all(live):  # rows stopped at an earlier step get padding (where the tokens are: no sync)
            stopped = np.logical_not(live)
            picked = (B.where(B.asarray(stopped), B.full((), pad, B.dtype(picked)), picked) if B.is_array(picked)
                      else np.where(stopped, pad, picked))
        # the next step starts from the picked tokens before the host reads them, so the device
        # computes it while the host checks the stops; after the last token it is dropped
        if any(ok and len(t) + 1 < m for ok, t, m in zip(live, info.tokens, info.max_lengths)):
            logits = session.step(picked)
            B.start(logits)
        for r, token in enumerate(host_tokens(B, picked).tolist()):
            if not live[r]:
                continue  # a stopped row runs on with the batch (on padding); its tokens are not kept
            info.tokens[r].append(token)
            why = _stop(info.tokens[r][len(rows[r]):], token, len(info.tokens[r]), info.max_lengths[r], config, decode)
            if why:
                live[r], stopped_by[r] = False, why
        if on_step is not None:
            on_step([t[len(p):] for t, p in zip(info.tokens, rows)])
    sequences = [t[len(p):] for t, p in zip(info.tokens, rows)]
    padding = list(getattr(session, "padding", None) or [0] * len(rows))
    summaries = [{"input": len(p), "output": sum(len(s) for s in sequences[i * copies:(i + 1) * copies]),
                  "padding": int(padding[i * copies])} for i, p in enumerate(prompts)]
    return Generated(sequences, summaries, None, stopped_by)


def _bounds(prompts: list[list[int]], config: GenerationConfig, max_position_embeddings: int | None,
            cap: int | None) -> list[tuple[int, int]]:
    """``(max_length, min_length)`` of each row, the max_length at most ``cap``."""
    bounds = [config.lengths(len(p), max_position_embeddings) for p in prompts]
    return bounds if cap is None else [(min(m, cap), n) for m, n in bounds]


def _reserve(session: DecoderSession, prompts: list[list[int]], bounds: list[tuple[int, int]]) -> None:
    """Tell a session with a fixed-size cache (``reserve``) how many new tokens to make room for, and the
    longest row (prompt included) there can be."""
    reserve = getattr(session, "reserve", None)
    if reserve is not None and prompts:
        reserve(max(m - len(p) for p, (m, _) in zip(prompts, bounds)), longest=max(m for m, _ in bounds))


def _stop(new: list[int], token: int, length: int, max_length: int, config: GenerationConfig,
          decode: Callable[[list[int]], str] | None) -> str:
    """Why a row stops after ``token`` ("eos", "length", "stop_string"), or "" when it goes on."""
    if token in config.eos_ids:
        return "eos"
    if length >= max_length:
        return "length"
    if config.stop_strings and decode is not None:
        text = decode(new)
        if any(s in text for s in config.stop_strings):
            return "stop_string"
    return ""


def _log_softmax(B: Any, x: Any) -> Any:
    """``(x - max) - log(sum(exp(x - max)))``, in the order of torch's log_softmax."""
    shifted = B.subtract(x, B.max(x, -1, True))
    return B.subtract(shifted, B.log(B.sum(B.exp(shifted), -1, True)))


def _beam(session: DecoderSession, prompts: list[list[int]], config: GenerationConfig,
          decode: Callable[[list[int]], str] | None, bounds: list[tuple[int, int]],
          processors: Sequence[Any] = ()) -> Generated:
    n = config.num_beams
    stop = None
    if config.stop_strings:
        def stop(i: int, new: list[int]) -> bool:
            return any(s in decode(new) for s in config.stop_strings)
    search = BeamSearch([len(p) for p in prompts], [b[0] for b in bounds], n, config.eos_ids,
                        config.length_penalty, config.early_stopping, config.num_return_sequences,
                        config.pad_id, stop)
    chain = [*build_processors(config), *processors]
    rows = [p for p in prompts for _ in range(n)]
    info = Rows([list(p) for p in rows], [len(p) for p in rows], [bounds[r // n][0] for r in range(len(rows))],
                [bounds[r // n][1] for r in range(len(rows))])
    B = session.B
    _reserve(session, prompts, bounds)
    logits = session.prefill(rows)
    while not search.done:
        info.tokens = [p + new for p, new in zip(rows, search.new_tokens())]
        log_probs = apply(chain, B, _log_softmax(B, B.astype(logits, np.float32)), info)
        tokens, sources = search.step(np.asarray(B.to_numpy(log_probs), np.float32))
        if search.done:
            break
        session.reorder(sources)
        logits = session.step(tokens)
    results = search.results()
    sequences = [seq for per_input in results for seq, _ in per_input]
    scores = [score for per_input in results for _, score in per_input]
    padding = list(getattr(session, "padding", None) or [0] * len(rows))
    summaries = [{"input": len(p), "output": sum(len(s) for s, _ in results[i]),
                  "padding": int(padding[i * n])} for i, p in enumerate(prompts)]
    return Generated(sequences, summaries, scores, [])
