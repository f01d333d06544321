"""``python -m parity SUITE [options]``: run the parity suite ``parity.SUITE`` (for example ``text``).

The suites are those that the task specs of parity/tasks.py name (``TaskParity.suite``).
"""

from __future__ import annotations

import importlib
import sys

from .tasks import suites


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = suites()
    if not argv or argv[0] not in names:
        print(f"usage: python -m parity {{{','.join(names)}}} [options]", file=sys.stderr)
        return 2
    return importlib.import_module(f"parity.{argv[0]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
