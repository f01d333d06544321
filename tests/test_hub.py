"""transmuter_mlx.hub on folders and on repos laid out as the huggingface_hub cache lays them out.

The cache fixture is ``<cache>/models--org--name/{blobs,refs,snapshots}``: blobs named by hash,
snapshot entries as relative symlinks to them (as huggingface_hub writes them on Linux), and
``refs/main`` / ``refs/dev`` holding commit hashes.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import huggingface_hub
import numpy as np
import onnx
import pytest
from huggingface_hub import constants as hf_constants
from onnx import TensorProto, helper, numpy_helper

import transmuter_mlx as tm
from transmuter_mlx.hub import (
    HubError,
    RepoFileNotFoundError,
    RepoNotFoundError,
    VariantNotFoundError,
    external_data_locations,
    open_repo,
    read_model_card,
)

MAIN = "a" * 40
DEV = "b" * 40
CARD = "---\nlicense: apache-2.0\nbase_model: BAAI/bge-small-en-v1.5\ntags:\n- onnx\n---\n# A model\n"


def _tiny_onnx(path: Path, *, external: str | None = None) -> None:
    """An Add of an input and a 4x4 initializer; with ``external``, the weight lives in that file."""
    weight = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.parent.mkdir(parents=True, exist_ok=True)
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, location=external, size_threshold=0)
    else:
        onnx.save_model(model, str(path))


def _repo_files(tmp: Path, config: dict, onnx_names: list[str]) -> Path:
    src = tmp / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(config))
    (src / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    (src / "README.md").write_text(CARD)
    for name in onnx_names:
        _tiny_onnx(src / "onnx" / name)
    _tiny_onnx(src / "onnx" / "big.onnx", external="big.onnx_data")
    return src


def _lay_out_cache(src: Path, cache: Path, repo_id: str, commit: str, ref: str) -> None:
    """Copy ``src`` into the hub cache: blobs by sha256, snapshot symlinks, refs/<ref>."""
    repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / ref).write_text(commit)
    for file in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = file.relative_to(src)
        data = file.read_bytes()
        blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = repo_dir / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))


@pytest.fixture
def cache(tmp_path) -> Path:
    cache = tmp_path / "hub"
    main = _repo_files(tmp_path, {"model_type": "bert"}, ["model.onnx", "model_q4.onnx", "model_fp16.onnx"])
    _lay_out_cache(main, cache, "org/name", MAIN, "main")
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "config.json").write_text(json.dumps({"model_type": "bert", "dev": True}))
    _tiny_onnx(dev / "onnx" / "model_quantized.onnx")
    _lay_out_cache(dev, cache, "org/name", DEV, "dev")
    return cache


@pytest.fixture
def no_network(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the hub was called although offline")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fail)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", fail)


def test_offline_cache_layout(cache, no_network):
    repo = open_repo("org/name", cache_dir=cache, offline=True)
    assert repo.repo_id == "org/name" and repo.revision == "main" and repo.offline
    assert repo.config == {"model_type": "bert"}
    assert repo.read_json("tokenizer_config.json") == {"model_max_length": 512}
    assert repo.read_json("generation_config.json") is None
    assert repo.exists("README.md") and not repo.exists("tokenizer.json")
    path = repo.path("config.json")
    assert path.is_file() and f"snapshots/{MAIN}" in path.as_posix()
    assert "onnx/model_q4.onnx" in repo.list_files() and "config.json" in repo.list_files()


def test_hf_hub_offline_env(cache, no_network, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    repo = open_repo(("hf", "org/name"), cache_dir=cache)
    assert repo.offline
    assert repo.onnx_path().name == "model.onnx"
    with pytest.raises(RepoNotFoundError, match="org/missing"):
        open_repo("org/missing", cache_dir=cache)


def test_offline_off_when_env_unset(cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    assert not open_repo("org/name", cache_dir=cache).offline


def test_revision_by_branch_and_commit(cache, no_network):
    dev = open_repo("org/name", revision="dev", cache_dir=cache, offline=True)
    assert dev.config["dev"] is True
    assert dev.onnx_path().name == "model_quantized.onnx"  # only variant present
    by_commit = open_repo("org/name", revision=MAIN, cache_dir=cache, offline=True)
    assert "dev" not in by_commit.config
    assert by_commit.onnx_variants() == ["fp32", "fp16", "q4"]
    with pytest.raises(RepoNotFoundError, match="nope"):
        open_repo("org/name", revision="nope", cache_dir=cache, offline=True)


def test_missing_file_error_names_everything(cache):
    repo = open_repo("org/name", revision="dev", cache_dir=cache, offline=True)
    with pytest.raises(RepoFileNotFoundError) as err:
        repo.path("tokenizer.json")
    text = str(err.value)
    for part in ("tokenizer.json", "org/name", "'dev'", str(cache)):
        assert part in text
    assert isinstance(err.value, HubError) and isinstance(err.value, FileNotFoundError)


def test_missing_config_names_repo(tmp_path):
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(RepoFileNotFoundError, match=r"config.json.*folder"):
        _ = open_repo(tmp_path).config


def test_uncached_repo_offline(tmp_path):
    with pytest.raises(RepoNotFoundError) as err:
        open_repo("org/other", cache_dir=tmp_path, offline=True)
    assert "org/other" in str(err.value) and str(tmp_path) in str(err.value)
    assert isinstance(err.value, FileNotFoundError)


def _folder(tmp_path, names, config=None) -> Path:
    folder = tmp_path / "model"
    (folder / "onnx").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config or {"model_type": "bert"}))
    for name in names:
        (folder / "onnx" / name).write_bytes(b"")
    return folder


def test_variant_explicit(tmp_path):
    repo = open_repo(_folder(tmp_path, ["model.onnx", "model_q4.onnx", "model_quantized.onnx"]))
    assert repo.onnx_path(variant="q4").name == "model_q4.onnx"
    assert repo.onnx_path(variant="quantized").name == "model_quantized.onnx"
    assert repo.onnx_path(variant="Q8").name == "model_quantized.onnx"
    with pytest.raises(VariantNotFoundError, match=r"'fp16'.*present: fp32, q8, q4") as err:
        repo.onnx_path(variant="fp16")
    assert isinstance(err.value, FileNotFoundError)
    with pytest.raises(ValueError, match="unknown ONNX variant 'q3'"):
        repo.onnx_path(variant="q3")


@pytest.mark.parametrize(
    "dtype,expected",
    [("q4", "model_q4.onnx"), ({"model": "fp16"}, "model_fp16.onnx"), ({"other": "q4"}, "model.onnx")],
)
def test_variant_from_transformers_js_config(tmp_path, dtype, expected):
    config = {"model_type": "bert", "transformers.js_config": {"dtype": dtype}}
    repo = open_repo(_folder(tmp_path, ["model.onnx", "model_q4.onnx", "model_fp16.onnx"], config))
    assert repo.onnx_path().name == expected
    assert repo.onnx_path(variant="fp32").name == "model.onnx"  # the option comes first


def test_variant_dict_per_file_stem(tmp_path):
    names = [
        "encoder_model.onnx",
        "encoder_model_q4.onnx",
        "decoder_model_merged.onnx",
        "decoder_model_merged_q4.onnx",
    ]
    dtype = {"encoder_model": "q4", "decoder_model_merged": "fp32"}
    repo = open_repo(_folder(tmp_path, names, {"transformers.js_config": {"dtype": dtype}}))
    assert repo.onnx_path("encoder_model").name == "encoder_model_q4.onnx"
    assert repo.onnx_path("decoder_model_merged", task_default="q4").name == "decoder_model_merged.onnx"


def test_variant_task_default_then_fp32_then_others(tmp_path):
    repo = open_repo(_folder(tmp_path, ["model.onnx", "model_q4.onnx"]))
    assert repo.onnx_path(task_default="q4").name == "model_q4.onnx"
    assert repo.onnx_path(task_default="q4f16").name == "model.onnx"  # task default absent: fp32
    assert repo.onnx_path().name == "model.onnx"
    config = {"transformers.js_config": {"dtype": "bnb4"}}  # config names a file that is absent
    other = open_repo(_folder(tmp_path / "b", ["model_uint8.onnx", "model_int8.onnx"], config))
    assert other.onnx_path().name == "model_int8.onnx"  # first present, in VARIANTS order
    assert other.select_variant() == "int8"


def test_no_onnx_file_lists_what_is_there(tmp_path):
    repo = open_repo(_folder(tmp_path, ["encoder_model.onnx"]))
    with pytest.raises(RepoFileNotFoundError, match=r"onnx/model.onnx.*onnx/encoder_model.onnx"):
        repo.onnx_path()


def test_external_data_offline(cache, no_network):
    repo = open_repo("org/name", cache_dir=cache, offline=True)
    path = repo.onnx_path("big")
    assert external_data_locations(path) == ["big.onnx_data"]
    data = path.parent / "big.onnx_data"
    assert data.is_file() and np.frombuffer(data.read_bytes(), np.float32)[15] == 15
    assert external_data_locations(repo.onnx_path()) == []
    # the data file is missing from the cache: the error names it
    (cache / "models--org--name" / "snapshots" / MAIN / "onnx" / "big.onnx_data").unlink()
    with pytest.raises(RepoFileNotFoundError, match="onnx/big.onnx_data"):
        repo.onnx_path("big")


def test_external_data_links_stay_in_the_repository(cache, tmp_path, no_network):
    """The hub cache's links (snapshot -> blobs) are followed; a link that leaves the repository's cache
    folder, or a plain model folder, is refused with a ModelLoadError naming it (it read /etc/passwd)."""
    repo = open_repo("org/name", cache_dir=cache, offline=True)
    path = repo.onnx_path("big")
    model = tm.load(path, backend="numpy")
    x = np.ones((4, 4), np.float32)
    np.testing.assert_array_equal(model({"x": x})["y"], x + np.arange(16, dtype=np.float32).reshape(4, 4))
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(16, dtype=np.float32).tobytes())  # readable as the weight: only the link is wrong
    for folder in (path.parent, tmp_path / "plain"):
        folder.mkdir(exist_ok=True)
        model_file = folder / "big.onnx"
        if not model_file.exists():
            model_file.write_bytes(path.read_bytes())
        data = folder / "big.onnx_data"
        data.unlink(missing_ok=True)
        data.symlink_to(secret)
        with pytest.raises(tm.ModelLoadError, match=r"big\.onnx_data.*is a link to .*secret\.bin, outside the model's folder"):
            tm.load(model_file, backend="numpy")
    # a folder of links to a model kept elsewhere (both files link into one real folder) loads
    store, farm = tmp_path / "store", tmp_path / "farm"
    _tiny_onnx(store / "big.onnx", external="big.onnx_data")
    farm.mkdir()
    for name in ("big.onnx", "big.onnx_data"):
        (farm / name).symlink_to(store / name)
    np.testing.assert_array_equal(tm.load(farm / "big.onnx", backend="numpy")({"x": x})["y"], model({"x": x})["y"])


def test_lazy_download_fetches_only_the_chosen_variant(tmp_path, monkeypatch):
    src = _repo_files(tmp_path, {"model_type": "bert"}, ["model.onnx", "model_q4.onnx"])
    calls = []

    def download(repo_id, filename, *, revision=None, cache_dir=None, token=None):
        calls.append((repo_id, filename, revision))
        if not (src / filename).is_file():
            raise huggingface_hub.errors.EntryNotFoundError(f"{filename} not found")
        return str(src / filename)

    files = sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", lambda self, repo_id, revision=None: files)
    repo = open_repo("org/name", revision="v1", cache_dir=tmp_path / "empty", offline=False)
    assert calls == []  # opening fetches nothing
    assert repo.onnx_path("big").name == "big.onnx"
    assert [c[1] for c in calls if c[1].startswith("onnx/")] == ["onnx/big.onnx", "onnx/big.onnx_data"]
    assert all(c[2] == "v1" for c in calls)
    assert repo.exists("README.md") and not repo.exists("tokenizer.json")
    with pytest.raises(RepoFileNotFoundError, match="tokenizer.json"):
        repo.path("tokenizer.json")


def test_folder_sources(tmp_path):
    folder = _folder(tmp_path, ["model.onnx"])
    for source in (folder, str(folder)):
        repo = open_repo(source)
        assert repo.repo_id is None and repo.revision is None
        assert repo.path("config.json") == folder / "config.json"
        assert repo.list_files() == ["config.json", "onnx/model.onnx"]
    assert open_repo(repo) is repo
    with pytest.raises(RepoFileNotFoundError, match=r"'tokenizer.json' not found in folder"):
        repo.path("tokenizer.json")


def test_nonexistent_folder(tmp_path):
    for source in (tmp_path / "nope", str(tmp_path / "nope"), "./nope/"):
        with pytest.raises(RepoNotFoundError, match="nope"):
            open_repo(source)
    with pytest.raises(ValueError, match="hf"):
        open_repo(("gh", "org/name"))


def test_read_model_card(cache, tmp_path):
    card = read_model_card(open_repo("org/name", cache_dir=cache, offline=True))
    assert card["base_model"] == "BAAI/bge-small-en-v1.5" and card["tags"] == ["onnx"]
    folder = _folder(tmp_path, [])
    assert read_model_card(folder) == {}
    (folder / "README.md").write_text("# no front matter\n---\nx: 1\n---\n")
    assert read_model_card(folder) == {}
    (folder / "README.md").write_text("---\nbase_model:\n- a/b\n---\n")
    assert read_model_card(str(folder)) == {"base_model": ["a/b"]}
