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

How the keys are derived (MLX's scheme, drawn with the backend's own ops: ``B.random_split`` and
``B.gumbel``, see ``converters/backends/threefry.py``): row r of seed ``s`` starts from
``k = mx.random.key(s)``; when the input asks for ``n > 1`` sequences (``num_return_sequences``), its
j-th copy starts from ``mx.random.split(mx.random.key(s), n)[j]``. At every step each row splits its
key, ``k, sub = mx.random.split(k)``, and picks ``argmax(scores + mx.random.gumbel((vocab,), key=sub))``,
which draws from ``softmax(scores)`` (the Gumbel-max rule; -inf scores are never drawn). A row's
draws depend only on its seed and its own scores, so an input gives the same text alone or in any
batch; every backend draws the same bits, so a seed gives the same tokens on mlx and torch (up to the
backends' rounding of the scores and of ``log``) and the tokens it gave when sampling called ``mx.random``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..converters.backends import HOST
from ..converters.backends.threefry import key

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


def first_key(seed: int | None, copy: int = 0, copies: int = 1) -> np.ndarray:
    """The host key (int64 words) a row starts from: of ``seed`` (None: a fresh random one), split
    ``copies`` ways for ``num_return_sequences`` and taken at ``copy``.

    >>> first_key(7).tolist(), first_key(7, 1, 2).tolist()   # mx.random.key(7), mx.random.split(.., 2)[1]
    ([0, 7], [1948237315, 1058547403])
    """
    root = key(seed if seed is not None else secrets.randbits(63))
    return HOST.random_split(root, copies)[copy] if copies > 1 else root


class RowKeys:
    """The random keys of the rows of a batch (see the module docstring for their derivation).

    ``seeds[r]`` is row r's seed (None: a fresh random one); ``copies[r] = (j, n)`` makes it the j-th of
    ``n`` sequences of its input. The keys are made on the host, then live on the backend of the scores
    they draw for: each step splits them there, with no wait for the device.
    """

    def __init__(self, seeds: Sequence[int | None], copies: Sequence[tuple[int, int]] | None = None):
        copies = copies or [(0, 1)] * len(seeds)
        rows = [first_key(seed, j, n) for seed, (j, n) in zip(seeds, copies)]
        self.B: Any = HOST
        self.keys: Any = np.stack(rows) if rows else np.zeros((0, 2), np.int64)

    def __len__(self) -> int:
        return self.B.shape(self.keys)[0]

    def select(self, rows: Sequence[int]) -> None:
        """Keep the keys of ``rows`` in that order (rows leave or are reordered)."""
        self.keys = self.B.take(self.keys, self.B.asarray(np.asarray(rows, np.int64)), 0)

    def sample(self, B: Any, scores: Any) -> np.ndarray:
        """One token per row drawn from ``softmax(scores)``, as host int64; every key advances."""
        return host_tokens(B, self.pick(B, scores))

    def pick(self, B: Any, scores: Any) -> Any:
        """``sample`` left unsynced: the tokens as an array of ``B``, drawn with ``B``'s ops."""
        rows, vocab = B.shape(scores)
        if rows != len(self):
            raise ValueError(f"{rows} rows of scores for {len(self)} keys")
        self._move_to(B)
        pairs = B.random_split(self.keys, 2)  # k, sub = split(k)
        self.keys = B.reshape(B.slice(pairs, (0, 0, 0), (rows, 1, 2), (1, 1, 1)), (rows, 2))
        noise = B.gumbel(B.reshape(B.slice(pairs, (0, 1, 0), (rows, 2, 2), (1, 1, 1)), (rows, 2)), vocab)
        return B.argmax(B.add(scores, noise), -1, False)  # float32 noise: the sum is at least float32

    def _move_to(self, B: Any) -> None:
        """Hold the keys as arrays of ``B`` (once: afterwards they stay there)."""
        if B is not self.B:
            self.keys = B.asarray(np.asarray(self.B.to_numpy(self.keys), np.int64))
            self.B = B
