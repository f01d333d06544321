"""Beam search with the rules of transformers 4.57 ``_beam_search``, on host float32 arrays.

>>> import numpy as np
>>> from transmuter_mlx.generation.beam import BeamSearch
>>> search = BeamSearch(prompt_lengths=[1], max_lengths=[3], num_beams=2, eos_token_id=[0])
>>> log_probs = np.log(np.array([[0.1, 0.6, 0.3]] * 2, np.float32))
>>> tokens, rows = search.step(log_probs)
>>> tokens.tolist(), rows.tolist()
([1, 2], [0, 0])
>>> tokens, rows = search.step(log_probs)
>>> search.done
True
>>> [seq for seq, score in search.results()[0]]
[[1, 1]]

The beams of input i are rows ``i * num_beams ... i * num_beams + num_beams - 1`` of the batch. Each
``step`` takes the processed log-probabilities of the rows (``log_softmax`` of the logits, then the
logits processors) and returns the next token of every row and the row each one continues (gather
the KV cache with it). The rules are transformers': the top ``(1 + number of eos) * num_beams``
candidates of the input (scores summed over the beam), a candidate that ends (eos, max length or a
stop callback) becomes a hypothesis scored ``sum of log-probs / new_length ** length_penalty`` if it
is among the top ``num_beams`` and can still enter the ``num_beams`` best hypotheses, the other
candidates continue; ``early_stopping`` True stops an input when it has ``num_beams`` hypotheses,
False when the best running beam, scored at its current length, cannot beat the worst hypothesis,
"never" the same with the max length when ``length_penalty > 0``. The float32 arithmetic follows
transformers' order (the -1e9 masks included); ties in the top-k go to the lower index.

Each input counts its own prompt length (``prompt_lengths``) and max length: its result is the
result of transformers for that input alone. An input that is done keeps its results; its rows get
``pad_token_id`` and continue themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["BeamSearch"]

_NEG = np.float32(-1.0e9)


def _topk(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest of each row, best first; ties keep index order."""
    if k >= x.shape[-1]:
        return np.argsort(-x, axis=-1, kind="stable")
    # the k largest are the values >= the k-th largest (ties at it included), so sorting those is the
    # stable sort's start without sorting a whole vocabulary
    kth = np.partition(x, -k, axis=-1)[:, -k][:, None]
    out = np.empty((x.shape[0], k), np.int64)
    for r in range(x.shape[0]):
        candidates = np.flatnonzero(x[r] >= kth[r])
        out[r] = candidates[np.argsort(-x[r, candidates], kind="stable")[:k]]
    return out


