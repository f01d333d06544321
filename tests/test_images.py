"""transmuter_mlx.images.load_image: every input kind gives transformers' pixels; every bad input a clear error."""

from __future__ import annotations

import base64
import io
import urllib.error
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.fixtures.images import NAMES, image, image_path
from transmuter_mlx.images import IMAGE_TYPES, load_image

transformers_image_utils = pytest.importorskip("transformers.image_utils")
SMALL = [n for n in NAMES if n != "large_4000x3000"]


def reference(item) -> np.ndarray:
    """transformers' load_image of ``item`` as an array."""
    return np.asarray(transformers_image_utils.load_image(item))


def pixels(item, task: str = "t", index: int = 0) -> np.ndarray:
    loaded = load_image(item, task, index)
    assert loaded.mode == "RGB"
    return np.asarray(loaded)


@pytest.mark.parametrize("name", SMALL)
def test_pil_path_and_bytes_match_transformers(name):
    path = image_path(name)
    want = reference(str(path))
    assert want.shape[-1] == 3
    np.testing.assert_array_equal(pixels(image(name)), want)  # a lazily opened PIL image
    np.testing.assert_array_equal(pixels(str(path)), want)
    np.testing.assert_array_equal(pixels(path), want)  # os.PathLike
    np.testing.assert_array_equal(pixels(path.read_bytes()), want)
    np.testing.assert_array_equal(pixels(bytearray(path.read_bytes())), want)


def test_large_image_matches_transformers():
    path = image_path("large_4000x3000")
    np.testing.assert_array_equal(pixels(str(path)), reference(str(path)))


def test_exif_orientation_is_applied():
    loaded = load_image(image_path("exif_rotated"))
    assert loaded.size == (80, 120)  # stored 120x80, orientation 6
    np.testing.assert_array_equal(np.asarray(loaded), reference(str(image_path("exif_rotated"))))


@pytest.mark.parametrize("name", ["gray", "rgba", "palette", "gray16"])
def test_modes_convert_as_transformers(name):
    assert image(name).mode != "RGB"
    np.testing.assert_array_equal(pixels(image(name)), reference(image(name)))


def test_base64_and_data_uri():
    data = base64.b64encode(image_path("odd_333x217").read_bytes()).decode()
    want = reference(str(image_path("odd_333x217")))
    np.testing.assert_array_equal(pixels(f"data:image/png;base64,{data}"), want)
    np.testing.assert_array_equal(pixels(data), want)  # bare base64, as transformers takes it
    np.testing.assert_array_equal(reference(f"data:image/png;base64,{data}"), want)


@pytest.mark.parametrize("shape", [(7, 5, 3), (7, 5, 4), (7, 5, 1), (7, 5)])
def test_uint8_arrays(shape):
    array = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    mode_array = array[..., 0] if array.ndim == 3 and array.shape[-1] == 1 else array
    want = reference(Image.fromarray(mode_array))  # what transformers makes of the same image
    got = pixels(array)
    assert got.shape == (7, 5, 3)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(pixels(np.asfortranarray(array)), want)  # any memory layout


def test_url_is_downloaded(monkeypatch):
    data = image_path("coffee").read_bytes()
    seen = {}

    def urlopen(url, timeout):
        seen.update(url=url, timeout=timeout)
        return io.BytesIO(data)

    monkeypatch.setattr("urllib.request.urlopen", urlopen)
    got = pixels("https://example.com/coffee.png")
    np.testing.assert_array_equal(got, reference(str(image_path("coffee"))))
    assert seen == {"url": "https://example.com/coffee.png", "timeout": 10.0}


def test_url_error_names_the_url(monkeypatch):
    def urlopen(url, timeout):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr("urllib.request.urlopen", urlopen)
    with pytest.raises(OSError, match=r"task: input 2: could not download 'http://x.test/a.png'.*no network"):
        load_image("http://x.test/a.png", "task", 2)


def test_image_types():
    assert all(isinstance(x, IMAGE_TYPES) for x in (image("gray"), "a.png", Path("a.png"), b"", np.zeros(1)))


