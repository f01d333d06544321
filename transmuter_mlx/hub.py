"""Resolve a model repository (Hub repo id or local folder) to local files, and read its configs.

>>> from transmuter_mlx.hub import open_repo
>>> repo = open_repo("Xenova/all-MiniLM-L6-v2")
>>> repo.config["model_type"], repo.onnx_path(variant="q8")
('bert', PosixPath('.../onnx/model_quantized.onnx'))

Files of a Hub repo are downloaded lazily, one by one, through huggingface_hub (its cache, its
progress bars), only when asked for: a repo holds many ONNX variants and only the chosen one is
fetched, with the external data files its graph references.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import huggingface_hub
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors

from ._external_data import external_data_locations

__all__ = [
    "VARIANTS",
    "HubError",
    "MalformedFileError",
    "PreferredVariant",
    "Repo",
    "RepoFileNotFoundError",
    "RepoNotFoundError",
    "VariantNotFoundError",
    "external_data_locations",
    "load_json",
    "normalize_variant",
    "open_repo",
    "read_model_card",
]

#: ONNX variant name -> file-name suffix, as transformers.js names them (`{stem}{suffix}.onnx`).
VARIANTS: dict[str, str] = {
    "fp32": "",
    "fp16": "_fp16",
    "q8": "_quantized",
    "int8": "_int8",
    "uint8": "_uint8",
    "q4": "_q4",
    "q4f16": "_q4f16",
    "bnb4": "_bnb4",
}
_VARIANT_ALIASES = {"quantized": "q8"}
_REPO_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


class HubError(Exception):
    """Base class of the errors of this module."""


class RepoNotFoundError(HubError, FileNotFoundError):
    """A folder that does not exist, or a repo id that cannot be found (or is not cached, offline)."""


class RepoFileNotFoundError(HubError, FileNotFoundError):
    """A file that is not in the repository (or not in the cache, offline)."""


class VariantNotFoundError(RepoFileNotFoundError):
    """An ONNX variant that the repository does not have."""


class MalformedFileError(HubError, ValueError):
    """A repository file that cannot be read: JSON that does not parse or is not an object (config.json,
    tokenizer_config.json, generation_config.json, ...), a tokenizer.json that ``tokenizers`` rejects.
    The message names the file."""


def load_json(path: str | Path, kind: type = dict) -> Any:
    """A JSON file holding a ``kind`` (an object: a dict, or a list); a MalformedFileError naming the file
    when it is not valid UTF-8 JSON or holds something else: ``load_json("model/config.json")``."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise MalformedFileError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(value, kind):
        expected = "a JSON object" if kind is dict else f"a JSON {kind.__name__}"
        raise MalformedFileError(f"{path} is not {expected} (it holds a {type(value).__name__})")
    return value


def _env_offline() -> bool:
    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return bool(hf_constants.HF_HUB_OFFLINE) or env in {"1", "ON", "YES", "TRUE"}


class PreferredVariant(str):
    """A variant chosen for the user, not by them: loaded when the repository has it, else the usual selection
    of :meth:`Repo.onnx_path` applies (``dtype="float16"`` without ``variant`` prefers ``"fp16"``)."""

    __slots__ = ()


def normalize_variant(variant: str) -> str:
    """Canonical variant name: ``normalize_variant("quantized") == "q8"``; unknown names raise ValueError."""
    name = _VARIANT_ALIASES.get(str(variant).lower(), str(variant).lower())
    if name not in VARIANTS:
        raise ValueError(f"unknown ONNX variant {variant!r}; valid: {', '.join([*VARIANTS, 'quantized'])}")
    return name


