"""Write the model-family table of docs/guide/families.md from the installed mlx-lm.

For every architecture of mlx-lm (`testing.families.architectures`) this builds the
tiny random-weight model the families tests use, loads it with ``mlx_lm.load``, and
says which cache kinds it has and what the engine does for it: batched rows,
prompts prefilled one at a time (its layers read their padding: `cache.padding`),
or rows run alone (a cache kind with no ``merge``); speculation kept or turned off
(a multi-token pass that parts from single steps); rewound by trimming or from
snapshots. Usage: ``python scripts/families_table.py [--check]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import mlx_notebook  # noqa: F401 - before mlx: the CPU BLAS it loads

PAGE = Path(__file__).resolve().parent.parent / "docs" / "guide" / "families.md"
BEGIN, END = "<!-- families table: begin -->", "<!-- families table: end -->"


def row(family: str, root: Path) -> str:
    """One table row for ``family``."""
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache

    from mlx_notebook.engine.cache.caches import layers, trims_exactly, unbatchable
    from mlx_notebook.engine.cache.padding import (
        check_batching,
        multi_token_problem,
        sliding_window,
    )
    from mlx_notebook.engine.cache.prompt_cache import prefill_step
    from mlx_notebook.models.needs import fused_kernels, portable
    from mlx_notebook.testing.families import FAMILIES, NOT_BUILT, build_family

    if family in NOT_BUILT:
        return f"| `{family}` | | not built here: {NOT_BUILT[family]} | |"
    if fused_kernels(family):  # the same words on every machine
        return (
            f"| `{family}` | | its layers run mlx-lm's fused Metal kernels: on Metal as"
            " mlx-lm runs it; refused at submit elsewhere | the refusal (`families` marker,"
            " without Metal) |"
        )
    try:
        model, tok = load(str(build_family(family, root / family)))
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return f"| `{family}` | | not built here: no config builds it ({type(exc).__name__}) | |"
    ternary = any(type(m).__name__ == "BitLinear" for _, m in model.named_modules())
    portable(model)  # as the engine loads it (nothing changes on Metal)
    cache = make_prompt_cache(model)
    kinds = ", ".join(sorted({type(c).__name__ for c in layers(cache)}))
    alone = unbatchable(cache)
    if alone:
        alone = f"{alone} cannot join a batch"
    else:
        try:
            problem, decoding = check_batching(model, len(tok.vocab))
            alone = decoding and "a batched step parts from the rows alone"
        except Exception as exc:  # noqa: BLE001 - as the engine: rows run alone
            problem = alone = f"its batched pass fails: {type(exc).__name__}"
    if alone:
        done = f"rows run alone ({alone})"
    elif problem:
        done = "rows decode together; prompts prefill one at a time (padding read)"
    else:
        done = "rows batched"
    if multi_token_problem(model, len(tok.vocab)):
        done += "; decodes without drafts (a multi-token pass parts from single steps)"
        if sliding_window(model):  # the engine's prefill chunks follow mlx-lm's passes
            done += f"; prefill past the window on mlx-lm's {prefill_step():,}-token grid"
    if ternary:
        done = "without Metal, ternary layers as 2-bit affine layers; " + done
    rewind = "trim" if trims_exactly(cache) else "snapshot and replay"
    tested = "every suite" if family in FAMILIES else "CI (`families` marker)"
    return f"| `{family}` | {kinds} | {done}; rewound by {rewind} | {tested} |"


def table() -> str:
    """The whole markdown table."""
    from mlx_notebook.testing.families import architectures

    with tempfile.TemporaryDirectory() as tmp:
        rows = [row(f, Path(tmp)) for f in architectures()]
    head = "| family | cache kinds | what the engine does | tested in |\n| --- | --- | --- | --- |"
    return "\n".join([head, *rows])


def main() -> int:
    """Rewrite the table in the page (or, with --check, say whether it is current)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the page differs")
    args = ap.parse_args()
    text = PAGE.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:start] + "\n" + table() + "\n" + text[stop:]
    if args.check:
        return int(new != text)
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
