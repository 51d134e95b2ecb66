"""``python -m mlx_notebook.cpu build``: build the fast path's native code now.

``scripts/setup.sh`` runs it, so the first model load does not compile. It prints
what it built, or why it could not (the fast path is optional: without it,
generation runs as in mlx-lm).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Run the command line; returns the exit status."""
    if argv[:1] != ["build"] or len(argv) > 1:
        print("usage: python -m mlx_notebook.cpu build", file=sys.stderr)
        return 2
    for what, path, how in build_all():
        print(f"{what}: {how}" + (f" ({path})" if path else ""))
    return 0


def build_all() -> list[tuple[str, Path | None, str]]:
    """Build the library and the extension; ``(what, path or None, how or why)`` each."""
    from . import build, ext

    return [("library", *build.build_library()), ("extension", *ext.build())]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