class Repo:
    """A model repository: a local folder, or a Hub repo id resolved through the huggingface_hub cache.

    >>> repo = open_repo("Xenova/bge-small-en-v1.5")               # or a folder: open_repo("/models/bge-small")
    >>> repo.exists("tokenizer.json"), repo.read_json("generation_config.json")
    (True, None)
    """

    def __init__(
        self,
        source: str | Path,
        *,
        repo_id: str | None = None,
        revision: str | None = None,
        cache_dir: str | Path | None = None,
        offline: bool = False,
        token: str | bool | None = None,
    ) -> None:
        self.source = str(source)
        self.repo_id = repo_id
        self.revision = (revision or "main") if repo_id else None
        self.cache_dir = Path(cache_dir or hf_constants.HF_HUB_CACHE) if repo_id else None
        self.offline = offline
        self.token = token
        self._root = None if repo_id else Path(source)
        self._files: list[str] | None = None
        self._config: dict | None = None

    def __repr__(self) -> str:
        where = f"{self.repo_id}@{self.revision}" if self.repo_id else str(self._root)
        return f"Repo({where!r}{', offline' if self.offline and self.repo_id else ''})"

    @property
    def name(self) -> str:
        """How errors name this repository: ``repo 'org/name' (revision 'main')`` or ``folder '/x'``."""
        if self.repo_id:
            return f"repo {self.repo_id!r} (revision {self.revision!r})"
        return f"folder '{self._root}'"

    # ------------------------------------------------------------------ hub cache layout
    def _snapshot_dir(self) -> Path | None:
        """The cached snapshot folder of this revision, or None when it is not cached."""
        assert self.cache_dir is not None and self.repo_id is not None
        repo_dir = self.cache_dir / ("models--" + self.repo_id.replace("/", "--"))
        ref = repo_dir / "refs" / self.revision
        commit = ref.read_text().strip() if ref.is_file() else self.revision
        snapshot = repo_dir / "snapshots" / commit
        return snapshot if snapshot.is_dir() else None

    def _missing(self, name: str, why: str = "") -> RepoFileNotFoundError:
        if self.repo_id:
            where = f"cache folder '{self.cache_dir}'" + (", offline" if self.offline else "")
            return RepoFileNotFoundError(f"{name!r} not found in {self.name}; looked in {where}{why}")
        return RepoFileNotFoundError(f"{name!r} not found in {self.name}{why}")

    # ------------------------------------------------------------------ files
    def path(self, name: str) -> Path:
        """Local path of a file, downloading it if needed: ``repo.path("tokenizer.json")``."""
        if self._root is not None:
            p = self._root / name
            if not p.is_file():
                raise self._missing(name)
            return p
        if self.offline:
            hit = huggingface_hub.try_to_load_from_cache(
                self.repo_id, name, cache_dir=self.cache_dir, revision=self.revision
            )
            if not isinstance(hit, str):
                raise self._missing(name)
            return Path(hit)
        try:
            return Path(
                huggingface_hub.hf_hub_download(
                    self.repo_id, name, revision=self.revision, cache_dir=self.cache_dir, token=self.token
                )
            )
        except hf_errors.RepositoryNotFoundError as e:
            raise RepoNotFoundError(f"{self.name} not found on the Hub ({e})") from e
        except hf_errors.RevisionNotFoundError as e:
            raise RepoNotFoundError(f"{self.name}: revision not found on the Hub ({e})") from e
        except hf_errors.EntryNotFoundError as e:  # LocalEntryNotFoundError too (no network, not cached)
            raise self._missing(name, f" ({type(e).__name__})") from e

    def exists(self, name: str) -> bool:
        """Whether the repository has the file (offline: whether the cache has it): ``repo.exists("config.json")``."""
        if self._root is not None:
            return (self._root / name).is_file()
        hit = huggingface_hub.try_to_load_from_cache(
            self.repo_id, name, cache_dir=self.cache_dir, revision=self.revision
        )
        if isinstance(hit, str):
            return True
        if self.offline or hit is not None:  # hit is the cached "does not exist" marker
            return False
        return name in self.list_files()

    def list_files(self) -> list[str]:
        """Repository files as relative POSIX paths (offline: the cached ones): ``repo.list_files()``."""
        if self._files is None:
            if self._root is not None:
                root = self._root
            elif self.offline:
                root = self._snapshot_dir()
            else:
                root = None
                api = huggingface_hub.HfApi(token=self.token)
                try:
                    self._files = sorted(api.list_repo_files(self.repo_id, revision=self.revision))
                except (hf_errors.RepositoryNotFoundError, hf_errors.RevisionNotFoundError) as e:
                    raise RepoNotFoundError(f"{self.name} not found on the Hub ({e})") from e
                except Exception:  # no network: list what the cache has, as hf_hub_download falls back to it
                    root = self._snapshot_dir()
                    if root is None:
                        raise
            if root is not None:
                files = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
                self._files = sorted(f for f in files if not f.startswith("."))
        return list(self._files or [])

    def read_json(self, name: str, kind: type = dict) -> Any:
        """A JSON file as a dict (``kind=list``: a list), or None when the repository does not have it:
        ``repo.read_json("config.json")``; a MalformedFileError naming the file when it cannot be read."""
        if not self.exists(name):
            return None
        return load_json(self.path(name), kind)

    @property
    def config(self) -> dict:
        """config.json as a dict; a RepoFileNotFoundError naming the repository when it is missing.

        >>> config = open_repo("Xenova/bert-base-uncased").config
        >>> config["model_type"], config["hidden_size"] % config["num_attention_heads"]
        ('bert', 0)
        """
        if self._config is None:
            config = self.read_json("config.json")
            if config is None and self.exists("gliner_config.json"):  # as the gliner package saves a model
                config = {"model_type": "gliner"}
            if config is None:
                raise self._missing("config.json", ": a model repository needs its config.json")
            self._config = config
        return self._config

    # ------------------------------------------------------------------ ONNX variants
    def onnx_variants(self, stem: str = "model", *, subfolder: str = "onnx") -> list[str]:
        """Variants present for one ONNX file, in VARIANTS order: ``repo.onnx_variants() == ["fp32", "q4"]``."""
        prefix = f"{subfolder.strip('/')}/" if subfolder.strip("/") else ""
        files = set(self.list_files())
        return [v for v, suffix in VARIANTS.items() if f"{prefix}{stem}{suffix}.onnx" in files]

    def select_variant(
        self,
        stem: str = "model",
        *,
        variant: str | None = None,
        task_default: str | None = None,
        subfolder: str = "onnx",
    ) -> str:
        """The variant to load, by the rules of :meth:`onnx_path`: ``repo.select_variant(task_default="q4")``."""
        present = self.onnx_variants(stem, subfolder=subfolder)
        where = f"{subfolder.strip('/')}/{stem}" if subfolder.strip("/") else stem
        if isinstance(variant, PreferredVariant) and normalize_variant(variant) not in present:
            variant = None  # a preference the repository cannot meet: the usual selection
        if variant is not None:
            chosen = normalize_variant(variant)
            if chosen not in present:
                raise VariantNotFoundError(
                    f"variant {chosen!r} of {where}.onnx not in {self.name}; "
                    f"present: {', '.join(present) or 'none'}"
                )
            return chosen
        if not present:
            raise self._missing(f"{where}.onnx", f"; ONNX files there: {self._onnx_listing(subfolder)}")
        for candidate in (_config_dtype(self.read_json("config.json") or {}, stem), task_default, "fp32"):
            if candidate is not None and normalize_variant(candidate) in present:
                return normalize_variant(candidate)
        return present[0]

    def onnx_path(
        self,
        stem: str = "model",
        *,
        variant: str | None = None,
        task_default: str | None = None,
        subfolder: str = "onnx",
    ) -> Path:
        """Local path of the selected ONNX variant of ``{subfolder}/{stem}.onnx`` (external data fetched too).

        >>> repo = open_repo("Xenova/opus-mt-en-de")
        >>> repo.onnx_path("decoder_model_merged", task_default="q4")   # q4 if the repo has it, else fp32
        PosixPath('.../onnx/decoder_model_merged...onnx')

        Selection order: ``variant=`` (an error listing the present variants if absent; a
        :class:`PreferredVariant` that is absent falls through to the next rules), then
        ``transformers.js_config.dtype`` of config.json (a string, or a dict keyed by file stem),
        then ``task_default``, then fp32, then the first other variant present. A config or task
        choice that the repository lacks falls through to the next rule.
        """
        chosen = self.select_variant(stem, variant=variant, task_default=task_default, subfolder=subfolder)
        prefix = f"{subfolder.strip('/')}/" if subfolder.strip("/") else ""
        name = f"{prefix}{stem}{VARIANTS[chosen]}.onnx"
        path = self.path(name)
        for location in external_data_locations(path):
            if Path(location).is_absolute() or ".." in Path(location).parts:
                raise HubError(
                    f"{name} in {self.name} references external data outside its folder: {location!r}"
                )
            self.path(f"{prefix}{location}")
        return path

    def _onnx_listing(self, subfolder: str) -> str:
        prefix = f"{subfolder.strip('/')}/" if subfolder.strip("/") else ""
        found = [f for f in self.list_files() if f.startswith(prefix) and f.endswith(".onnx")]
        return ", ".join(found) or "none"


