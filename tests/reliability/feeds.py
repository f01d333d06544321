"""Reliability rows: feeds."""

from __future__ import annotations

from tests.reliability import BACKENDS, Exits, Raises, Returns, case  # noqa: F401
