"""Reliability rows: files. A repository file that cannot be read is a ``MalformedFileError`` (a
``ValueError``) whose message names the file: JSON that does not parse or is not an object (config.json,
tokenizer_config.json, generation_config.json, special_tokens_map.json, ...), a tokenizer.json that the
tokenizers library rejects; a bad value in generation_config.json is a ``ValueError`` naming the file and
the option. The CLI prints such an error on one line and exits with 2, without a traceback."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import transmuter_mlx as tm
from tests.reliability import Exits, Raises, Returns, case  # noqa: F401
from transmuter_mlx.hub import MalformedFileError

NOT_JSON = '{"model_type": "gpt2", '  # cut short, as a download that stopped


def copy_fixture(fixture: str, files: tuple[tuple[str, str | bytes], ...] = (),
                 module: str = "generation_models") -> Path:
    """A temporary copy of a fixture folder (the files of its subfolders linked, not copied) with ``files``
    (name, text or bytes) written over the originals: ``copy_fixture("gpt2", (("config.json", "{"),))``."""
    return _copy(fixture, files, module)


@functools.cache
def _copy(fixture: str, files: tuple[tuple[str, str | bytes], ...], module: str) -> Path:
    import importlib

    source = importlib.import_module(f"tests.fixtures.{module}").build(fixture)
    target = Path(tempfile.mkdtemp(prefix=f"reliability-{fixture}-"))
    atexit.register(shutil.rmtree, target, True)  # the copies live as long as the test process
    for item in source.rglob("*"):
        if item.is_file():
            (target / item.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            if item.parent == source:
                shutil.copy(item, target / item.name)
            else:  # ONNX files: large, never written over
                (target / item.relative_to(source)).symlink_to(item)
    for name, text in files:
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        (target / name).write_bytes(data)
    return target


def patched(fixture: str, name: str, module: str = "generation_models", **values: Any) -> Path:
    """A copy of a fixture whose JSON file ``name`` has ``values`` set."""
    import importlib

    source = importlib.import_module(f"tests.fixtures.{module}").build(fixture)
    data = {**json.loads((source / name).read_text(encoding="utf-8")), **values}
    return copy_fixture(fixture, ((name, json.dumps(data)),), module)


def _generation(folder: Path, backend: str) -> Any:
    return tm.text.generation(str(folder), backend=backend)


def _broken(name: str, text: str | bytes = NOT_JSON) -> Path:
    return copy_fixture("gpt2", ((name, text),))


for _name in ("config.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"):
    case("files", f"{_name} that is not JSON",
         Raises(MalformedFileError, rf"{_name.replace('.', '[.]')} is not valid JSON: Expecting"))(
        lambda b, _name=_name: _generation(_broken(_name), b))

case("files", "config.json that is a list, not an object",
     Raises(MalformedFileError, r"config[.]json is not a JSON object \(it holds a list\)"))(
    lambda b: _generation(_broken("config.json", "[1, 2]"), b))
case("files", "tokenizer.json that is not JSON",
     Raises(MalformedFileError, r"tokenizer[.]json is not a tokenizer[.]json that the tokenizers library can read"))(
    lambda b: _generation(_broken("tokenizer.json"), b))
case("files", "tokenizer.json that is JSON but not a tokenizer",
     Raises(MalformedFileError, r"tokenizer[.]json is not a tokenizer[.]json .*: Model missing"))(
    lambda b: _generation(_broken("tokenizer.json", "{}"), b))
case("files", "tokenizer_config.json that is not UTF-8",
     Raises(MalformedFileError, r"tokenizer_config[.]json is not valid JSON: 'utf-8' codec"))(
    lambda b: _generation(_broken("tokenizer_config.json", b'{"x": "\xff"}'), b))
case("files", "generation_config.json with a bad value",
     Raises(ValueError, r"generation_config[.]json of folder '.*': top_p must be in \[0, 1\], got 2[.]0"))(
    lambda b: _generation(patched("gpt2", "generation_config.json", top_p=2.0), b))
case("files", "a seq2seq repository's broken config.json",
     Raises(MalformedFileError, r"config[.]json is not valid JSON"))(
    lambda b: tm.text.text_to_text(str(copy_fixture("t5", (("config.json", NOT_JSON),))), backend=b))
case("files", "a text task's broken tokenizer_config.json",
     Raises(MalformedFileError, r"tokenizer_config[.]json is not valid JSON"))(
    lambda b: tm.pipeline("question-answering", str(copy_fixture("bert-qa", (("tokenizer_config.json", NOT_JSON),),
                                                                 "text_models")), backend=b))

case("files", "the CLI on a broken config.json: one line, exit 2, no traceback",
     Exits("""
        import sys
        from tests.reliability.files import copy_fixture, NOT_JSON
        from transmuter_mlx.__main__ import main
        folder = copy_fixture("gpt2", (("config.json", NOT_JSON),))
        sys.exit(main(["text-generation", str(folder), "Hello", "--backend", BACKEND]))
     """, 2, r"(?s)\A(?!.*Traceback).*error: .*config[.]json is not valid JSON"))(None)
case("files", "the CLI on a broken tokenizer.json: one line, exit 2, no traceback",
     Exits("""
        import sys
        from tests.reliability.files import copy_fixture, NOT_JSON
        from transmuter_mlx.__main__ import main
        folder = copy_fixture("gpt2", (("tokenizer.json", NOT_JSON),))
        sys.exit(main(["text-generation", str(folder), "Hello", "--backend", BACKEND]))
     """, 2, r"(?s)\A(?!.*Traceback).*error: .*tokenizer[.]json is not a tokenizer[.]json"))(None)


@case("files", "external data linked out of the model's folder (to /etc/passwd)",
      Raises(tm.ModelLoadError, r"model\.onnx_data .* is a link to /etc/passwd, outside the model's folder"))
def _(backend):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder = Path(tempfile.mkdtemp(prefix="reliability-link-"))
    atexit.register(shutil.rmtree, folder, True)
    weight = numpy_helper.from_array(np.zeros(64, np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, str(folder / "model.onnx"), save_as_external_data=True, location="model.onnx_data",
                    size_threshold=0)
    (folder / "model.onnx_data").unlink()
    (folder / "model.onnx_data").symlink_to("/etc/passwd")
    tm.load(folder / "model.onnx", backend=backend)


case("files", "the CLI on a truncated model.onnx: one line naming it, exit 2, no traceback",
     Exits("""
        import sys
        from tests.reliability.files import copy_fixture
        from transmuter_mlx.__main__ import main
        folder = copy_fixture("gpt2")
        onnx = folder / "onnx" / "model.onnx"
        data = onnx.read_bytes()
        onnx.unlink()  # a link to the fixture's own file: replaced, never written through
        onnx.write_bytes(data[: len(data) // 3])
        sys.exit(main(["text-generation", str(folder), "Hello", "--backend", BACKEND]))
     """, 2, r"(?s)\A(?!.*Traceback).*error: .*model[.]onnx: not a valid ONNX model"))(None)
