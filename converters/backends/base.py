"""The backend op interface that every converter op is written against.

An op never imports mlx, torch or numpy arrays directly: it receives a backend ``B`` and calls
the primitives below. Dtypes are always spelled as numpy dtypes (``np.float32``), shapes as
tuples of Python ints, axes as Python ints or tuples. Three backends implement this protocol:

- ``NumpyBackend``: the host. The planner folds shape arithmetic and constant subgraphs with it,
  and values of dtypes a device backend cannot hold (float8, int4, strings) live here.
- ``MlxBackend``: the default device backend; traced functions go through ``mx.compile``.
- ``TorchBackend``: the same interface on torch (CPU, or CUDA where present).

A new primitive lands in all three backends together, with a test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

Array = Any
Axes = int | tuple[int, ...] | None

UNARY = (
    "abs", "negative", "exp", "log", "sqrt", "sin", "cos", "tan", "arcsin", "arccos", "arctan",
    "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "floor", "ceil", "sign", "erf",
    "sigmoid", "reciprocal", "isnan", "isinf", "logical_not", "bitwise_not", "round",
)  # fmt: skip
BINARY = (
    "add", "subtract", "multiply", "divide", "floor_divide", "remainder", "fmod", "power",
    "maximum", "minimum", "equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "left_shift", "right_shift",
)  # fmt: skip
REDUCE = ("sum", "prod", "max", "min", "mean")


class Backend(Protocol):
    """Primitives of one array library. ``name`` is ``"numpy"``, ``"mlx"`` or ``"torch"``."""

    name: str
    is_host: bool
    traces: bool  # ``compile`` traces the function (mx.compile), rather than returning it

    # -- arrays and dtypes --------------------------------------------------------------
    def asarray(self, x: Any, dtype: np.dtype | None = None) -> Array: ...
    def to_numpy(self, x: Array) -> np.ndarray: ...
    def host_view(self, x: Array) -> np.ndarray | None:
        """A numpy array that shares ``x``'s memory, or None where the device memory is not the host's."""
        ...

    def matmul_weight(self, w: np.ndarray, only_matmul: bool = False) -> Array:
        """The 2-D weight ``w`` (K, N), read only as the right operand of matmuls, as a device array of that shape in
        the memory layout those matmuls read fastest. ``only_matmul``: nothing but this backend's ``matmul`` and
        ``linear`` reads the result, so a backend with a layout of its own may hold that alone: the result is
        then a stand-in whose ``host_view`` has zero strides, and ``to_numpy`` rebuilds its values."""
        ...

    def conv_weight(self, w: np.ndarray) -> Array:
        """The weight ``w`` (O, C/groups, kH, kW) of 2-D convolutions of one geometry, read by nothing but this
        backend's ``conv`` and ``fused_conv``, as a device array of that shape in the layout they read fastest. A
        backend with a layout of its own may hold that alone: the result is then a stand-in whose ``host_view``
        has zero strides, and ``to_numpy`` rebuilds its values (as ``matmul_weight``'s)."""
        ...

    def is_array(self, x: Any) -> bool: ...
    def shape(self, x: Array) -> tuple[int, ...]: ...
    def dtype(self, x: Array) -> np.dtype: ...
    def supports_dtype(self, dtype: np.dtype) -> bool: ...
    def astype(self, x: Array, dtype: np.dtype) -> Array: ...
    def zeros(self, shape: Sequence[int], dtype: np.dtype) -> Array: ...
    def full(self, shape: Sequence[int], value: Any, dtype: np.dtype) -> Array: ...
    def arange(self, start: Any, stop: Any, step: Any, dtype: np.dtype) -> Array: ...

    # -- element-wise: every name of UNARY and BINARY, plus -----------------------------
    def where(self, cond: Array, x: Array, y: Array) -> Array: ...
    def clip(self, x: Array, lo: Any, hi: Any) -> Array: ...
    def trunc_divide(self, a: Array, b: Array) -> Array: ...
    def bitcast(self, x: Array, dtype: np.dtype) -> Array:
        """The bits of ``x`` reinterpreted as ``dtype`` of the same item size (``ndarray.view``)."""
        ...

    # -- reductions: every name of REDUCE as f(x, axis, keepdims), plus -----------------
    def argmax(self, x: Array, axis: int, keepdims: bool) -> Array: ...
    def argmin(self, x: Array, axis: int, keepdims: bool) -> Array: ...
    def cumsum(self, x: Array, axis: int) -> Array: ...
    def cumprod(self, x: Array, axis: int) -> Array: ...
    def logsumexp(self, x: Array, axis: Axes, keepdims: bool) -> Array: ...
    def softmax(self, x: Array, axis: int) -> Array: ...
    def argsort(self, x: Array, axis: int) -> Array:
        """Stable ascending sort order along ``axis`` (ties keep index order), as int64."""
        ...

    # -- layout -------------------------------------------------------------------------
    def reshape(self, x: Array, shape: Sequence[int]) -> Array: ...
    def transpose(self, x: Array, perm: Sequence[int]) -> Array: ...
    def broadcast_to(self, x: Array, shape: Sequence[int]) -> Array: ...
    def expand_dims(self, x: Array, axes: Sequence[int]) -> Array: ...
    def squeeze(self, x: Array, axes: Sequence[int]) -> Array: ...
    def concatenate(self, xs: Sequence[Array], axis: int) -> Array: ...
    def stack(self, xs: Sequence[Array], axis: int) -> Array: ...
    def split(self, x: Array, sizes: Sequence[int], axis: int) -> list[Array]: ...
    def slice(self, x: Array, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> Array: ...
    def flip(self, x: Array, axes: Sequence[int]) -> Array: ...
    def tile(self, x: Array, reps: Sequence[int]) -> Array: ...
    def pad(self, x: Array, pads: Sequence[tuple[int, int]], value: Any) -> Array: ...
    def contiguous(self, x: Array) -> Array:
        """``x`` laid out row-major in its own memory (a transposed view copied once, not at every read)."""
        ...

    # -- indexing -----------------------------------------------------------------------
    def take(self, x: Array, indices: Array, axis: int) -> Array: ...
    def take_along_axis(self, x: Array, indices: Array, axis: int) -> Array: ...
    def scatter_along_axis(
        self, x: Array, indices: Array, updates: Array, axis: int, reduction: str = "none"
    ) -> Array:
        """``np.put_along_axis`` with ``reduction`` in none/add/mul/max/min; indices non-negative."""
        ...

    def index_update(
        self, x: Array, index: Sequence[Array], updates: Array, reduction: str = "none"
    ) -> Array:
        """A copy of ``x`` with ``x[index] = updates`` (or ``np.<ufunc>.at`` for add/mul/max/min).

        ``index`` is a tuple of broadcastable non-negative integer arrays over the leading axes.
        """
        ...

    # -- linear algebra -----------------------------------------------------------------
    def matmul(self, a: Array, b: Array) -> Array: ...
    def einsum(self, equation: str, *operands: Array) -> Array: ...
    def linear(self, x: Array, weight: Array, bias: Array, gelu: str | None = None) -> Array:
        """``x @ weight + bias`` for ``x`` (..., K) of rank >= 2, ``weight`` (K, N), ``bias`` (N,); then, where
        ``gelu`` is given, ``self.gelu`` of it with that approximation ("none" or "tanh")."""
        ...

    def det(self, x: Array) -> Array:
        """Determinant of the square matrices in the last two axes."""
        ...

    # -- neural-network windows (channels-first, like ONNX) -----------------------------
    def sliding_window(
        self, x: Array, window: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
    ) -> Array:
        """Windows over the last ``len(window)`` axes: shape ``x.shape[:-n] + out + window``."""
        ...

    def conv(
        self, x: Array, w: Array, strides: Sequence[int], pads: Sequence[tuple[int, int]],
        dilations: Sequence[int], groups: int,
    ) -> Array:
        """Cross-correlation of ``x`` (N, C, *S) with ``w`` (O, C/groups, *K), zero ``pads`` per axis."""
        ...

    def fused_conv(
        self, x: Array, w: Array, bias: Array | None, add: Array | None, clip: tuple[float, float] | None,
        strides: Sequence[int], pads: Sequence[tuple[int, int]], dilations: Sequence[int], groups: int,
    ) -> Array | None:
        """``conv(x, w, ...) + bias (+ add)``, then ``min(max(., clip[0]), clip[1])`` where ``clip`` ((0, inf): ReLU)
        is given, in one kernel: ``bias`` (O,), ``add`` of the output's shape and dtype. None where this backend has
        no such kernel (``FusedConv`` then runs the ops one after the other)."""
        ...

    def conv_transpose(
        self, x: Array, w: Array, strides: Sequence[int], dilations: Sequence[int], groups: int
    ) -> Array:
        """The transpose of ``conv`` without pads for ``w`` (C, O/groups, *K): size (S-1)*s + d*(K-1) + 1."""
        ...

    def layer_norm(self, x: Array, weight: Array | None, bias: Array | None, eps: float) -> Array:
        """Normalisation over the last axis (mean and variance), then ``* weight + bias``."""
        ...

    def rms_norm(self, x: Array, weight: Array | None, eps: float) -> Array:
        """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last axis."""
        ...

    def group_norm(self, x: Array, groups: int, weight: Array | None, bias: Array | None, eps: float) -> Array:
        """``x`` (N, C, *S) normalised over each of ``groups`` runs of C / groups channels and all positions (mean and
        variance), then ``* weight + bias`` per channel (each (C,)); ``groups = C`` is an instance norm."""
        ...

    def rotate_half_embedding(self, x: Array, cos: Array, sin: Array) -> Array:
        """``x * cos + concat(-x2, x1) * sin`` with x1, x2 the halves of the last axis (cos, sin broadcast to x):
        the rotary embedding as transformers' ``rotate_half`` writes it, in that order of operations."""
        ...

    def gelu(self, x: Array, approximate: str = "none") -> Array:
        """The exact (erf) GELU ``x / 2 * (1 + erf(x / sqrt(2)))``, or with ``approximate="tanh"`` its tanh form
        ``x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``, in ``x``'s dtype."""
        ...

    def silu(self, x: Array) -> Array:
        """``x * sigmoid(x)``, in ``x``'s dtype."""
        ...

    # -- attention ----------------------------------------------------------------------
    def sdpa(self, q: Array, k: Array, v: Array, scale: float, mask: Array | str | None = None,
             zero_nan: bool = False) -> Array:
        """``softmax(q @ k^T * scale + mask) @ v``; q (B, Hq, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev).

        ``Hq`` is a multiple of ``Hkv`` (grouped heads: query head h reads kv head h // (Hq // Hkv)).
        ``mask`` broadcasts to (B, Hq, L, S): additive in q's dtype, boolean (True attends), or
        ``"causal"`` (lower-right aligned: query i sees keys j <= i + S - L). Fully masked rows are
        undefined (NaN on most backends) unless ``zero_nan``: NaN outputs then become 0, as the
        ``Where(IsNaN(p), 0, p)`` of optimum's exports makes them (from finite inputs, only the rows a
        -inf or boolean mask hides wholly are NaN; a float32 call with a finite mask may skip the pass).
        """
        ...

    # -- quantized weights ----------------------------------------------------------------
    def int8_matmul_weight(self, w: np.ndarray) -> Array | None:
        """The int8 weight ``w`` (K, N) for ``int8_matmul``, or None where this backend has no exact int8 GEMM faster
        than its float32 one (then ``IntegerLinear`` multiplies integers held in float32)."""
        ...

    def int8_matmul(self, a: Array, w: Array) -> Array:
        """The exact int32 product of int8 ``a`` (..., M, K) by ``int8_matmul_weight(w)``, (..., M, N)."""
        ...

    def interpolate_2d(self, x: Array, size: tuple[int, int], mode: str, align_corners: bool) -> Array | None:
        """float32 ``x`` (N, C, H, W) resized to ``size`` (H, W) in one kernel, as PyTorch's ``interpolate``: ``mode``
        "linear" (bilinear) or "cubic" (bicubic, a = -0.75), half-pixel coordinates or ``align_corners``; None where
        this backend has no such kernel (``ops/resize.py`` then gathers the taps of one axis after the other)."""
        ...

    def dynamic_quantize_uint8(self, x: Array) -> tuple[Array, Array, Array] | None:
        """ONNX's ``DynamicQuantizeLinear`` of float32 ``x`` as (uint8 codes, float32 scale, uint8 zero point), each
        value bit for bit the op's formula (``converters/ops/quantized.py``), in fewer calls than its ~17 ops; None
        where this backend runs that formula instead."""
        ...

    def packed_matmul_is_fast(self, bits: int = 4, bf16_activations: bool = False) -> bool:
        """Whether ``quantized_matmul`` on packed ``bits``-bit codes beats a matmul on weights dequantized once (GPU
        kernels do; MLX's CPU kernel is scalar, ~6x slower at one row and growing with the rows; torch's CPU int4
        kernel with bfloat16 activations is 3-7x faster below 32 rows), so the converter keeps block-quantized
        weights packed only where this holds (``TRANSMUTER_MLX_NBITS`` overrides). ``bf16_activations``: the model
        allows its activations rounded to bfloat16 (MatMulNBits' ``accuracy_level`` 3 or 4)."""
        ...

    def quantized_matmul_weight(
        self, words: np.ndarray, scales: np.ndarray, biases: np.ndarray, group_size: int, bits: int,
        bf16_activations: bool = False,
    ) -> Any:  # fmt: skip
        """The weight ``W[n, k] = scales[n, g] * code[n, k] + biases[n, g]``, ``g = k // group_size``, held as this
        backend's ``quantized_matmul`` reads it (made once per weight; the host arrays can go afterwards).

        ``words`` holds the codes of W (N, K) as ``pack_quantized`` packs them (uint32, N x K*bits/32);
        ``scales`` and ``biases`` are (N, K / group_size) in the activations' dtype; ``bits`` is 2, 4 or 8. With
        ``bf16_activations`` a backend may round the activations, the scales and the result to bfloat16 where
        that is its fast kernel (an error of ~4e-3 of the largest output, below onnxruntime's int8 activations
        at ``accuracy_level=4``).
        """
        ...

    def quantized_matmul(self, x: Array, w: Any) -> Array:
        """``x @ W.T`` for ``w = quantized_matmul_weight(...)``."""
        ...

    # -- random numbers: MLX's threefry2x32 (``threefry.py``), the same bits on every backend ----
    def random_split(self, keys: Array, num: int) -> Array:
        """``num`` new keys from each key: int64 (..., 2) -> (..., num, 2), as ``mx.random.split(key, num)``.

        A key is two unsigned 32-bit words held as int64 (``threefry.key(seed)``, as ``mx.random.key``).
        """
        ...

    def gumbel(self, keys: Array, count: int) -> Array:
        """``count`` standard Gumbel draws of each key: int64 (..., 2) -> float32 (..., count), as
        ``mx.random.gumbel((count,), key=key)`` (the same bits everywhere; ``log`` may differ in the last bit)."""
        ...

    # -- tracing ------------------------------------------------------------------------
    def compile(self, fn: Any) -> Any:
        """``fn`` traced for its shapes where the library can (``mx.compile``), else ``fn``."""
        ...

    def prepare_thread(self, model: object = None) -> None:
        """Called by ``Model`` (as ``model``) before each run, on the running thread: mlx releases the thread's
        streams when it ends (``threads.track_thread``), and on the CPU clears a buffer cache that another model
        filled (``mlx._claim_cpu_cache``)."""
        ...

    def start(self, *arrays: Array) -> None:
        """Begin computing ``arrays`` without waiting for them (``mx.async_eval``); a no-op where
        arrays are computed when made. The decoding loop starts a step before it reads the last tokens."""
        ...

    def retry_place(self, error: Exception) -> Any:
        """A context manager in which an op that raised ``error`` can run after all, or None: MLX's GPUs (Metal,
        CUDA) have no float64, so such an op runs again on the CPU stream."""
        ...


def pack_quantized(codes: np.ndarray, bits: int) -> np.ndarray:
    """Host helper: unsigned codes (..., K) packed into uint32 words, low bits first (MLX's layout).

    Element ``k`` sits at bits ``[bits*k % 32, bits*(k+1))`` of word ``bits*k // 32``, so a byte
    stream packed low-first (ONNX MatMulNBits) read as little-endian uint32 is this layout.
    """
    per = 32 // bits
    c = np.asarray(codes).astype(np.uint32).reshape(*np.shape(codes)[:-1], -1, per)
    return np.bitwise_or.reduce(c << (bits * np.arange(per, dtype=np.uint32)), axis=-1)


def unpack_quantized(w: np.ndarray, bits: int) -> np.ndarray:
    """The codes (..., K) of ``pack_quantized`` words (..., K*bits/32), as uint8."""
    shifts = bits * np.arange(32 // bits, dtype=np.uint32)
    codes = (np.asarray(w, dtype=np.uint32)[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    return codes.reshape(*np.shape(w)[:-1], -1).astype(np.uint8)


def transposed(w: np.ndarray, rows: int = 32, columns: int = 4096) -> np.ndarray:
    """Host helper: a C-contiguous copy of the 2-D ``w.T``, made a tile of ``rows`` x ``columns`` of ``w`` at a
    time, so each tile is read and written in cache (``matmul_weight``'s layout at load); ``w.T`` itself, no copy,
    where it is C-contiguous already (``w`` the transpose of a weight held (N, K), as MatMulNBits dequantizes it).

    numpy's own transposing copy walks one side with a stride of a whole row: a (1024, 3072) fp32 weight
    took 22 ms, torch's 6 ms, these tiles 2.3 ms here.

    >>> w = np.arange(12, dtype=np.float32).reshape(3, 4)
    >>> bool((transposed(w, rows=2, columns=3) == w.T).all()), transposed(w).flags.c_contiguous
    (True, True)
    """
    if w.T.flags.c_contiguous:
        return w.T
    k, n = w.shape
    out = np.empty((n, k), w.dtype)
    for j in range(0, n, columns):
        for i in range(0, k, rows):
            out[j:j + columns, i:i + rows] = w[i:i + rows, j:j + columns].T
    return out
