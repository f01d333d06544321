"""Images and audio in JSON: base64 (or a ``data:`` URL) in, base64 PNG / WAV out; other values as JSON.

>>> import numpy as np
>>> to_json({"scores": np.array([0.5, 0.25], np.float32), "n": np.int64(2)})
{'scores': [0.5, 0.25], 'n': 2}

A request never names a file or a URL for the server to read: a string given where an image or audio
goes must be base64 (the server's own disk and network stay out of reach of its clients).
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

import numpy as np

from .errors import BadRequest

__all__ = ["decode_base64", "media_input", "to_json"]


def decode_base64(value: str, where: str) -> bytes:
    """The bytes of a base64 string or a ``data:...;base64,`` URL."""
    if value.startswith("data:"):
        head, sep, value = value.partition(",")
        if not sep or not head.endswith(";base64"):
            raise BadRequest(f"{where}: a data URL must be base64 (data:<type>;base64,...)", param=where)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: expected base64 data (or a data: URL), not a file name or URL: the server "
                         "reads no files or URLs for its clients", param=where) from None


def media_input(value: Any, modality: str, where: str) -> Any:
    """One input of an image or audio task from JSON: base64 -> bytes (the pipeline decodes the file);
    audio may also be ``{"raw": [samples], "sampling_rate": n}``; a dict keeps its other keys (an image with
    a ``text`` prompt) with its ``image``/``audio`` field decoded."""
    if isinstance(value, str):
        return decode_base64(value, where)
    if isinstance(value, dict):
        if modality == "audio" and "raw" in value:
            raw, rate = value.get("raw"), value.get("sampling_rate")
            if not isinstance(raw, list) or not all(isinstance(x, int | float) for x in raw):
                raise BadRequest(f"{where}.raw must be an array of numbers", param=f"{where}.raw")
            if isinstance(rate, bool) or not isinstance(rate, int):
                raise BadRequest(f"{where}.sampling_rate must be an integer", param=f"{where}.sampling_rate")
            return {"raw": np.asarray(raw, np.float32), "sampling_rate": rate}
        key = "image" if modality == "image" else "audio"
        if isinstance(value.get(key), str):
            return {**value, key: decode_base64(value[key], f"{where}.{key}")}
        return value
    raise BadRequest(f"{where}: an {modality} input is a base64 string or an object, not {type(value).__name__}",
                     param=where)


def _png(image: Any) -> dict[str, str]:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return {"type": "image/png", "base64": base64.b64encode(buffer.getvalue()).decode()}


def _wav(samples: np.ndarray, rate: int) -> dict[str, str]:
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, np.asarray(samples, np.float32), int(rate), format="WAV", subtype="FLOAT")
    return {"type": "audio/wav", "base64": base64.b64encode(buffer.getvalue()).decode()}


def to_json(value: Any) -> Any:
    """A pipeline result as JSON values: arrays as lists, images as base64 PNG, speech as base64 WAV."""
    if isinstance(value, dict) and isinstance(value.get("audio"), np.ndarray) and "sampling_rate" in value:
        return {**{k: to_json(v) for k, v in value.items() if k != "audio"},
                "audio": _wav(value["audio"], value["sampling_rate"])}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "save") and hasattr(value, "mode") and hasattr(value, "size"):  # a PIL image
        return _png(value)
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # numpy or mx.array
        return np.asarray(value).tolist()
    return value
