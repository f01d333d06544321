"""Images in: one input (a PIL image, a path, a URL, a ``data:`` URI, encoded bytes or a uint8 array) -> RGB.

>>> import numpy as np
>>> image = load_image(np.zeros((2, 3), np.uint8))          # a gray array, as a grayscale image
>>> image.mode, image.size
('RGB', (3, 2))
>>> load_image(np.zeros((2, 3), np.float32), "image-classification", 4)
Traceback (most recent call last):
TypeError: image-classification: input 4: an image array must be uint8 (0-255), got float32

:func:`load_image` does what transformers' ``load_image`` does with what it accepts (a PIL image, a
path, an http(s) URL, base64): it applies the EXIF orientation (``ImageOps.exif_transpose``) and converts
to RGB (``Image.convert("RGB")``: alpha dropped, palette and grayscale expanded, 16-bit clipped to 255).
It also takes encoded bytes and uint8 arrays, and it decodes the whole image at once, so a truncated
file is an error here rather than gray pixels later. Every bad input is an error that names the task and
the input: a missing file (FileNotFoundError), something Pillow cannot decode, an empty image, an image
over Pillow's decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``) (ValueError), an array of another
dtype or a value of another type (TypeError).
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
import urllib.request
import warnings
from typing import Any

import numpy as np
from PIL import Image, ImageOps

__all__ = ["IMAGE_TYPES", "load_image"]

#: the types of one image input (a list of them is a batch)
IMAGE_TYPES: tuple[type, ...] = (Image.Image, str, os.PathLike, bytes, bytearray, np.ndarray)

_CHANNELS = (1, 3, 4)  # of an (H, W, C) uint8 array: L, RGB, RGBA
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")
_TIMEOUT = 10.0  # seconds to wait for an http(s) image


def load_image(item: Any, task: str = "", index: int = 0, timeout: float = _TIMEOUT) -> Image.Image:
    """``item`` as a decoded RGB PIL image (EXIF orientation applied), or an error naming ``task`` and input
    ``index``: ``load_image("cat.jpg")``, ``load_image(b"\\x89PNG...")``, ``load_image(array)``."""
    where = f"{task}: input {index}" if task else f"input {index}"
    if isinstance(item, np.ndarray):
        image = _from_array(item, where)
    elif isinstance(item, Image.Image):
        image = item
    elif isinstance(item, (bytes, bytearray, memoryview)):
        image = _open(io.BytesIO(bytes(item)), where, "the image bytes")
    elif isinstance(item, (str, os.PathLike)):
        image = _from_source(item, where, timeout)
    else:
        raise TypeError(
            f"{where}: an image must be a PIL image, a path, an http(s) URL, a data:image URI, encoded bytes "
            f"or a uint8 array, got {type(item).__name__}"
        )
    return _to_rgb(image, where)


def _from_source(source: str | os.PathLike, where: str, timeout: float) -> Image.Image:
    """A path, an http(s) URL or base64 (a ``data:image/...;base64,`` URI, or bare as transformers takes it)."""
    if not isinstance(source, str):
        path = os.fspath(source)
        return _open_path(path.decode() if isinstance(path, bytes) else path, where)
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=timeout) as response:
                data = response.read()
        except (OSError, ValueError) as error:  # URLError, HTTPError and timeouts are OSErrors
            raise OSError(f"{where}: could not download {source!r}: {error}") from error
        return _open(io.BytesIO(data), where, f"the image at {source!r}")
    if source.startswith("data:"):
        header, _, payload = source.partition(",")
        if not header.startswith("data:image/") or not header.endswith(";base64"):
            raise ValueError(f"{where}: a data URI must be data:image/<type>;base64,<data>, got {header[:40]!r}")
        return _open(io.BytesIO(_base64(payload, where)), where, "the data URI's image")
    if os.path.exists(source):
        return _open_path(source, where)
    # transformers reads a str that is neither a URL nor a file as base64; a short one is a missing path
    if len(source) >= 64 and _BASE64.fullmatch(source):
        return _open(io.BytesIO(_base64(source, where)), where, "the base64 image")
    raise FileNotFoundError(f"{where}: no such image file: {source!r}")


def _open_path(path: str, where: str) -> Image.Image:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{where}: no such image file: {path!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{where}: {path!r} is a folder, not an image file")
    return _open(path, where, repr(path))


def _base64(payload: str, where: str) -> bytes:
    try:
        return base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"{where}: the image is not valid base64: {error}") from error


def _open(source: str | io.BytesIO, where: str, what: str) -> Image.Image:
    """Decode a whole image file (not lazily, so a truncated one fails here), checking its pixel count first."""
    try:
        with warnings.catch_warnings():  # over the limit is an error below, not Pillow's warning
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(source)
    except Image.DecompressionBombError as error:
        raise ValueError(f"{where}: {what} is over Pillow's decompression-bomb limit "
                         f"(PIL.Image.MAX_IMAGE_PIXELS = {Image.MAX_IMAGE_PIXELS}): {error}") from error
    except Image.UnidentifiedImageError as error:
        raise ValueError(f"{where}: {what} is not an image Pillow can read") from error
    except MemoryError:
        raise
    except Exception as error:  # noqa: BLE001 - decoders raise OSError, SyntaxError, struct.error, ...
        raise ValueError(f"{where}: {what} cannot be decoded ({type(error).__name__}: {error})") from error
    _check_size(image, where)
    try:
        image.load()
    except MemoryError:
        raise
    except Exception as error:  # noqa: BLE001 - as above; a truncated file is an OSError
        raise ValueError(f"{where}: {what} cannot be decoded ({type(error).__name__}: {error})") from error
    return image


def _check_size(image: Image.Image, where: str) -> None:
    width, height = image.size
    if width <= 0 or height <= 0:
        raise ValueError(f"{where}: the image is empty ({width}x{height} pixels)")
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        raise ValueError(
            f"{where}: the image has {width * height} pixels ({width}x{height}), over Pillow's "
            f"decompression-bomb limit PIL.Image.MAX_IMAGE_PIXELS = {limit}"
        )


def _from_array(array: np.ndarray, where: str) -> Image.Image:
    if array.dtype != np.uint8:
        raise TypeError(f"{where}: an image array must be uint8 (0-255), got {array.dtype}")
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[-1] in _CHANNELS)):
        raise ValueError(
            f"{where}: an image array must be (height, width) or (height, width, 1|3|4), got shape {array.shape}"
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{where}: the image array is empty (shape {array.shape})")
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    return Image.fromarray(np.ascontiguousarray(array))  # L, RGB or RGBA from the shape


def _to_rgb(image: Image.Image, where: str) -> Image.Image:
    """transformers' last two steps (exif_transpose, convert("RGB")), on a fully decoded image."""
    _check_size(image, where)
    try:
        image = ImageOps.exif_transpose(image)
        return image.convert("RGB")  # loads the pixels: a lazily opened, truncated file fails here
    except MemoryError:
        raise
    except Exception as error:  # noqa: BLE001 - see _open
        raise ValueError(f"{where}: the image cannot be decoded ({type(error).__name__}: {error})") from error
