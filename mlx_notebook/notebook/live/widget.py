"""`LiveWidget`: a view's HTML kept in the browser, updated by deltas over the comm.

The Python side holds the blocks of HTML the renderer made last; each refresh
sends one message with a splice per changed block (`delta.Deltas`), so a
generation costs the wire about what it adds, not its whole text at every
refresh; a copy that falls behind (a view created late, a page reloaded, a busy
kernel) gets the whole view again.

The buttons (Stop, Inspect, Stop thinking, and a row of the caller's own, such as
``%%evaluate``'s Stop per column) are drawn by ``widget.js`` and each click
arrives as ``{"event": "click", "button": NAME}``; traits say which show. One
widget can show one view after another (a Panel's runs): `restart`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import anywidget
from traitlets import Bool, Dict, Int, List, Unicode

from ..views.style import CSS
from .delta import Deltas

log = logging.getLogger("mlx_notebook")
_HERE = Path(__file__).parent


class LiveWidget(anywidget.AnyWidget):
    """The live part of a view: HTML blocks and its buttons.

    Args:
        blocks: The view's first render.
    """

    _esm = "".join((_HERE / f).read_text() for f in ("copy.js", "button.js", "widget.js"))
    # The views' stylesheet goes once, with the widget, not in every full view sent.
    _css = (_HERE / "widget.css").read_text() + CSS

    initial = List(Unicode(), help="The blocks of HTML when made, then at the end.").tag(sync=True)
    initial_seq = Int(0, help="The message number `initial` is as of.").tag(sync=True)
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
    row = Dict(
        help='A row of buttons above the view until it ends: {"label": text, "buttons": '
        "[[name, text, hover text], ...]} (a click sends the name)."
    ).tag(sync=True)
    pressed = List(Unicode(), help="The row's buttons already pressed (disabled).").tag(sync=True)

    def __init__(self, blocks: list[str], **kw) -> None:
        # Traits change on the kernel's thread (code, clicks) and a view's refresh
        # thread: one at a time, or a held sync's set of changes is iterated while
        # the other thread adds to it. A view holds it to check it still draws here.
        self.lock = threading.RLock()
        super().__init__(initial=list(blocks), **kw)
        self.deltas = Deltas(blocks)
        self.owner = None  # the view drawing in this widget now (see `restart`)
        self._handlers: dict[str, Callable[[], None]] = {}
        self.on_msg(self._on_msg)

    @contextmanager
    def hold_sync(self):
        """The changes inside sent as one message (ipywidgets'), one thread at a time."""
        with self.lock, super().hold_sync():
            yield

    def notify_change(self, change) -> None:
        """A trait changed: synced as ipywidgets does, one thread at a time."""
        with self.lock:
            super().notify_change(change)

    @property
    def blocks(self) -> list[str]:
        """The view's blocks as last sent."""
        return self.deltas.blocks

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

    def restart(self, blocks: list[str], inspecting: bool = False, owner=None) -> None:
        """Show another view from now on (its first render ``blocks``), buttons reset.

        ``owner`` (the view) is the one that may draw here from now on; an earlier
        view still finishing on its own thread leaves the widget alone.
        """
        with self.lock:
            self.owner = owner
            self.deltas.restart()
            with self.hold_sync():
                self.stopping = self.thinking_ended = self.ended = False
                self.can_inspect = self.can_end_thinking = False
                self.inspecting = inspecting
                self.row, self.pressed = {}, []
            self.show(blocks)
            # A copy made from the saved state now (a reloaded page) starts here.
            with self.hold_sync():
                self.initial, self.initial_seq = list(blocks), self.deltas.seq

    def show(self, blocks: list[str]) -> bool:
        """Send what changed since the last call (one message); return whether one was sent."""
        msg = self.deltas.message(blocks)
        if msg is not None:
            self.send(msg)
        return msg is not None

    def _on_msg(self, _widget, content: dict, _buffers) -> None:
        if not isinstance(content, dict):
            return
        if content.get("kind") == "sync":  # a copy fell behind: the whole view next time
            self.deltas.want_full()
            if self.ended:  # no refresh comes any more: now
                self.show(self.blocks)
            return
        button = content.get("button") if content.get("event") == "click" else None
        handler = self._handlers.get(button)
        if handler is None:
            return
        try:
            # The settings as the page had them at the click: their own updates may
            # still be held back in the page (one unanswered update at a time). Only
            # traits tagged ``click=True`` (a view's settings) take the page's values.
            state = content.get("state")
            if isinstance(state, dict):
                keys = set(self.trait_names(click=True))
                self.set_state({k: v for k, v in state.items() if k in keys})
            handler()
        except Exception:  # a failing click must not take the kernel's message loop down
            log.exception("mlx_notebook: the %s button failed", button)
