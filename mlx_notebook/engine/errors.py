"""Exceptions shared by the engine's modules, and the one-line error text."""

from __future__ import annotations

import traceback


class Cancelled(Exception):
    """Raised at a safe point when the job's cancel flag is set."""


class IncompatibleDraft(ValueError):
    """The draft model's vocabulary differs from the main model's."""


class ContextOverflow(ValueError):
    """The prompt does not fit the model's context window."""


class EngineClosed(RuntimeError):
    """The engine was closed (or its worker died); it accepts no more work."""


class GenerationError(RuntimeError):
    """A generation ended in error.

    Raised by `Job.result` (unless ``raise_on_error=False``) and by blocking
    notebook helpers.

    Attributes:
        message: The one-line error text, as the view shows it.
        text: Whatever text was generated before the error.
        finished: The terminal `Finished` event.
    """

    def __init__(self, message: str, text: str = "", finished=None) -> None:
        super().__init__(message)
        self.message = message
        self.text = text
        self.finished = finished

    def _render_traceback_(self) -> list[str]:
        # IPython calls this instead of printing a traceback: one line in the cell.
        return [f"GenerationError: {self.message}"]


def describe(exc: BaseException) -> str:
    """One line for the view: ``Type: first line of the message``."""
    msg = str(exc).strip()
    first = msg.splitlines()[0] if msg else ""
    if len(first) > 500:
        first = first[:497] + "..."
    name = type(exc).__name__
    return f"{name}: {first}" if first else name


def detach_frames(exc: BaseException) -> BaseException:
    """Keep ``exc``'s traceback for printing but drop the frames' locals.

    A kept traceback would otherwise pin everything its frames referenced
    (models, KV caches) for as long as the terminal event lives.
    """
    tb = exc.__traceback__
    if tb is not None:
        traceback.clear_frames(tb)
    return exc
