"""Window geometry shared by the convolution and pooling ops: pads, auto_pad and output sizes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def outputs_used(ctx: Any) -> int:
    """How many leading outputs the node names (exporters leave unused optional outputs blank)."""
    return max((i + 1 for i, name in enumerate(ctx.step.outputs) if name), default=1)


def spatial_pads(
    space: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str | bytes,
    ceil_mode: int = 0,
) -> tuple[list[tuple[int, int]], list[int], list[int], list[int]]:
    """``(pads, strides, dilations, extra)`` per spatial axis.

    ``pads`` are the ONNX pads as ``(begin, end)`` pairs (auto_pad resolved); ``extra`` is what
    ceil_mode adds at the end so that the last window fits, and is not part of the padding the
    average pool counts.
    """
    n = len(space)
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    span = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pairs = []
        for s, st, e in zip(space, strides, span):
            total = max(0, (-(-s // st) - 1) * st + e - s)
            small = total // 2
            pairs.append((small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small))
    elif auto_pad == "VALID" or not pads:
        pairs = [(0, 0)] * n
    else:
        pairs = [(int(pads[i]), int(pads[i + n])) for i in range(n)]
    extra = [0] * n
    if ceil_mode:
        for i, (s, st, e, (lo, hi)) in enumerate(zip(space, strides, span, pairs)):
            out = -(-(s + lo + hi - e) // st) + 1
            if (out - 1) * st >= s + lo:  # the last window would start in the end padding
                out -= 1
            extra[i] = max(0, (out - 1) * st + e - (s + lo + hi))
    return pairs, strides, dilations, extra
