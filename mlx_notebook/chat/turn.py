"""One exchange of a `Chat`: the user's message and the reply as it streams."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..engine.events import Event, Finished
from ..engine.job import Job


class ChatTurn:
    """One exchange: the user's message and the reply as it streams.

    Args:
        job: The engine job of the reply.
        user: The user's message (a dict in the conversation's messages).
        on_end: Called once, ``on_end(turn, finished)``, when the reply ends: the
            conversation files the reply (or takes the exchange back).

    Attributes:
        job: The engine job of the reply.
        user: The user's message.
        reply: The reply's message once filed (None before, or after an error).
    """

    def __init__(self, job: Job, user: dict, on_end: Callable[[ChatTurn, Finished], None]):
        self.job, self.user, self._on_end = job, user, on_end
        self.reply: dict | None = None
        self._settled = False
        self._lock = threading.Lock()
        job.add_listener(self._on_event)

    def _on_event(self, ev: Event) -> None:
        if isinstance(ev, Finished):
            self._settle(ev)

    def _settle(self, fin: Finished) -> None:
        # Called by the listener and by `wait` (whichever comes first): the history
        # must hold the reply as soon as the turn has ended.
        with self._lock:
            if self._settled:
                return
            self._settled = True
        self._on_end(self, fin)

    @property
    def text(self) -> str:
        """The reply so far (final once `done`)."""
        return self.job.text

    @property
    def done(self) -> bool:
        """Whether the reply has ended."""
        return self.job.done

    @property
    def finish_reason(self) -> str | None:
        """``stop``, ``length``, ``cancelled`` or ``error``; None while running."""
        fin = self.job.finished
        return fin.finish_reason if fin else None

    @property
    def stats(self):
        """Timing figures once done."""
        fin = self.job.finished
        return fin.stats if fin else None

    def wait(self, timeout: float | None = None) -> ChatTurn:
        """Block until the reply ends; Ctrl-C stops it (the partial reply is kept).

        Raises:
            GenerationError: The reply ended in error (the exchange was taken back).
        """
        try:
            self.job.result(timeout)
        finally:
            if self.job.done:
                self._settle(self.job.finished)
        return self

    def cancel(self) -> None:
        """Stop the reply (the partial text stays in the history, marked stopped)."""
        self.job.cancel()

    def __repr__(self) -> str:
        state = self.finish_reason or "running"
        return f"<ChatTurn {state}, {len(self.text)} chars>"


__all__ = ["ChatTurn"]
