"""``python -m parity NAME [options]``: run the parity module ``parity.NAME`` (for example ``text``)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = sorted(
        m.name
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if not m.name.startswith("_") and not m.name.endswith("_reference")
    )
    if not argv or argv[0] not in names:
        print(f"usage: python -m parity {{{','.join(names)}}} [options]", file=sys.stderr)
        return 2
    return importlib.import_module(f"parity.{argv[0]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
