"""The op registry: ``(domain, op_type) -> {since_version: OpSpec}``.

Ops are plain functions ``fn(B, *inputs, **attributes)`` registered with ``@register``. Only the
versions where the ONNX spec changed are registered; a model at opset ``v`` uses the largest
``since_version <= v``. Registering the same key twice is an import-time error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_DOMAIN = ""
MS_DOMAIN = "com.microsoft"


def normalize_domain(domain: str) -> str:
    return DEFAULT_DOMAIN if domain in ("", "ai.onnx") else domain


@dataclass(frozen=True)
class OpSpec:
    """How to run one version of one op.

    static_inputs: indices of inputs that must be host values (shapes, axes, sizes); the planner
        hands them to the op as numpy arrays.
    host: the op always runs on the host (its output shape depends on values, or it works on
        strings); a device input then forces eager execution. It may also be a test
        ``host(backend, attrs) -> bool`` (a Cast whose target dtype the backend lacks).
    context: the op takes a ``ctx`` keyword (a ``NodeContext``: output count, subgraph runner).
    shape_only: the op reads only the shapes of its inputs, so its result is a host constant.
    index_bounds: ``index_bounds(B, args, attrs) -> [IndexBound, ...]``: the inputs that index into
        another (Gather's indices) and the range their values must lie in, for the runner's checks.
    replay_as: what the op is once its output's shape and dtype are known (a signature fixes them), for an
        eager replay (``replay.py``): ``"reshape"`` (the first input's elements in the output's shape),
        ``"broadcast_to"`` (the first input broadcast to it), ``"astype"`` (the first input in its dtype) or
        ``"identity"`` (the first input itself).
    specialise: ``specialise(B, *inputs, **attributes) -> kernel | None``: the op decided once for a signature, from
        its inputs' shapes and dtypes and its static inputs (never a device input's values): a function of the
        same inputs that an eager replay calls instead of the op (a fused op's checks cost more than its kernel
        at decoding sizes); None where the general code must run. A ``context`` op's also takes its ``ctx``.
    """

    domain: str
    op_type: str
    since_version: int
    fn: Callable[..., Any]
    static_inputs: tuple[int, ...] = ()
    host: bool | Callable[[Any, dict[str, Any]], bool] = False
    context: bool = False
    shape_only: bool = False
    index_bounds: Callable[[Any, list[Any], dict[str, Any]], list[IndexBound]] | None = None
    replay_as: str | None = None
    specialise: Callable[..., Callable[..., Any] | None] | None = None


@dataclass(frozen=True)
class IndexBound:
    """Input ``input`` of an op holds indices that must satisfy ``low <= value < high``.

    ``low``/``high`` are ints, or tuples with one entry per element of the index's last axis
    (GatherND's index tuples); values equal to ``ignore`` (a loss's ``ignore_index``) are exempt.
    ``what`` names the range in errors ("axis 0 of the data").
    """

    input: int
    low: int | tuple[int, ...]
    high: int | tuple[int, ...]
    what: str = ""
    ignore: int | None = None


_REGISTRY: dict[tuple[str, str], dict[int, OpSpec]] = {}


def register(
    op_type: str,
    since_version: int,
    domain: str = DEFAULT_DOMAIN,
    *,
    static_inputs: tuple[int, ...] = (),
    host: bool | Callable[[Any, dict[str, Any]], bool] = False,
    context: bool = False,
    shape_only: bool = False,
    index_bounds: Callable[[Any, list[Any], dict[str, Any]], list[IndexBound]] | None = None,
    replay_as: str | None = None,
    specialise: Callable[..., Callable[..., Any] | None] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn`` as ``domain::op_type`` from ``since_version`` on."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        add(OpSpec(normalize_domain(domain), op_type, since_version, fn, tuple(static_inputs), host, context, shape_only,
                   index_bounds, replay_as, specialise))
        return fn

    return wrap


def add(spec: OpSpec) -> None:
    versions = _REGISTRY.setdefault((spec.domain, spec.op_type), {})
    if spec.since_version in versions:
        raise RuntimeError(f"{spec.domain or 'ai.onnx'}::{spec.op_type} version {spec.since_version} registered twice")
    versions[spec.since_version] = spec


def resolve(domain: str, op_type: str, opset: int) -> OpSpec | None:
    """The spec for ``op_type`` at model opset ``opset``, or None when none applies."""
    versions = _REGISTRY.get((normalize_domain(domain), op_type))
    if not versions:
        return None
    usable = [v for v in versions if v <= opset]
    return versions[max(usable)] if usable else None


def registered_versions() -> dict[tuple[str, str], list[int]]:
    """Every registered op and the versions it has."""
    return {key: sorted(versions) for key, versions in _REGISTRY.items()}
