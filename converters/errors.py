"""Errors the converter raises. Each names the file, node, op or input it is about."""

from __future__ import annotations


class ConverterError(Exception):
    """Base class of every converter error."""


class ModelLoadError(ConverterError):
    """A file is missing, truncated, corrupt, or not a valid ONNX model."""


class UnsupportedOpError(ConverterError):
    """The model uses ops (domain, op_type, opset) that no converter op implements."""

    def __init__(self, missing: dict[tuple[str, str, int], str], registered: dict[tuple[str, str], list[int]]):
        self.missing = missing
        lines = []
        for (domain, op_type, opset), node in sorted(missing.items()):
            have = registered.get((domain, op_type))
            known = f"; registered versions: {have}" if have else ""
            lines.append(f"  {domain or 'ai.onnx'}::{op_type} (opset {opset}), first at node {node!r}{known}")
        super().__init__(f"{len(missing)} unsupported op(s):\n" + "\n".join(lines))


class InputError(ConverterError, TypeError):
    """A feed is missing, unknown, or has the wrong dtype or shape."""


class DynamicShapeError(ConverterError):
    """A value the op needs on the host (a shape, an axis) is only known on the device."""


class OpError(ConverterError):
    """An op failed; the message names the node, the op and its input shapes."""


class IndexOutOfRangeError(OpError, IndexError):
    """An index input of an op (Gather's indices, a position id) holds a value outside the range of the
    axis it indexes; the message names the node, the input, the bad value and the range."""
