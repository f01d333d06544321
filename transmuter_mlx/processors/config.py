"""What image and audio processors share: reading a preprocessor_config.json as transformers reads
it, a registry of the transformers class names each processor stands for, and error prefixes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ConfigReader", "prefix", "registrar"]

T = TypeVar("T", bound=type)


def prefix(task: str, index: int | None = None) -> str:
    """``"task: input 3: "``, what an error message starts with (either part may be missing)."""
    where = f"{task}: " if task else ""
    return f"{where}input {index}: " if index is not None else where


def registrar(registry: dict[str, Any]) -> Callable[..., Callable[[T], T]]:
    """A class decorator factory ``register(*names)``: the class stands for transformers classes ``names``."""
    def register(*names: str) -> Callable[[T], T]:
        def add(cls: T) -> T:
            for name in names:
                registry[name] = cls
            cls.names = names
            return cls
        return add
    return register


class ConfigReader:
    """A processor's config keys, read with transformers' rules for null values."""

    config: dict[str, Any]
    task: str

    def flag(self, key: str, default: bool) -> bool:
        """A ``do_...`` key: a null value is false, as in transformers."""
        return bool(self.config.get(key, default))

    def value(self, key: str, default: Any) -> Any:
        """A key whose null value means the default, as in transformers' ``x if x is not None else default``."""
        value = self.config.get(key)
        return default if value is None else value

    def error(self, message: str) -> ValueError:
        """A ValueError that names the task and the processor."""
        return ValueError(f"{prefix(self.task)}{type(self).__name__}: {message}")
