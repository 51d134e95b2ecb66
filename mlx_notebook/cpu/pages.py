"""The CPU fast path's weights on transparent huge pages (Linux).

A decode step reads every weight once, so on a CPU its speed is the memory
stream's. With 4 KiB pages that stream also walks a page table entry per 4 KiB
(130,000 of them for a 135M float32 model, each step); with 2 MiB pages, 512 times
fewer. Linux usually gives huge pages only to memory advised for them
(``transparent_hugepage=madvise``), and MLX's allocations are not. At load, on
CPU, every parameter is copied into one buffer advised before it is written (the
extension's ``huge_pack``), and the model takes the copies: the same values, in
the order the model lists them. Paired in one process on this machine, one-row
products over the default model's weights ran 3-8% faster on huge pages.

Skipped, with the reason in the fast path's status, where huge pages cannot be had
(``never``, not Linux) or where the copy would not fit beside the weights in the
memory available (it briefly holds both). ``MLX_NOTEBOOK_HUGE_PAGES=0`` skips it.
"""

from __future__ import annotations

import re
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from .. import config
from . import ext as _ext

ENV = "MLX_NOTEBOOK_HUGE_PAGES"
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode(path: Path | None = None) -> str | None:
    """The kernel's transparent huge page mode (``always``, ``madvise``, ``never``), or None."""
    try:
        found = re.search(r"\[(\w+)\]", (path or THP).read_text())
    except OSError:
        return None
    return found.group(1) if found else None


def available_bytes() -> int | None:
    """MemAvailable from ``/proc/meminfo``, or None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def huge_bytes(arrays: list[mx.array]) -> int:
    """Bytes of huge pages behind the memory ``arrays`` lie in (``/proc/self/smaps``).

    Args:
        arrays: Arrays packed by `install`, which share one buffer.
    """
    try:
        import numpy as np

        addrs = [np.frombuffer(memoryview(a), dtype=np.uint8).ctypes.data for a in arrays]
        smaps = Path("/proc/self/smaps").read_text()
    except (OSError, TypeError, ValueError, BufferError):
        return 0
    lo, hi = min(addrs), max(a + x.nbytes for a, x in zip(addrs, arrays))
    total, inside = 0, False
    for line in smaps.splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):  # a mapping's first line: start-end
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start < hi and end > lo
        elif inside and head == "AnonHugePages:":
            total += int(line.split()[1]) * 1024
    return total


def install(model) -> str | None:
    """Move ``model``'s parameters onto huge pages (call on the CPU, after the fast path's swaps).

    Returns:
        A line for the fast path's status: what was done, or why not; None when the
        extension is missing (its own status says why) or the variable is off.
    """
    if not config.enabled(ENV) or not hasattr(model, "parameters"):
        return None
    ext = _ext.load()
    if ext is None:
        return None
    mode = thp_mode()
    if mode in (None, "never"):
        return f"weights on 4 KiB pages: transparent huge pages are {mode or 'unavailable'}"
    flat = tree_flatten(model.parameters())
    total = sum(a.nbytes for _, a in flat)
    free = available_bytes()
    if free is not None and total > free // 2:
        return f"weights on 4 KiB pages: copying {total / 1e9:.1f} GB needs twice that free"
    before = ext.huge_allocated()
    packed = ext.huge_pack([a for _, a in flat])
    mx.eval(packed)
    model.update(tree_unflatten([(name, a) for (name, _), a in zip(flat, packed)]))
    slack = ext.huge_allocated() - before - total  # alignment: counted in the model's memory
    object.__setattr__(model, "_mlxnb_page_slack", slack)  # not a parameter
    del flat
    mx.clear_cache()  # the originals' memory
    huge = min(huge_bytes(packed), total)  # whole mappings are counted: a neighbour's too
    return f"weights on huge pages ({_mib(huge)} of {_mib(total)} MiB)"


def _mib(n: int) -> str:
    return f"{n / 2**20:.{1 if n < 10 * 2**20 else 0}f}"


__all__ = ["ENV", "huge_bytes", "install", "thp_mode"]
