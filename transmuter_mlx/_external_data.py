"""Which external data files an ONNX graph references (hub.py fetches them beside the graph)."""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

import onnx


def external_data_locations(onnx_file: str | Path) -> list[str]:
    """File names (relative to the graph's folder) of the external data a graph references.

    >>> from transmuter_mlx.hub import open_repo
    >>> external_data_locations(open_repo("Xenova/all-MiniLM-L6-v2").onnx_path())   # weights inside the graph
    []

    A graph saved with its weights beside it (``model.onnx`` + ``model.onnx_data``) gives ``['model.onnx_data']``.
    """
    path = Path(onnx_file)
    if path.stat().st_size == 0:
        return []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data.find(b"location") < 0:  # cheap pre-check: no external data entry can exist
            return []
    model = onnx.load_model(str(path), load_external_data=False)
    locations: list[str] = []
    for tensor in _all_tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location" and entry.value not in locations:
                    locations.append(entry.value)
    return locations


def _all_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for g in attr.graphs:
                yield from _all_tensors(g)
