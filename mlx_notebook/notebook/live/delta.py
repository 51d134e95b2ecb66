"""Deltas between two renders of a view, as splices a browser applies to its copy.

A view is a list of HTML blocks (header, text, stats, ...). From one refresh to
the next, usually the header's figures change and the text grows at its end, so
each changed block is sent as one splice: where the change starts, how much of
the old block it replaces and what goes there. Offsets count UTF-16 code units,
as JavaScript strings do, so a splice lands on the same characters in the
browser whatever the text holds (emoji are two units there, one here).
"""

from __future__ import annotations

import threading

Op = tuple[int, int, int, str]  # block index, start, length replaced, replacement


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix, by halving (slices compare at C speed)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _units(s: str) -> int:
    """Length of ``s`` in UTF-16 code units."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2  # a lone surrogate is one unit


def splice(old: str, new: str) -> tuple[int, int, str] | None:
    """The one splice that turns ``old`` into ``new`` (offsets in UTF-16 units); None if equal."""
    if old == new:
        return None
    p = _common_prefix(old, new)
    room = min(len(old), len(new)) - p  # a suffix never overlaps the prefix
    # Only the last `room` characters are reversed: a refresh stays linear in the change.
    s = _common_prefix(old[-room:][::-1], new[-room:][::-1]) if room else 0
    start = _units(old[:p])
    return start, _units(old[p : len(old) - s]), new[p : len(new) - s]


def diff(old: list[str], new: list[str]) -> list[Op]:
    """Splices turning the blocks ``old`` into ``new`` (blocks past ``len(new)`` are dropped)."""
    ops = []
    for i, block in enumerate(new):
        was = old[i] if i < len(old) else ""
        sp = splice(was, block)
        if sp is not None:
            ops.append((i, *sp))
    return ops


def apply(blocks: list[str], ops: list, count: int) -> list[str]:
    """What the browser does with a delta (the reference for tests; see ``widget.js``)."""
    out = list(blocks[:count]) + [""] * max(0, count - len(blocks))
    for i, start, cut, put in ops:
        raw, new = (
            out[i].encode("utf-16-le", "surrogatepass"),
            put.encode("utf-16-le", "surrogatepass"),
        )
        out[i] = (raw[: 2 * start] + new + raw[2 * (start + cut) :]).decode(
            "utf-16-le", "surrogatepass"
        )
    return out


def _full_at(seq: int) -> bool:
    """Whether message ``seq`` carries the whole view unasked (1, 4, 16, 64, ...)."""
    return seq & (seq - 1) == 0 and (seq.bit_length() - 1) % 2 == 0


class Deltas:
    """Numbered messages that keep a browser's copy of some HTML blocks current.

    Each message is a delta from the last (``{"kind": "delta", "seq", "ops",
    "count"}``) or the whole (``{"kind": "full", "seq", "blocks"}``). A copy that
    misses one asks for the whole (`want_full`). A busy kernel reads no such request,
    so the whole also goes unasked at messages 1, 4, 16, 64, ...: a copy that fell
    behind catches up within four times its age, for at most about a third more
    bytes than the last whole (1/4 + 1/16 + ...).

    Args:
        blocks: What the browser's copy starts from.
    """

    def __init__(self, blocks: list[str] | None = None) -> None:
        self.blocks = list(blocks or [])
        self.seq = 0
        self._base = 0  # the message number the current view started after (`restart`)
        self._want_full = False
        self._lock = threading.Lock()  # a refresh thread and a click's redraw

    def want_full(self) -> None:
        """A copy fell behind: the next message carries the whole."""
        with self._lock:
            self._want_full = True

    def restart(self) -> None:
        """Another view from the next message on, which carries the whole.

        The unasked wholes then come 1, 4, 16, ... messages into this view (the
        numbers keep counting, so no copy takes an old message for a new one).
        """
        with self._lock:
            self._want_full = True
            self._base = self.seq

    def message(self, blocks: list[str]) -> dict | None:
        """The message that brings a copy from the last blocks to ``blocks``; None if equal."""
        with self._lock:
            full, self._want_full = self._want_full, False
            ops = diff(self.blocks, blocks)
            if not ops and len(blocks) == len(self.blocks) and not full:
                return None
            self.blocks = list(blocks)
            self.seq += 1
            if full or _full_at(self.seq - self._base):
                return {"kind": "full", "seq": self.seq, "blocks": self.blocks}
            return {"kind": "delta", "seq": self.seq, "ops": ops, "count": len(blocks)}
