"""The CPU fast path's weights on transparent huge pages (Linux).

A decode step reads every weight once, so on a CPU its speed is the memory
stream's. With 4 KiB pages that stream also walks a page table entry per 4 KiB
(130,000 of them for a 135M float32 model, each step); with 2 MiB pages, 512 times
fewer. Linux usually gives huge pages only to memory advised for them
(``transparent_hugepage=madvise``), and MLX's allocations are not. At load, on
CPU, the parameters are copied into buffers advised before they are written (the
extension's ``huge_pack``), and the model takes the copies: the same values, in
the order the model lists them. Paired in one process on this machine, one-row
products over the default model's weights ran 3-8% faster on huge pages.

The copy goes a group at a time (a sixteenth of the weights, at least 16 MiB), and
each group's originals are freed before the next is copied: loading never holds
the weights twice (one buffer for all held both: 8.8 GB at the peak for a 4.3 GB
float32 1B model). A parameter bigger than a group (an embedding) is not copied:
the kernel moves it in place (``MADV_COLLAPSE``, Linux 6.1+). Measured on the 1B
model's loads, the peak over the weights: float32 1.14x -> 1.08x (eighths, the
embedding copied whole), Q4_0 1.30x -> 1.23x.

Skipped, with the reason in the fast path's status, where huge pages cannot be had
(``never``, not Linux) or where a group's copy would not fit in the memory available.
``MLX_NOTEBOOK_HUGE_PAGES=0`` skips it.
"""

from __future__ import annotations

import ctypes
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


def address(a: mx.array) -> int | None:
    """Where ``a``'s data lies (an evaluated array exposing its buffer), or None."""
    try:
        import numpy as np

        return np.frombuffer(memoryview(a), dtype=np.uint8).ctypes.data
    except (TypeError, ValueError, BufferError):
        return None


def huge_bytes(arrays: list[mx.array]) -> int:
    """Bytes of huge pages behind the memory ``arrays`` lie in (``/proc/self/smaps``).

    Args:
        arrays: Arrays packed together by `huge_pack`, which share one buffer.
    """
    addrs = [address(a) for a in arrays]
    try:
        smaps = Path("/proc/self/smaps").read_text()
    except OSError:
        return 0
    if None in addrs:
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


def install(model, group_bytes: int | None = None) -> str | None:
    """Move ``model``'s parameters onto huge pages (call on the CPU, after the fast path's swaps).

    Args:
        model: The model; it takes the copies.
        group_bytes: Bytes copied at a time (default: a sixteenth of the weights, at
            least `MIN_GROUP`): the most that is held twice.

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
    params = tree_flatten(model.parameters())
    total = sum(a.nbytes for _, a in params)
    group = min(total, group_bytes or max(total // GROUPS, MIN_GROUP))
    # A parameter bigger than a group (a 1B model's embedding) would be held twice
    # whole while it is copied: the kernel moves it onto huge pages where it lies,
    # 2 MiB at a time, where it can (Linux 6.1+); else it is copied, a group of its own.
    moved = {n: got for n, a in params if a.nbytes > group and (got := collapse(a))}
    del params  # (a comprehension's names die with it: no original is kept alive here)
    huge = sum(moved.values())
    sizes = [(n, a.nbytes) for n, a in tree_flatten(model.parameters()) if n not in moved]
    groups = _groups(sizes, group)
    largest = max((size for _, size in groups), default=0)  # a parameter bigger than a group is one
    free = available_bytes()
    if free is not None and largest > free // 2:
        where = f" ({len(moved)} moved onto huge pages in place)" if moved else ""
        return (
            f"weights on 4 KiB pages{where}: copying {largest / 1e9:.1f} GB needs twice that free"
        )
    before = ext.huge_allocated()
    for names, size in groups:
        copies = _pack(ext, model, names)
        huge += min(huge_bytes(copies), size)  # whole mappings are counted: a neighbour's too
    slack = ext.huge_allocated() - before - sum(size for _, size in groups)
    object.__setattr__(model, "_mlxnb_page_slack", slack)  # not a parameter
    where = f", {len(moved)} moved in place" if moved else ""
    return f"weights on huge pages ({_mib(huge)} of {_mib(total)} MiB{where})"


def collapse(a: mx.array) -> int:
    """Move ``a``'s whole 2 MiB pages onto huge pages in place (``MADV_COLLAPSE``).

    The kernel copies one huge page at a time, so nothing is held twice beyond 2 MiB;
    the stretches before the first and after the last 2 MiB boundary stay on 4 KiB
    pages. Slower than a copy (measured 35-460 ms for 96 MiB against 16-74 ms), so it
    is kept for the parameters too big to copy in a group.

    Returns:
        Bytes of ``a`` now on huge pages; 0 where the kernel cannot (before 6.1, no
        such advice; or memory that is not the process's own), and it is copied instead.
    """
    addr = address(a)
    if addr is None:
        return 0
    lo, hi = -(-addr // HUGE) * HUGE, (addr + a.nbytes) // HUGE * HUGE
    # MADV_COLLAPSE alone: it does not depend on the THP settings, and a failed one
    # leaves no MADV_HUGEPAGE behind on memory glibc may hand out again
    if hi <= lo or madvise(lo, hi - lo, MADV_COLLAPSE):
        return 0
    return min(huge_bytes([a]), a.nbytes)


HUGE = 2**21
MADV_COLLAPSE = 25  # <sys/mman.h> on Linux


def madvise(addr: int, length: int, advice: int) -> int:
    """``madvise(2)`` on a stretch of this process's memory; 0, or the errno."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return -1
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return 0 if libc.madvise(addr, length, advice) == 0 else ctypes.get_errno() or -1


# Copies at a time: about a sixteenth of the weights is held twice (a parameter bigger
# than that is collapsed in place, or where the kernel cannot, a group of its own).
GROUPS = 16
MIN_GROUP = 16 * 2**20  # a buffer's last huge page is part-used: keep them few


def _groups(sizes: list[tuple[str, int]], group: int) -> list[tuple[list[str], int]]:
    """The parameters' names in order, in runs of about ``group`` bytes, with their bytes."""
    runs: list[tuple[list[str], int]] = []
    run, size = [], 0
    for name, n in sizes:
        if run and size + n > group:
            runs.append((run, size))
            run, size = [], 0
        run.append(name)
        size += n
    if run:
        runs.append((run, size))
    return runs


def _pack(ext, model, names: list[str]) -> list[mx.array]:
    """Copy the parameters ``names`` into one huge-page buffer; free the originals."""
    params = dict(tree_flatten(model.parameters()))
    copies = ext.huge_pack([params[n] for n in names])
    del params
    mx.eval(copies)
    model.update(tree_unflatten(list(zip(names, copies))))
    mx.clear_cache()  # the originals' memory, before the next group is copied
    trim()
    return copies


def trim() -> None:
    """Hand memory freed to glibc's heap back to the system (``malloc_trim``).

    The extension's scratch buffers (kept from call to call, ``scratch.h``) are freed
    first, where no call holds them.

    glibc keeps freed blocks below its mmap threshold (which grows to 32 MiB as large
    blocks are freed) in its heap: measured, 0.6 GB of a converted 1B model's load
    stayed resident after it was freed, until this.
    """
    mod = _ext.loaded()
    if mod is not None:  # the kernels' kept scratch first, so that it goes back too
        mod.scratch_release()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to hand back this way
        pass


def _mib(n: int) -> str:
    return f"{n / 2**20:.{1 if n < 10 * 2**20 else 0}f}"


__all__ = ["ENV", "huge_bytes", "install", "thp_mode"]
