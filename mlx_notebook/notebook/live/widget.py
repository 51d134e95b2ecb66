"""`LiveWidget`: a view's HTML kept in the browser, updated by deltas over the comm.

The Python side holds the blocks of HTML the renderer made last; each refresh
sends one message with a splice per changed block (`delta.diff`), so a
generation costs the wire about what it adds, not its whole text at every
refresh. Messages are numbered: a browser copy that missed one (a view created
late, a page reloaded) asks for the whole view, and gets it at the next refresh.
A kernel that is busy (``--wait``) reads no messages, so the whole view is also
sent unasked at refreshes 1, 4, 16, 64, ...: a copy that fell behind catches up
within four times its age, for at most a third more bytes than the last view.

The buttons (Stop, Inspect, Stop thinking) are drawn by ``widget.js`` and each
click arrives as ``{"event": "click", "button": NAME}``; traits say which show.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import anywidget
from traitlets import Bool, List, Unicode

from ..views.style import CSS
from .delta import diff

log = logging.getLogger("mlx_notebook")
_HERE = Path(__file__).parent
BUTTONS = ("stop", "inspect", "think")


def _full_at(seq: int) -> bool:
    """Whether refresh ``seq`` sends the whole view unasked (1, 4, 16, 64, ...)."""
    return seq & (seq - 1) == 0 and (seq.bit_length() - 1) % 2 == 0


class LiveWidget(anywidget.AnyWidget):
    """The live part of a view: HTML blocks and its buttons.

    Args:
        blocks: The view's first render.
    """

    _esm = (_HERE / "widget.js").read_text()
    # The views' stylesheet goes once, with the widget, not in every full view sent.
    _css = (_HERE / "widget.css").read_text() + CSS

    initial = List(Unicode(), help="The blocks of HTML when the widget was made.").tag(sync=True)
    stopping = Bool(False, help="Stop was pressed: the button is disabled.").tag(sync=True)
    can_stop = Bool(True, help="Show Stop (a Panel shows its own).").tag(sync=True)
    can_inspect = Bool(False, help="Show Inspect: the tokens carry records.").tag(sync=True)
    inspecting = Bool(False, help="Inspect is on: the text is tinted by probability.").tag(
        sync=True
    )
    can_end_thinking = Bool(False, help="Show Stop thinking: a model reasons.").tag(sync=True)
    thinking_ended = Bool(False, help="Stop thinking was pressed.").tag(sync=True)
    ended = Bool(False, help="Every job ended: the buttons hide (keeping their room).").tag(
        sync=True
    )
    kind = Unicode("live", help="What the widget is, for tests and styles.").tag(sync=True)

    def __init__(self, blocks: list[str], **kw) -> None:
        super().__init__(initial=list(blocks), **kw)
        self.blocks = list(blocks)
        self.seq = 0
        self.sent = 0  # messages sent
        self._want_full = False
        self._lock = threading.Lock()  # the refresh thread and a click's redraw
        self._handlers: dict[str, Callable[[], None]] = {}
        self.on_msg(self._on_msg)

    @property
    def value(self) -> str:
        """The whole view as the browser has it, as one HTML string."""
        return "".join(self.blocks)

    def on_click(self, button: str, handler: Callable[[], None]) -> None:
        """Call ``handler`` (on the kernel's thread) when ``button`` is clicked."""
        self._handlers[button] = handler

    def click(self, button: str) -> None:
        """What a click in the browser does."""
        self._on_msg(self, {"event": "click", "button": button}, [])

    def show(self, blocks: list[str]) -> bool:
        """Send what changed since the last call (one message); return whether one was sent."""
        with self._lock:
            full, self._want_full = self._want_full, False
            ops = diff(self.blocks, blocks)
            if not ops and len(blocks) == len(self.blocks) and not full:
                return False
            self.blocks = list(blocks)
            self.seq += 1
            if full or _full_at(self.seq):
                self.send({"kind": "full", "seq": self.seq, "blocks": self.blocks})
            else:
                self.send({"kind": "delta", "seq": self.seq, "ops": ops, "count": len(blocks)})
            self.sent += 1
            return True

    def _on_msg(self, _widget, content: dict, _buffers) -> None:
        if content.get("kind") == "sync":  # a copy fell behind: the whole view next time
            self._want_full = True
            return
        button = content.get("button") if content.get("event") == "click" else None
        handler = self._handlers.get(button)
        if handler is None:
            return
        try:
            handler()
        except Exception:  # a failing click must not take the kernel's message loop down
            log.exception("mlx_notebook: the %s button failed", button)
