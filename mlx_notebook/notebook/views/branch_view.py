"""A generation and its branch side by side, parting at the branch point.

The text both share is shown once; below it the two continuations stand in two
columns, each starting with its own token at the branch point, marked, with its
probability where records were kept. Static HTML and CSS, every piece of model
text escaped, like every other view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .inspect import CSS as INSPECT_CSS
from .inspect import inspect_tokens
from .markup import escape
from .style import STYLE

CSS = (
    "<style>"
    ".mlxnb .forks{display:grid;grid-template-columns:1fr 1fr;gap:10px;margin-top:6px}"
    ".mlxnb .forks>div{min-width:0;border-top:2px solid var(--jp-border-color1,#999);"
    "padding-top:4px}"
    ".mlxnb .shared{white-space:pre-wrap;overflow-wrap:break-word;"
    "color:var(--jp-ui-font-color2,#555)}"
    ".mlxnb .fork{outline:2px solid var(--jp-brand-color1,#1976d2);outline-offset:1px;"
    "border-radius:2px}"
    "</style>"
)


@dataclass
class Side:
    """One continuation from the branch point.

    Attributes:
        label: What it is (``"original"``, ``"branch"``).
        pieces: ``(text, record or None)`` per token from the branch point on.
        state: ``"done"``, ``"stopped"``, ``"running"``...
    """

    label: str
    pieces: list[tuple[str, object]]
    state: str = "done"

    def head(self) -> str:
        """Its first token and, when recorded, that token's probability."""
        if not self.pieces:
            return "(no tokens)"
        text, rec = self.pieces[0]
        if rec is None:
            return repr(text)
        # The model's own probability (a redraw samples without the original token).
        lp = rec.logprob if rec.raw_logprob is None else rec.raw_logprob
        return f"{rec.text!r} · p {math.exp(lp):.3f}"


@dataclass
class Fork:
    """A generation and its branch, displayed side by side (``handle.side_by_side()``)."""

    title: str
    shared: str
    left: Side
    right: Side

    def _repr_html_(self) -> str:
        return branch_html(self.title, self.shared, self.left, self.right)

    def __repr__(self) -> str:
        return branch_text(self.title, self.shared, self.left, self.right)


def branch_html(title: str, shared: str, left: Side, right: Side) -> str:
    """Both continuations side by side under the text they share."""
    cols = "".join(_column(s) for s in (left, right))
    return (
        f'{STYLE}{INSPECT_CSS}{CSS}<div class="mlxnb"><div class="hdr">{escape(title)}</div>'
        f'<div class="shared">{escape(shared)}</div><div class="forks">{cols}</div></div>'
    )


def _column(side: Side) -> str:
    head = f"{side.label}: {side.head()}" + ("" if side.state == "done" else f" ({side.state})")
    records = [r for _, r in side.pieces]
    if side.pieces and all(r is not None for r in records):
        body = inspect_tokens(records, first_class="fork")
    else:
        body = "".join(
            f'<span class="fork">{escape(t)}</span>' if i == 0 else escape(t)
            for i, (t, _) in enumerate(side.pieces)
        )
    return f'<div><div class="hdr">{escape(head)}</div><div class="insp">{body}</div></div>'


def branch_text(title: str, shared: str, left: Side, right: Side) -> str:
    """The plain-text form (the saved fallback, and ``repr``)."""
    cut = shared[-60:]
    lines = [title, f"…{cut}" if len(shared) > 60 else cut]
    for s in (left, right):
        lines.append(f"[{s.label}: {s.head()}] " + "".join(t for t, _ in s.pieces))
    return "\n".join(lines)
