"""MLX's random numbers, written once for any backend: keys, splits and Gumbel draws of threefry2x32.

MLX draws random bits with the counter-based Threefry-2x32 hash (20 rounds; Salmon et al., "Parallel
random numbers: as easy as 1, 2, 3", SC 2011): a key is two 32-bit words, and the ``count`` words of a
key are hashes of counters laid out as ``mx.random.bits`` lays them out. Here a key is an int64 array
(..., 2) holding the two words; the same integer arithmetic on numpy, torch or mlx arrays gives the
same words as MLX, so a seed draws the same bits on every backend. (Gumbel values may differ in their
last bit: each library has its own ``log``.)

>>> from transmuter_mlx.converters.backends import get_backend
>>> from transmuter_mlx.converters.backends.threefry import key, random_split
>>> B = get_backend("numpy")
>>> key(7).tolist()                                   # mx.random.key(7)
[0, 7]
>>> random_split(B, key(7), 2).tolist()               # mx.random.split(mx.random.key(7), 2)
[[966301609, 989289821], [1948237315, 1058547403]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["gumbel", "key", "random_bits", "random_split", "threefry2x32"]

WORD = 0xFFFFFFFF
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA  # Threefry's key-schedule constant
_MAX_WORD = 4294967295.0  # uniform = word / 2**32 (as float32), as mx.random.uniform divides
_BELOW_ONE = float(np.nextafter(np.float32(1), np.float32(0)))


def key(seed: int) -> np.ndarray:
    """The key of ``seed`` (an unsigned 64-bit int): its high and low words, as ``mx.random.key``."""
    seed = int(seed)
    return np.array([(seed >> 32) & WORD, seed & WORD], np.int64)


def threefry2x32(key0: Any, key1: Any, count0: Any, count1: Any) -> tuple[Any, Any]:
    """The two words that hash the counter ``(count0, count1)`` under the key ``(key0, key1)``.

    Arguments are int64 arrays of one backend holding 32-bit words; they broadcast together. Written
    with the in-place integer operators numpy, torch and mlx arrays share (not ``B.add``, ...): ~140
    small ops per call, which cost half the time on torch this way (mlx makes new arrays, as always).
    Sums are carried in int64 and cut to 32 bits where a word is shifted or returned (``x0`` stays
    below 2**38 until then).

    >>> import numpy as np
    >>> [int(w[0]) for w in threefry2x32(np.array([0]), np.array([7]), np.array([0]), np.array([2]))]
    [966301609, 1948237315]
    """
    keys = (key0, key1, key0 ^ key1 ^ _PARITY)
    x0, x1 = count0 + key0, (count1 + key1) & WORD  # new arrays: the arguments are never written
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 += x1
            high = x1 << r
            x1 >>= 32 - r
            x1 |= high  # x1 rotated left by r (above bit 32: cut below)
            x1 ^= x0
            x1 &= WORD
        x0 += keys[(i + 1) % 3]
        x1 += keys[(i + 2) % 3] + (i + 1)
        x1 &= WORD
    x0 &= WORD
    return x0, x1


def random_bits(B: Any, keys: Any, count: int) -> Any:
    """``count`` random 32-bit words of each key: int64 (..., 2) -> (..., count), as ``mx.random.bits``.

    MLX's layout: with ``h = count // 2`` and ``o = count % 2``, the hash of counter ``(j, j + h + o)``
    gives words ``j`` and ``j + h + o`` (``j < h``); an odd count takes word ``h`` from counter ``(h, 0)``.
    """
    half, odd = count // 2, count % 2
    lead = B.shape(keys)[:-1]
    key0, key1 = (B.reshape(k, (*lead, 1)) for k in B.split(keys, [1, 1], -1))
    first = B.arange(0, half + odd, 1, np.int64)
    second = B.add(first, half + odd)
    if odd:  # the last hash counts (h, 0)
        second = B.where(B.less(first, half), second, B.zeros((), np.int64))
    words0, words1 = threefry2x32(key0, key1, first, second)
    if odd:
        words1 = B.slice(words1, [0] * len(lead) + [0], [*lead, half], [1] * (len(lead) + 1))
    return B.concatenate([words0, words1], -1)


def random_split(B: Any, keys: Any, num: int) -> Any:
    """``num`` new keys from each key: int64 (..., 2) -> (..., num, 2), as ``mx.random.split(key, num)``."""
    lead = B.shape(keys)[:-1]
    return B.reshape(random_bits(B, keys, 2 * num), (*lead, num, 2))


def gumbel(B: Any, keys: Any, count: int) -> Any:
    """``count`` standard Gumbel draws of each key: int64 (..., 2) -> float32 (..., count), as
    ``mx.random.gumbel((count,), key=key)``: ``-log(-log(u))`` of the uniform ``u`` of each word."""
    words = B.astype(random_bits(B, keys, count), np.float32)
    uniform = B.clip(B.divide(words, _MAX_WORD), 0.0, _BELOW_ONE)
    return B.negative(B.log(B.negative(B.log(uniform))))