def _config_dtype(config: dict, stem: str) -> str | None:
    dtype = (config.get("transformers.js_config") or {}).get("dtype")
    if isinstance(dtype, dict):
        dtype = dtype.get(stem)
    if not isinstance(dtype, str) or dtype.lower() == "auto":
        return None
    try:
        return normalize_variant(dtype)
    except ValueError:
        return None


def open_repo(
    source: str | Path | tuple[str, str] | Repo,
    *,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    offline: bool | None = None,
    token: str | bool | None = None,
) -> Repo:
    """Open a local folder, a Hub repo id ``"org/name"``, or ``("hf", "org/name")``.

    >>> open_repo("Xenova/bert-base-uncased", revision="main", offline=True)
    Repo('Xenova/bert-base-uncased@main', offline)

    ``offline=None`` follows ``HF_HUB_OFFLINE``. Offline, a repo id must be in the cache
    (``cache_dir`` or huggingface_hub's default); a missing folder or uncached repo raises
    RepoNotFoundError. A str that is an existing folder is a folder; otherwise a str shaped
    like a repo id is a repo id.
    """
    if isinstance(source, Repo):
        return source
    offline = _env_offline() if offline is None else bool(offline)
    if isinstance(source, tuple):
        if len(source) != 2 or source[0] != "hf" or not isinstance(source[1], str):
            raise ValueError(f"a tuple source must be ('hf', 'org/name'), got {source!r}")
        repo_id = source[1]
    elif isinstance(source, Path) or os.path.isdir(source) or not _REPO_ID.match(str(source)):
        if not Path(source).is_dir():
            raise RepoNotFoundError(f"model folder '{source}' does not exist (nor is it a Hub repo id)")
        return Repo(Path(source))
    else:
        repo_id = str(source)
    repo = Repo(
        repo_id, repo_id=repo_id, revision=revision, cache_dir=cache_dir, offline=offline, token=token
    )
    if offline and repo._snapshot_dir() is None:
        raise RepoNotFoundError(
            f"{repo.name} is not in the cache folder '{repo.cache_dir}' and the Hub is offline "
            "(offline=True or HF_HUB_OFFLINE=1)"
        )
    return repo


def read_model_card(repo: Repo | str | Path) -> dict:
    """The YAML front matter of README.md as a dict ({} without one): ``read_model_card(repo).get("base_model")``."""
    repo = open_repo(repo)
    if not repo.exists("README.md"):
        return {}
    text = repo.path("README.md").read_text(encoding="utf-8", errors="replace")
    match = re.match(r"^\ufeff?---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|$)", text, re.DOTALL)
    if not match:
        return {}
    import yaml  # a dependency of huggingface_hub

    try:
        card = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}
    return card if isinstance(card, dict) else {}