def _gather(x: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``x[i, index[i, j], ...]`` (transformers' ``_gather_beams``)."""
    return x[np.arange(x.shape[0])[:, None], index]


class BeamSearch:
    """The state of a beam search over ``len(prompt_lengths)`` inputs (see the module docstring).

    ``stop(i, new_tokens)`` may end a candidate of input i (stop strings); it is called for every
    candidate of every step.
    """

    def __init__(
        self,
        prompt_lengths: Sequence[int],
        max_lengths: Sequence[int],
        num_beams: int,
        eos_token_id: Sequence[int] = (),
        length_penalty: float = 1.0,
        early_stopping: bool | str = False,
        num_return_sequences: int = 1,
        pad_token_id: int | None = None,
        stop: Callable[[int, list[int]], bool] | None = None,
    ):
        self.batch, self.num_beams = len(prompt_lengths), num_beams
        self.prompt_lengths = np.asarray(prompt_lengths, np.int64)
        self.max_lengths = np.asarray(max_lengths, np.int64)
        self.eos = np.asarray(list(eos_token_id), np.int64)
        self.length_penalty, self.early_stopping = float(length_penalty), early_stopping
        self.num_return_sequences = num_return_sequences
        self.pad = pad_token_id if pad_token_id is not None else (int(self.eos[0]) if len(self.eos) else 0)
        self.stop = stop
        self.keep = max(2, 1 + len(self.eos)) * num_beams
        width = max(1, int((self.max_lengths - self.prompt_lengths).max()))
        b, n = self.batch, num_beams
        self.running = np.full((b, n, width), self.pad, np.int64)  # new tokens of the running beams
        self.running_scores = np.zeros((b, n), np.float32)
        self.running_scores[:, 1:] = _NEG
        self.sequences = np.full((b, n, width), self.pad, np.int64)  # new tokens of the hypotheses
        self.lengths = np.zeros((b, n), np.int64)
        self.scores = np.full((b, n), _NEG, np.float32)
        self.finished = np.zeros((b, n), bool)
        self.improvable = np.ones(b, bool)
        self.input_done = np.zeros(b, bool)
        self.t = 0  # tokens generated so far

    @property
    def done(self) -> bool:
        """Whether every input is done."""
        return bool(self.input_done.all())

    def new_tokens(self) -> list[list[int]]:
        """The new tokens of each row (running beam), to extend the rows' histories."""
        return self.running[:, :, : self.t].reshape(self.batch * self.num_beams, self.t).tolist()

    def step(self, log_probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Advance one token: ``(next token per row, source row per row)``, both (batch * num_beams,)."""
        b, n, t = self.batch, self.num_beams, self.t
        vocab = log_probs.shape[-1]
        scores = (np.asarray(log_probs, np.float32).reshape(b, n, vocab) + self.running_scores[:, :, None])
        scores = scores.reshape(b, n * vocab)
        top = _topk(scores, self.keep)
        top_scores = np.take_along_axis(scores, top, -1)
        source, ids = top // vocab, top % vocab
        candidates = _gather(self.running, source)
        candidates[:, :, t] = ids
        hits = self._hits(candidates, ids)

        # e. the running beams of the next step
        running_scores = top_scores + hits.astype(np.float32) * _NEG
        best = _topk(running_scores, n)
        new_running, new_running_scores = _gather(candidates, best), _gather(running_scores, best)
        new_source = _gather(source, best)

        # f. the hypotheses
        just_finished = hits & (np.arange(self.keep) < n)[None, :]
        final = top_scores / np.float32((t + 1) ** self.length_penalty)
        full = self.finished.all(-1, keepdims=True) & (self.early_stopping is True)
        final = final + full.astype(np.float32) * _NEG
        final = final + (~self.improvable[:, None]).astype(np.float32) * _NEG
        final = final + (~just_finished).astype(np.float32) * _NEG
        merged = np.concatenate([self.scores, final], 1)
        pick = _topk(merged, n)
        lengths = np.concatenate([self.lengths, np.where(just_finished, t + 1, 0)], 1)
        sequences = _gather(np.concatenate([self.sequences, candidates], 1), pick)
        finished = _gather(np.concatenate([self.finished, just_finished], 1), pick)

        live = ~self.input_done
        self._set(live, new_running, new_running_scores, sequences, _gather(merged, pick),
                  _gather(lengths, pick), finished)
        self.t = t + 1
        self._update_done(live, hits)
        rows = np.where(live[:, None], new_source, np.arange(n)[None, :]) + (np.arange(b) * n)[:, None]
        tokens = np.where(live[:, None], self.running[:, :, t], self.pad)
        return tokens.reshape(-1), rows.reshape(-1)

    def _hits(self, candidates: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Which candidates end now: eos, max length, or the stop callback."""
        hits = np.isin(ids, self.eos)
        hits |= (self.prompt_lengths + self.t + 1 >= self.max_lengths)[:, None]
        if self.stop is not None:
            for i in range(self.batch):
                for k in range(self.keep):
                    if not hits[i, k] and self.stop(i, list(candidates[i, k, : self.t + 1])):
                        hits[i, k] = True
        return hits

    def _set(self, live: np.ndarray, running, running_scores, sequences, scores, lengths, finished) -> None:
        self.running[live] = running[live]
        self.running_scores[live] = running_scores[live]
        self.sequences[live] = sequences[live]
        self.scores[live] = scores[live]
        self.lengths[live] = lengths[live]
        self.finished[live] = finished[live]

    def _update_done(self, live: np.ndarray, hits: np.ndarray) -> None:
        """``_check_early_stop_heuristic`` and ``_beam_search_has_unfinished_sequences``, per input."""
        lp = self.length_penalty
        if self.early_stopping == "never" and lp > 0.0:
            best_length = self.max_lengths - self.prompt_lengths
        else:
            best_length = np.full(self.batch, self.t)
        divisor = np.array([np.float32(float(x) ** lp) for x in best_length], np.float32)
        best_possible = self.running_scores[:, :1] / divisor[:, None]
        worst = np.where(self.finished, self.scores.min(-1, keepdims=True), _NEG)
        improvable = self.improvable & (best_possible > worst).any(-1)
        self.improvable = np.where(live, improvable, self.improvable)
        open_beam = ~(self.finished.all(-1) & (self.early_stopping is True))
        valid = ~hits.all(-1)
        self.input_done |= live & ~(self.improvable & open_beam & valid)

    def results(self) -> list[list[tuple[list[int], float]]]:
        """Per input, the ``num_return_sequences`` best hypotheses: (new tokens, score), best first."""
        return [[(self.sequences[i, j, : self.lengths[i, j]].tolist(), float(self.scores[i, j]))
                 for j in range(self.num_return_sequences)] for i in range(self.batch)]
