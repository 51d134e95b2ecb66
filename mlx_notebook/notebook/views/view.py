"""Live widgets for jobs: refresh on their own clock, never per token.

The worker thread only appends events to a list (lock-free in CPython); a
refresh thread folds them into a renderer at most ``refresh_hz`` times a
second and sends one widget update per refresh, plus one final refresh. When
every job has ended the Stop button goes away and, for a displayed view, the
output becomes a static document (see `document`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from ...engine.events import Event, Finished
from ...engine.job import Job
from .render import ViewState
from .style import STYLE

log = logging.getLogger("mlx_notebook")


class Renderer(Protocol):
    """Folds events from the jobs it shows and renders them as one HTML string."""

    def apply_from(self, index: int, ev: Event) -> None:
        """Fold event ``ev`` of job number ``index``."""

    def html(self) -> str:
        """The whole view (a renderer may also offer ``blocks()``: the same, in slots)."""

    def plain(self) -> str:
        """The whole view as plain text."""

    def set_stopping(self) -> None:
        """Mark that Stop was pressed."""


class LiveView:
    """One live widget (HTML sent as deltas, a compact Stop beside it) following jobs.

    Args:
        renderer: What to show.
        refresh_hz: Most refreshes per second. Default: 20.
        start_thread: Start the refresh thread on `attach` (tests call `refresh`).
        on_done: Called on the refresh thread after the final refresh.
        live: A widget to draw in (a Panel, showing one run after another); by
            default a new `LiveWidget`.
    """

    def __init__(
        self,
        renderer: Renderer,
        refresh_hz: float = 20,
        start_thread: bool = True,
        on_done: Callable[[], None] | None = None,
        live=None,
    ):
        self.renderer = renderer
        self.refresh_hz = refresh_hz
        self.start_thread = start_thread
        self.on_done = on_done
        self.updates = 0
        self._events: list[tuple[int, Event]] = []
        self._seen = 0
        self._dirty = True  # set when something other than an event changes the view
        self._done = threading.Event()
        self._jobs: list[Job] = []
        self._sealed = True  # False while more jobs may still be added
        self._thread: threading.Thread | None = None
        self.document = None
        self._final = False  # the final refresh ran: a later `display` shows the end
        self._doc_lock = threading.Lock()  # `display` and `finish` on different threads
        self._refresh_lock = threading.RLock()
        from ..live.widget import LiveWidget

        # One anywidget: the HTML as blocks updated by deltas, and its buttons.
        inspecting = bool(getattr(renderer, "inspecting", False))
        self._stopping = False
        if live is None:
            self.live = LiveWidget(self._blocks(), inspecting=inspecting)
            self.live.owner = self
        else:
            self.live = live
            live.restart(self._blocks(), inspecting=inspecting, owner=self)
        self.widget = self.live  # what is displayed (a caller may wrap it in a box)
        self.live.on_click("stop", self.stop)
        self.live.on_click("think", self.end_thinking)
        self.live.on_click("inspect", self._toggle_inspect)

    def _blocks(self) -> list[str]:
        blocks = getattr(self.renderer, "blocks", None)
        blocks = blocks() if blocks is not None else [self.renderer.html()]
        if blocks and blocks[0].startswith(STYLE):  # the widget carries the stylesheet
            blocks[0] = blocks[0][len(STYLE) :]
        return blocks

    def display(self) -> LiveView:
        """Show the view as a cell output that ends as a saved document."""
        from .document import Document

        with self._doc_lock:
            self.document = Document(self.widget)
            self.document.show(self.renderer.html(), self.renderer.plain())
            if self._final:  # the jobs ended before the view was shown
                self.document.finalize(
                    self.renderer.html(), self.renderer.plain(), self._provenance()
                )
        return self

    def attach(self, *jobs: Job, sealed: bool = True) -> LiveView:
        """Follow ``jobs``: Stop cancels them all; their events feed the renderer.

        Args:
            jobs: The jobs so far.
            sealed: False when more jobs will be `add`-ed (a measurement that
                decides as it goes); the view ends only after `seal`.
        """
        # Unsealed while adding: jobs that already ended (a replay is instant) each
        # push their Finished as they join, and the first few must not end the view.
        self._sealed = False
        for job in jobs:
            self.add(job)
        if sealed:
            self.seal()
        if self.start_thread:
            self._thread = threading.Thread(target=self._loop, name="mlxnb-view", daemon=True)
            self._thread.start()
        return self

    def follow(self, runs, start: Callable[[], object]) -> LiveView:
        """Follow runs submitted as they go (a `PacedRuns`); ``start()`` submits the first.

        Each new job joins the view, and the view ends once pacing has ended and
        those jobs have. If ``start`` raises, nothing runs and the view ends at once.
        """
        self.join(runs)  # nothing submitted yet: each job as it comes, then the end
        try:
            start()
        except BaseException:
            self.seal()
            raise
        return self

    def join(self, runs) -> LiveView:
        """Follow runs already started (a `PacedRuns`): those so far, then each new one."""
        self.attach(sealed=False)
        runs.subscribe(lambda job, _i: self.add(job), self.seal)
        return self

    def add(self, job: Job) -> None:
        """Follow one more job (its index is the number of jobs before it)."""
        i = len(self._jobs)
        self._jobs.append(job)
        if self.stopping:  # Stop came before this job was submitted
            job.cancel()
        job.add_listener(lambda ev: self.push(ev, i))

    def seal(self) -> None:
        """No more jobs will be added: the view ends when those it has end."""
        self._sealed = True
        if all(j.done for j in self._jobs):
            self._done.set()

    @property
    def stopping(self) -> bool:
        """Whether Stop was pressed."""
        return self._stopping

    @property
    def _drawing(self) -> bool:
        """Whether this view still draws in its widget (a Panel's next run took it over)."""
        return self.live.owner is self

    def push(self, ev: Event, index: int = 0) -> None:
        """Listener, called on the worker thread: append only, never touch widgets."""
        self._events.append((index, ev))
        # A job is done once its Finished is logged, which precedes this call.
        if isinstance(ev, Finished) and self._sealed and all(j.done for j in self._jobs):
            self._done.set()

    def stop(self) -> None:
        """What the Stop button does: cancel every job (never blocks)."""
        self._stopping = True
        with self.live.lock:
            if self._drawing:
                self.live.stopping = True
        self.renderer.set_stopping()
        self._dirty = True
        for job in list(self._jobs):
            job.cancel()

    def end_thinking(self) -> None:
        """What "Stop thinking" does: every job answers now (never blocks)."""
        with self.live.lock:
            if self._drawing:
                self.live.thinking_ended = True
        for job in list(self._jobs):
            job.end_thinking()

    def _toggle_inspect(self) -> None:
        # A click (main thread): no MLX work, only the renderer's mode and a redraw.
        if self.live.ended or not self._drawing:  # final (the document folds it), or gone
            return
        self.live.inspecting = not self.live.inspecting
        self.renderer.set_inspect(self.live.inspecting)
        self.invalidate()

    def touch(self) -> None:
        """Mark the view for a redraw at the next refresh (any thread; no widget touched)."""
        self._dirty = True

    def invalidate(self) -> None:
        """Something other than an event changed what the renderer shows: redraw now."""
        self._dirty = True
        self.refresh()

    @property
    def done(self) -> bool:
        """Whether every job has finished."""
        return self._done.is_set()

    def _loop(self) -> None:
        while not self._done.wait(1 / self.refresh_hz):
            self.refresh()
        self.finish()

    def finish(self) -> None:
        """The final refresh; then the button goes and the document is finalized."""
        # Re-rendered even without new events: a renderer may read state that changed
        # after the last event (a Sweep's verdict waits for its pacing to end).
        self._dirty = True
        with self._refresh_lock:  # no click's redraw between the last message and `initial`
            self.refresh()  # with the complete text
            # The buttons hide but keep their room: the text does not re-wrap at the end.
            with self.live.hold_sync():
                if self._drawing:  # (else a Panel's next run draws there now)
                    self.live.ended = True  # the document folds the inspection
                    # A view drawn from the widget's state from now on (a reloaded page,
                    # a marimo export, a copy that fell behind) shows the end.
                    self.live.initial = list(self.live.blocks)
                    self.live.initial_seq = self.live.deltas.seq
        if self.on_done is not None:
            try:
                self.on_done()
            except Exception:  # a failing callback must not lose the final text
                log.exception("mlx_notebook: a view's on_done callback failed")
        with self._doc_lock:
            self._final = True
            if self.document is not None:
                self.document.finalize(
                    self.renderer.html(), self.renderer.plain(), self._provenance()
                )

    def _provenance(self) -> dict:
        """What made each job of this view (saved in the output's metadata)."""
        from ...origin import KEY, record

        return {KEY: {"generations": [r for j in self._jobs if (r := record(j)) is not None]}}

    def wait_rendered(self, timeout: float | None = None) -> bool:
        """Block until the final refresh has been sent."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return self._done.is_set()

    def refresh(self) -> bool:
        """Fold new events and send at most one update; return whether one was sent."""
        with self._refresh_lock:  # the refresh thread, and a click's redraw
            return self._refresh()

    def _refresh(self) -> bool:
        n = len(self._events)
        sent = False
        if n != self._seen or self._dirty:  # nothing new: no re-render, no message
            for index, ev in self._events[self._seen : n]:
                self.renderer.apply_from(index, ev)
            self._seen, self._dirty = n, False
            with self.live.lock:  # the check and the message together: no restart between
                if not self._drawing:  # a Panel's next run draws there now
                    return False
                sent = self.live.show(self._blocks())
                if sent:
                    self.updates += 1
                with self.live.hold_sync():
                    if getattr(self.renderer, "inspectable", False) and not self.done:
                        self.live.can_inspect = True
                    thinking = bool(getattr(self.renderer, "thinking", False)) and not self.done
                    self.live.can_end_thinking = thinking
        return sent

    def _ipython_display_(self) -> None:
        self.display()


class StatesRenderer:
    """Renderer over one `ViewState` per job: events go to their job's state.

    Subclasses that show several jobs override `html`.

    Args:
        states: One state per attached job, in attach order.
    """

    def __init__(self, states: list[ViewState]) -> None:
        self.states = states

    def apply_from(self, index: int, ev: Event) -> None:
        """Fold an event of job ``index``."""
        self.states[index].apply(ev)

    def set_stopping(self) -> None:
        """Stop was pressed."""
        for s in self.states:
            s.stopping = True

    @property
    def inspectable(self) -> bool:
        """Whether the job's tokens carry records (the view can tint them)."""
        return len(self.states) == 1 and bool(self.states[0].records)

    @property
    def thinking(self) -> bool:
        """Whether a thinking model is reasoning and has not begun its answer."""
        st = self.states[0]
        return len(self.states) == 1 and st.finished is None and bool(st.thought) and not st.text

    @property
    def inspecting(self) -> bool:
        """Whether the text shows as the token inspector."""
        return self.states[0].inspect

    def set_inspect(self, on: bool) -> None:
        """Show the text tinted by probability (``on``) or as its format."""
        for s in self.states:
            s.inspect = on

    def html(self) -> str:
        """Render the first (usually only) job."""
        return self.states[0].html()

    def blocks(self) -> list[str]:
        """The first job in slots (see `ViewState.blocks`); one slot where `html` is overridden."""
        if type(self).html is not StatesRenderer.html:
            return [self.html()]
        return self.states[0].blocks()

    def plain(self) -> str:
        """The first job as plain text."""
        return self.states[0].plain()


def generation_view(
    state: ViewState,
    refresh_hz: float = 20,
    start_thread: bool = True,
    on_done: Callable[[], None] | None = None,
    live=None,
) -> LiveView:
    """A live view of one job (in ``live``, a widget it reuses, if given)."""
    return LiveView(StatesRenderer([state]), refresh_hz, start_thread, on_done, live)
