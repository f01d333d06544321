"""Typed reads of a JSON request body: each field's type and range checked, a ``BadRequest`` naming it.

>>> body = Body({"max_tokens": 8, "stop": "\\n"})
>>> body.integer("max_tokens", minimum=1), body.strings("stop"), body.number("temperature")
(8, ['\\n'], None)
>>> body.integer("n", default=1)
1
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .errors import BadRequest

__all__ = ["Body", "parse_json"]


def parse_json(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object; a BadRequest for anything else."""
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BadRequest(f"the request body is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"the request body must be a JSON object, not {type(value).__name__}")
    return value


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


class Body:
    """The fields of one JSON object (a request, or an object inside it: ``where`` prefixes the names)."""

    def __init__(self, data: Mapping[str, Any], where: str = "") -> None:
        self.data, self.where = data, where

    def _name(self, name: str) -> str:
        return f"{self.where}{name}"

    def raw(self, name: str, default: Any = None) -> Any:
        value = self.data.get(name)
        return default if value is None else value

    def required(self, name: str) -> Any:
        if self.data.get(name) is None:
            raise BadRequest(f"{self._name(name)} is required", param=self._name(name))
        return self.data[name]

    def _wrong(self, name: str, value: Any, expected: str) -> BadRequest:
        return BadRequest(f"{self._name(name)} must be {expected}, got {_kind(value)} ({json.dumps(value)[:60]})",
                          param=self._name(name))

    def string(self, name: str, default: str | None = None, *, required: bool = False,
               choices: tuple[str, ...] | None = None) -> str | None:
        value = self.required(name) if required else self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._wrong(name, value, "a string")
        if choices is not None and value not in choices:
            raise BadRequest(f"{self._name(name)} must be one of {list(choices)}, got {value!r}", param=self._name(name))
        return value

    def boolean(self, name: str, default: bool | None = None) -> bool | None:
        value = self.data.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._wrong(name, value, "true or false")
        return value

    def integer(self, name: str, default: int | None = None, *, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        value = self.data.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, value, "an integer")
        if minimum is not None and value < minimum or maximum is not None and value > maximum:
            bounds = f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise BadRequest(f"{self._name(name)} must be {bounds}, got {value}", param=self._name(name))
        return value

    def number(self, name: str, default: float | None = None, *, minimum: float | None = None,
               maximum: float | None = None) -> float | None:
        value = self.data.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._wrong(name, value, "a number")
        if minimum is not None and value < minimum or maximum is not None and value > maximum:
            raise BadRequest(f"{self._name(name)} must be between {minimum} and {maximum}, got {value}",
                             param=self._name(name))
        return float(value)

    def strings(self, name: str, *, required: bool = False, max_items: int | None = None) -> list[str] | None:
        """A string or an array of strings, as a list."""
        value = self.required(name) if required else self.data.get(name)
        if value is None:
            return None
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise self._wrong(name, value, "a string or an array of strings")
        if max_items is not None and len(items) > max_items:
            raise BadRequest(f"{self._name(name)} has {len(items)} items; at most {max_items}", param=self._name(name))
        return items

    def object(self, name: str) -> Body:
        value = self.data.get(name)
        if value is None:
            return Body({}, f"{self._name(name)}.")
        if not isinstance(value, dict):
            raise self._wrong(name, value, "an object")
        return Body(value, f"{self._name(name)}.")

    def refuse(self, *names: str, why: str) -> None:
        """A BadRequest for any of ``names`` given (fields this server does not serve)."""
        for name in names:
            if self.data.get(name) is not None:
                raise BadRequest(f"{self._name(name)} is not supported: {why}", param=self._name(name))
