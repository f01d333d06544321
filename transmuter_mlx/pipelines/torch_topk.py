"""The order ``torch.topk(x, k, sorted=False)`` gives on the CPU, in Python: which k values, in which order.

>>> x = np.array([0.4, 0.8, 0.9, 0.3, 0.5, 0.2, 0.7, 0.6], np.float32)
>>> topk_unsorted(x, 4).tolist()   # the 4 largest, not best first: 0.8, 0.9, 0.7, 0.6
[1, 2, 6, 7]

transformers' Mask2Former instance segmentation numbers its segments in the order of an unsorted
``topk`` (and a later segment paints over an earlier one). ATen's CPU kernel (``TopKImpl.h``) fills a
vector of (value, index) pairs and runs ``std::partial_sort`` on it when ``k * 64 <= n`` (the best first)
and ``std::nth_element`` otherwise, which leaves the k best in the order its introselect swapped them
into. That order belongs to the C++ standard library: this is libstdc++'s (GCC's; PyTorch's Linux wheels),
step for step; torch built against libc++ (macOS) orders them otherwise. The comparison puts NaN first,
then larger values, as ATen's for ``largest=True``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["topk_unsorted"]

Pair = tuple[float, int]


def topk_unsorted(values: np.ndarray, k: int) -> np.ndarray:
    """The indices ``torch.topk(torch.from_numpy(values), k, sorted=False).indices`` has on a Linux CPU."""
    flat = np.asarray(values).reshape(-1)
    n = flat.size
    if not 0 <= k <= n:
        raise ValueError(f"topk: k must be within 0..{n}, got {k}")
    if k == 0:
        return np.zeros(0, np.int64)
    queue: list[Pair] = list(zip(flat.astype(np.float64).tolist(), range(n), strict=True))
    if k * 64 <= n:
        _heap_select(queue, 0, k, n)
        _sort_heap(queue, 0, k)
    else:
        _introselect(queue, 0, k - 1, n, 2 * (n.bit_length() - 1))
    return np.array([index for _, index in queue[:k]], np.int64)


def _comp(x: Pair, y: Pair) -> bool:
    """ATen's ``largest`` order: x before y when x is NaN and y is not, or x > y."""
    return (math.isnan(x[0]) and not math.isnan(y[0])) or x[0] > y[0]


# ------------------------------------------------------------------ libstdc++'s <bits/stl_algo.h>
def _introselect(q: list[Pair], first: int, nth: int, last: int, depth: int) -> None:
    while last - first > 3:
        if depth == 0:
            _heap_select(q, first, nth + 1, last)
            q[first], q[nth] = q[nth], q[first]  # the nth largest to its place
            return
        depth -= 1
        cut = _partition_pivot(q, first, last)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(q, first, last)


def _partition_pivot(q: list[Pair], first: int, last: int) -> int:
    mid = first + (last - first) // 2
    _move_median_to_first(q, first, first + 1, mid, last - 1)
    return _unguarded_partition(q, first + 1, last, first)


def _move_median_to_first(q: list[Pair], result: int, a: int, b: int, c: int) -> None:
    if _comp(q[a], q[b]):
        if _comp(q[b], q[c]):
            pick = b
        elif _comp(q[a], q[c]):
            pick = c
        else:
            pick = a
    elif _comp(q[a], q[c]):
        pick = a
    elif _comp(q[b], q[c]):
        pick = c
    else:
        pick = b
    q[result], q[pick] = q[pick], q[result]


def _unguarded_partition(q: list[Pair], first: int, last: int, pivot: int) -> int:
    while True:
        while _comp(q[first], q[pivot]):
            first += 1
        last -= 1
        while _comp(q[pivot], q[last]):
            last -= 1
        if not first < last:
            return first
        q[first], q[last] = q[last], q[first]
        first += 1


def _insertion_sort(q: list[Pair], first: int, last: int) -> None:
    for i in range(first + 1, last):
        value = q[i]
        if _comp(value, q[first]):
            q[first + 1:i + 1] = q[first:i]
            q[first] = value
        else:  # __unguarded_linear_insert
            j = i
            while _comp(value, q[j - 1]):
                q[j] = q[j - 1]
                j -= 1
            q[j] = value


# ------------------------------------------------------------------ libstdc++'s <bits/stl_heap.h>
def _heap_select(q: list[Pair], first: int, middle: int, last: int) -> None:
    _make_heap(q, first, middle)
    for i in range(middle, last):
        if _comp(q[i], q[first]):
            _pop_heap(q, first, middle, i)


def _sort_heap(q: list[Pair], first: int, last: int) -> None:
    while last - first > 1:
        last -= 1
        _pop_heap(q, first, last, last)


def _make_heap(q: list[Pair], first: int, last: int) -> None:
    length = last - first
    if length < 2:
        return
    for parent in range((length - 2) // 2, -1, -1):
        _adjust_heap(q, first, parent, length, q[first + parent])


def _pop_heap(q: list[Pair], first: int, last: int, result: int) -> None:
    value = q[result]
    q[result] = q[first]
    _adjust_heap(q, first, 0, last - first, value)


def _adjust_heap(q: list[Pair], first: int, hole: int, length: int, value: Pair) -> None:
    top = second = hole
    while second < (length - 1) // 2:
        second = 2 * (second + 1)
        if _comp(q[first + second], q[first + second - 1]):
            second -= 1
        q[first + hole] = q[first + second]
        hole = second
    if length % 2 == 0 and second == (length - 2) // 2:
        second = 2 * (second + 1)
        q[first + hole] = q[first + second - 1]
        hole = second - 1
    parent = (hole - 1) // 2  # __push_heap
    while hole > top and _comp(q[first + parent], value):
        q[first + hole] = q[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    q[first + hole] = value
