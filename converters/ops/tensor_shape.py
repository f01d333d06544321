"""Shape and layout ops: Shape, Reshape, Squeeze, Transpose, Concat, Split, Slice, Expand, Tile, ..."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .registry import register


def normalize_axis(axis: int, rank: int) -> int:
    """``axis`` in [0, rank) (a scalar's axis 0 or -1 is 0); out of range is an error."""
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def _ints(v: Any) -> list[int]:
    return [int(i) for i in np.asarray(v).reshape(-1)]


@register("Identity", 1, replay_as="identity")
def identity_1(B: Any, x: Any) -> Any:
    """Tensors, sequences and optionals pass through unchanged."""
    return x


@register("Shape", 1, shape_only=True)
def shape_1(B: Any, x: Any) -> np.ndarray:
    return np.array(B.shape(x), dtype=np.int64)


@register("Shape", 15, shape_only=True)
def shape_15(B: Any, x: Any, *, start: int = 0, end: int | None = None) -> np.ndarray:
    # Python slicing clamps start/end exactly as the spec does
    return np.array(B.shape(x)[start:end], dtype=np.int64)


@register("Size", 1, shape_only=True)
def size_1(B: Any, x: Any) -> np.ndarray:
    return np.array(math.prod(B.shape(x)), dtype=np.int64)


def _reshape_target(in_shape: tuple[int, ...], shape: list[int], allowzero: int) -> list[int]:
    out = [in_shape[i] if d == 0 and not allowzero else d for i, d in enumerate(shape)]
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(in_shape) // known if known else 0
    return out


@register("Reshape", 1, replay_as="reshape")
def reshape_1(B: Any, data: Any, *, shape: list[int], consumed_inputs: list[int] | None = None) -> Any:
    return B.reshape(data, _reshape_target(B.shape(data), list(shape), 0))


@register("Reshape", 5, static_inputs=(1,), replay_as="reshape")
def reshape_5(B: Any, data: Any, shape: np.ndarray) -> Any:
    return B.reshape(data, _reshape_target(B.shape(data), _ints(shape), 0))


@register("Reshape", 14, static_inputs=(1,), replay_as="reshape")
def reshape_14(B: Any, data: Any, shape: np.ndarray, *, allowzero: int = 0) -> Any:
    return B.reshape(data, _reshape_target(B.shape(data), _ints(shape), allowzero))


@register("Flatten", 1, replay_as="reshape")
def flatten_1(B: Any, input: Any, *, axis: int = 1) -> Any:
    shape = B.shape(input)
    axis = axis + len(shape) if axis < 0 else axis
    return B.reshape(input, (math.prod(shape[:axis]), math.prod(shape[axis:])))


def _squeeze(B: Any, x: Any, axes: list[int] | None) -> Any:
    shape = B.shape(x)
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    return B.squeeze(x, sorted(normalize_axis(a, len(shape)) for a in axes))


@register("Squeeze", 1, replay_as="reshape")
def squeeze_1(B: Any, data: Any, *, axes: list[int] | None = None) -> Any:
    return _squeeze(B, data, axes)


@register("Squeeze", 13, static_inputs=(1,), replay_as="reshape")
def squeeze_13(B: Any, data: Any, axes: np.ndarray | None = None) -> Any:
    return _squeeze(B, data, None if axes is None else _ints(axes))


def _unsqueeze(B: Any, x: Any, axes: list[int]) -> Any:
    rank = len(B.shape(x)) + len(axes)
    return B.expand_dims(x, sorted(normalize_axis(a, rank) for a in axes))


@register("Unsqueeze", 1, replay_as="reshape")
def unsqueeze_1(B: Any, data: Any, *, axes: list[int]) -> Any:
    return _unsqueeze(B, data, list(axes))


@register("Unsqueeze", 13, static_inputs=(1,), replay_as="reshape")
def unsqueeze_13(B: Any, data: Any, axes: np.ndarray) -> Any:
    return _unsqueeze(B, data, _ints(axes))


@register("Transpose", 1)
def transpose_1(B: Any, data: Any, *, perm: list[int] | None = None) -> Any:
    rank = len(B.shape(data))
    return B.transpose(data, list(perm) if perm is not None else list(range(rank))[::-1])


@register("Concat", 1)
def concat_1(B: Any, *inputs: Any, axis: int = 1) -> Any:
    return B.concatenate(list(inputs), normalize_axis(axis, len(B.shape(inputs[0]))))


def _split(B: Any, x: Any, axis: int, sizes: list[int] | None, count: int) -> tuple[Any, ...]:
    axis = normalize_axis(axis, len(B.shape(x)))
    n = B.shape(x)[axis]
    if sizes is None:
        if n % count:
            raise ValueError(f"cannot split {n} into {count} equal parts")
        sizes = [n // count] * count
    if sum(sizes) != n:
        raise ValueError(f"split sizes {sizes} do not add up to {n}")
    return tuple(B.split(x, sizes, axis))


@register("Split", 2, context=True)
def split_2(
    B: Any, input: Any, *, axis: int = 0, split: list[int] | None = None, ctx: Any
) -> tuple[Any, ...]:
    return _split(B, input, axis, None if split is None else list(split), ctx.num_outputs)


@register("Split", 13, static_inputs=(1,), context=True)
def split_13(
    B: Any, input: Any, split: np.ndarray | None = None, *, axis: int = 0, ctx: Any
) -> tuple[Any, ...]:
    return _split(B, input, axis, None if split is None else _ints(split), ctx.num_outputs)


@register("Split", 18, static_inputs=(1,), context=True)
def split_18(
    B: Any,
    input: Any,
    split: np.ndarray | None = None,
    *,
    axis: int = 0,
    num_outputs: int | None = None,
    ctx: Any,
) -> tuple[Any, ...]:
    if split is not None or num_outputs is None:
        return _split(B, input, axis, None if split is None else _ints(split), ctx.num_outputs)
    n = B.shape(input)[normalize_axis(axis, len(B.shape(input)))]
    chunk = -(-n // num_outputs)  # ceil: every part but the last is this big
    sizes = [min(chunk, n - i * chunk) for i in range(num_outputs)]
    return _split(B, input, axis, sizes, num_outputs)


def _slice(
    B: Any, x: Any, starts: list[int], ends: list[int], axes: list[int] | None, steps: list[int] | None
) -> Any:
    shape = B.shape(x)
    axes = list(range(len(starts))) if axes is None else [normalize_axis(a, len(shape)) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    lo, hi, st = [0] * len(shape), list(shape), [1] * len(shape)
    for a, start, end, step in zip(axes, starts, ends, steps):
        if step == 0:
            raise ValueError("Slice step cannot be 0")
        # Python's slice.indices clamps exactly as the spec; a stop of -1 then means "before index 0"
        lo[a], stop, st[a] = slice(start, end, step).indices(shape[a])
        hi[a] = None if stop < 0 else stop
    return B.slice(x, lo, hi, st)


@register("Slice", 1)
def slice_1(B: Any, data: Any, *, starts: list[int], ends: list[int], axes: list[int] | None = None) -> Any:
    return _slice(B, data, list(starts), list(ends), None if axes is None else list(axes), None)


@register("Slice", 10, static_inputs=(1, 2, 3, 4))
def slice_10(B: Any, data: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Any:
    return _slice(
        B,
        data,
        _ints(starts),
        _ints(ends),
        None if axes is None else _ints(axes),
        None if steps is None else _ints(steps),
    )


@register("Expand", 8, static_inputs=(1,), replay_as="broadcast_to")
def expand_8(B: Any, input: Any, shape: np.ndarray) -> Any:
    return B.broadcast_to(input, np.broadcast_shapes(B.shape(input), tuple(_ints(shape))))


@register("Tile", 6, static_inputs=(1,))
def tile_6(B: Any, input: Any, repeats: np.ndarray) -> Any:
    return B.tile(input, _ints(repeats))


@register("DepthToSpace", 1)
def depth_to_space_1(B: Any, input: Any, *, blocksize: int, mode: str = "DCR") -> Any:
    b, c, h, w = B.shape(input)
    bs = blocksize
    if mode == "DCR":
        x = B.transpose(B.reshape(input, (b, bs, bs, c // bs**2, h, w)), (0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        x = B.transpose(B.reshape(input, (b, c // bs**2, bs, bs, h, w)), (0, 1, 4, 2, 5, 3))
    else:
        raise ValueError(f"unknown DepthToSpace mode {mode!r}")
    return B.reshape(x, (b, c // bs**2, h * bs, w * bs))


@register("SpaceToDepth", 1)
def space_to_depth_1(B: Any, input: Any, *, blocksize: int, mode: str = "DCR") -> Any:
    b, c, h, w = B.shape(input)
    bs = blocksize
    x = B.reshape(input, (b, c, h // bs, bs, w // bs, bs))
    if mode not in ("DCR", "CRD"):
        raise ValueError(f"unknown SpaceToDepth mode {mode!r}")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return B.reshape(B.transpose(x, perm), (b, c * bs * bs, h // bs, w // bs))


@register("Dropout", 1)
def dropout_1(
    B: Any, data: Any, *, ratio: float = 0.5, is_test: int = 0, consumed_inputs: list[int] | None = None
) -> tuple[Any, Any]:
    """Inference: the identity; the mask (of the input's type before v10) keeps everything."""
    return data, B.full(B.shape(data), 1, B.dtype(data))


@register("Dropout", 7)
def dropout_7(B: Any, data: Any, *, ratio: float = 0.5) -> tuple[Any, Any]:
    return data, B.full(B.shape(data), 1, B.dtype(data))


@register("Dropout", 10)
def dropout_10(B: Any, data: Any, *, ratio: float = 0.5) -> tuple[Any, Any]:
    return data, B.full(B.shape(data), True, np.bool_)


@register("Dropout", 12, static_inputs=(1, 2))
def dropout_12(
    B: Any,
    data: Any,
    ratio: np.ndarray | None = None,
    training_mode: np.ndarray | None = None,
    *,
    seed: int | None = None,
) -> tuple[Any, Any]:
    p = 0.5 if ratio is None else float(np.asarray(ratio).reshape(()))
    shape = B.shape(data)
    if training_mode is None or not bool(np.asarray(training_mode).reshape(())) or p == 0:
        return data, B.full(shape, True, np.bool_)
    # training: the mask is drawn on the host, reproducibly when a seed is given
    rng = np.random.RandomState(seed) if seed is not None else np.random.RandomState()
    mask = rng.uniform(0.0, 1.0, shape) >= p
    scale = (mask / (1.0 - p)).astype(B.dtype(data))
    return B.multiply(data, B.asarray(scale)), B.asarray(mask)
