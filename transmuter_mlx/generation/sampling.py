"""Token selection: greedy (first maximum) and seeded sampling with one random key per row.

>>> import numpy as np
>>> from transmuter_mlx.converters.backends import get_backend
>>> from transmuter_mlx.generation.sampling import RowKeys, greedy
>>> B = get_backend("numpy")
>>> greedy(B, np.array([[0.0, 2.0, 2.0], [5.0, 1.0, 5.0]], np.float32)).tolist()
[1, 0]
>>> keys = RowKeys([7, 7])
>>> a, b = keys.sample(B, np.zeros((2, 50), np.float32)).tolist()
>>> a == b
True

How the keys are derived: row r of seed ``s`` starts from ``k = mx.random.key(s)``; when the input
asks for ``n > 1`` sequences (``num_return_sequences``), its j-th copy starts from
``mx.random.split(mx.random.key(s), n)[j]``. At every step each row splits its key,
``k, sub = mx.random.split(k)``, and picks ``argmax(scores + mx.random.gumbel((vocab,), key=sub))``,
which draws from ``softmax(scores)`` (the Gumbel-max rule; -inf scores are never drawn). A row's
draws depend only on its seed and its own scores, so an input gives the same text alone or in any
batch, on any backend (scores of a non-mlx backend go through numpy).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["RowKeys", "greedy", "host_tokens", "pick"]


def greedy(B: Any, scores: Any) -> np.ndarray:
    """The index of each row's maximum, the first one on ties (as torch.argmax), as host int64."""
    return host_tokens(B, pick(B, scores))


def pick(B: Any, scores: Any, keys: RowKeys | None = None) -> Any:
    """Each row's token as an array of ``B`` left unsynced (greedy, or drawn with ``keys``): the next
    decoder step can start from it before the host reads it."""
    return B.argmax(scores, -1, False) if keys is None else keys.pick(B, scores)


def host_tokens(B: Any, tokens: Any) -> np.ndarray:
    """Picked tokens as host int64 (waits for them)."""
    return np.asarray(B.to_numpy(tokens) if B.is_array(tokens) else tokens, np.int64).reshape(-1)


class RowKeys:
    """The random keys of the rows of a batch (see the module docstring for their derivation).

    ``seeds[r]`` is row r's seed (None: a fresh random one); ``copies[r] = (j, n)`` makes it the j-th of
    ``n`` sequences of its input.
    """

    def __init__(self, seeds: Sequence[int | None], copies: Sequence[tuple[int, int]] | None = None):
        import mlx.core as mx

        self._mx = mx
        copies = copies or [(0, 1)] * len(seeds)
        self.keys = []
        for seed, (j, n) in zip(seeds, copies):
            key = mx.random.key(int(seed) if seed is not None else secrets.randbits(63))
            self.keys.append(mx.random.split(key, n)[j] if n > 1 else key)

    def __len__(self) -> int:
        return len(self.keys)

    def select(self, rows: Sequence[int]) -> None:
        """Keep the keys of ``rows`` in that order (rows leave or are reordered)."""
        self.keys = [self.keys[r] for r in rows]

    def sample(self, B: Any, scores: Any) -> np.ndarray:
        """One token per row drawn from ``softmax(scores)``, as host int64; every key advances."""
        return np.asarray(self.pick(B, scores), np.int64).reshape(-1)

    def pick(self, B: Any, scores: Any) -> Any:
        """``sample`` left unsynced: an mlx array for the mlx backend, else host int64."""
        mx = self._mx
        on_mlx = isinstance(scores, mx.array)
        if not isinstance(scores, mx.array):
            scores = mx.array(np.asarray(B.to_numpy(scores), np.float32))
        rows, vocab = scores.shape
        if rows != len(self.keys):
            raise ValueError(f"{rows} rows of scores for {len(self.keys)} keys")
        noise = []
        for r, key in enumerate(self.keys):
            self.keys[r], sub = mx.random.split(key)
            noise.append(mx.random.gumbel(shape=(vocab,), key=sub))
        picked = mx.argmax(scores.astype(mx.float32) + mx.stack(noise), axis=-1)
        return picked if on_mlx else np.asarray(picked, np.int64).reshape(-1)
