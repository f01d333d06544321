"""The sentence-transformers settings of a repository, or of the ``base_model`` of its model card.

>>> from transmuter_mlx.hub import open_repo
>>> from transmuter_mlx.pipelines.sentence_config import read_sentence_config
>>> read_sentence_config(open_repo("Xenova/bge-small-en-v1.5")).pooling
('cls',)

ONNX exports often lack modules.json, 1_Pooling/config.json and sentence_bert_config.json; the
settings then come from the repository named by ``base_model`` in README.md (when it can be
opened: offline, only if it is in the cache; beside a local folder, a folder named ``org--name``
stands for ``org/name``), else they are None.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..hub import HubError, Repo, open_repo, read_model_card

#: the modules of modules.json that the embedding pipeline runs itself
RUN_MODULES = ("Transformer", "Pooling", "Normalize")
#: pooling_mode_* keys of 1_Pooling/config.json (older sentence-transformers) -> mode name
LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


class UnsupportedModuleError(ValueError):
    """modules.json names a module that transmuter-mlx does not run (a Dense layer, say)."""


@dataclass(frozen=True)
class SentenceConfig:
    """What modules.json and its folders say: pooling modes, normalisation, length, other modules."""

    source: str
    pooling: tuple[str, ...] | None = None
    normalize: bool = False
    max_seq_length: int | None = None
    other_modules: tuple[str, ...] = ()
    activation_fn: str | None = None

    def check(self, task: str) -> None:
        """An UnsupportedModuleError naming the first module that is not run."""
        if self.other_modules:
            raise UnsupportedModuleError(
                f"{task}: modules.json of {self.source} has module(s) {list(self.other_modules)} that "
                f"transmuter-mlx does not run (it runs {list(RUN_MODULES)}); set output_pool= and "
                "embedding_processor= to use the model without them"
            )


def read_sentence_config(repo: Repo, follow_base_model: bool = True) -> SentenceConfig | None:
    """The settings of ``repo``, else of its model card's ``base_model``, else None."""
    found = _read(repo)
    if found is not None or not follow_base_model:
        return found
    base = read_model_card(repo).get("base_model")
    for name in [base] if isinstance(base, str) else list(base or []):
        try:
            found = _read(_open_base(repo, str(name)))
        except (HubError, OSError, ValueError):
            continue
        if found is not None:
            return found
    return None


def _open_base(repo: Repo, name: str) -> Repo:
    """The base model's repository; beside a local folder, a folder ``org--name`` stands for ``org/name``."""
    if repo.repo_id is None:
        sibling = Path(repo.source).parent / name.replace("/", "--")
        if sibling.is_dir():
            return open_repo(sibling)
    return open_repo(name, cache_dir=repo.cache_dir, offline=repo.offline)


def _read(repo: Repo) -> SentenceConfig | None:
    modules = repo.read_json("modules.json", kind=list)
    st_config = repo.read_json("config_sentence_transformers.json") or {}
    activation = st_config.get("activation_fn") or (
        (repo.config if repo.exists("config.json") else {}).get("sentence_transformers") or {}
    ).get("activation_fn")
    if modules is None:  # a cross-encoder saved by sentence-transformers >= 4 has only the activation
        return SentenceConfig(repo.name, activation_fn=activation) if activation else None
    pooling, normalize, others, max_len = None, False, [], None
    bert_config = repo.read_json("sentence_bert_config.json") or {}
    if bert_config.get("max_seq_length"):
        max_len = int(bert_config["max_seq_length"])
    for module in sorted(modules, key=lambda m: int(m.get("idx", 0))):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        path = str(module.get("path", "")).strip("/")
        if kind == "Pooling":
            pooling = pooling_modes(repo.read_json(f"{path}/config.json") or {})
        elif kind == "Normalize":
            normalize = True
        elif kind == "Transformer":
            sub = repo.read_json(f"{path}/sentence_bert_config.json") if path else None
            if sub and sub.get("max_seq_length"):
                max_len = int(sub["max_seq_length"])
        else:
            others.append(kind or str(module))
    return SentenceConfig(repo.name, pooling, normalize, max_len, tuple(others), activation)


def pooling_modes(config: dict[str, Any]) -> tuple[str, ...]:
    """Pooling modes of a 1_Pooling/config.json (old or new keys): ``pooling_modes({"pooling_mode": "cls"})``.

    >>> pooling_modes({"pooling_mode_mean_tokens": True})
    ('mean',)
    """
    mode = config.get("pooling_mode")
    if mode:
        return (mode,) if isinstance(mode, str) else tuple(mode)
    modes = tuple(name for key, name in LEGACY_POOLING.items() if config.get(key))
    return modes or ("mean",)