# ------------------------------------------------------------------------------------------ bad inputs
def test_missing_path(tmp_path):
    missing = tmp_path / "no" / "such.png"
    with pytest.raises(FileNotFoundError, match=rf"image-classification: input 3: no such image file: '{missing}'"):
        load_image(str(missing), "image-classification", 3)
    with pytest.raises(FileNotFoundError, match="input 0: no such image file"):
        load_image(missing)
    with pytest.raises(FileNotFoundError, match="'cat.jpg'"):
        load_image("cat.jpg")


def test_folder(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a folder"):
        load_image(str(tmp_path), "t", 1)


def test_not_an_image(tmp_path):
    text = tmp_path / "notes.png"
    text.write_text("not an image at all")
    with pytest.raises(ValueError, match=r"t: input 1: '.*notes.png' is not an image Pillow can read"):
        load_image(str(text), "t", 1)
    with pytest.raises(ValueError, match="the image bytes is not an image"):
        load_image(b"\x00\x01garbage", "t", 1)
    with pytest.raises(ValueError, match="not valid base64"):
        load_image("data:image/png;base64,@@@not-base64@@@", "t", 1)
    with pytest.raises(ValueError, match="data:image/<type>;base64"):
        load_image("data:text/plain,hello", "t", 1)


def truncated_jpeg() -> bytes:
    out = io.BytesIO()
    Image.open(image_path("chelsea")).convert("RGB").save(out, format="JPEG", quality=95)
    data = out.getvalue()
    return data[: len(data) // 2]


def test_truncated_jpeg_is_an_error(tmp_path):
    data = truncated_jpeg()
    with pytest.raises(ValueError, match=r"t: input 5: the image bytes cannot be decoded.*truncated"):
        load_image(data, "t", 5)
    path = tmp_path / "cut.jpg"
    path.write_bytes(data)
    with pytest.raises(ValueError, match="cannot be decoded.*truncated"):
        load_image(str(path), "t", 5)
    with pytest.raises(ValueError, match=r"t: input 5: the image cannot be decoded.*truncated"):
        load_image(Image.open(path), "t", 5)  # lazily opened by the caller: decoded in full here


def test_empty_images():
    with pytest.raises(ValueError, match=r"t: input 0: the image is empty \(0x5 pixels\)"):
        load_image(Image.new("RGB", (0, 5)), "t", 0)
    with pytest.raises(ValueError, match=r"the image array is empty \(shape \(0, 4, 3\)\)"):
        load_image(np.zeros((0, 4, 3), np.uint8), "t", 0)


def test_decompression_bomb(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    path = str(image_path("odd_333x217"))  # 72,261 pixels: over twice the limit, Pillow's own error
    with pytest.raises(ValueError, match=r"t: input 1: .*decompression-bomb limit.*MAX_IMAGE_PIXELS = 10000"):
        load_image(path, "t", 1)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 50_000)  # over the limit only: Pillow warns, we refuse
    with pytest.raises(ValueError, match=r"72261 pixels \(333x217\).*PIL.Image.MAX_IMAGE_PIXELS = 50000"):
        load_image(path, "t", 1)
    with pytest.raises(ValueError, match="72261 pixels"):
        load_image(Image.new("RGB", (333, 217)), "t", 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint16, np.bool_])
def test_array_dtype(dtype):
    with pytest.raises(TypeError, match=rf"t: input 2: an image array must be uint8 \(0-255\), got {np.dtype(dtype)}"):
        load_image(np.zeros((4, 4, 3), dtype), "t", 2)


@pytest.mark.parametrize("shape", [(4, 4, 5), (4, 4, 2), (4,), (2, 4, 4, 3)])
def test_array_shape(shape):
    with pytest.raises(ValueError, match=rf"got shape \({shape[0]},"):
        load_image(np.zeros(shape, np.uint8), "t", 0)


@pytest.mark.parametrize("value", [None, 3, 2.5, [b"x"], {"image": "a.png"}])
def test_other_types(value):
    with pytest.raises(TypeError, match=rf"t: input 7: an image must be .* got {type(value).__name__}"):
        load_image(value, "t", 7)
