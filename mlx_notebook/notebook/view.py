"""The streaming generation widget: refreshes on its own clock, never per token.

The worker thread only appends events to a list (lock-free in CPython); a
refresh thread folds them into a `ViewState` at most ``refresh_hz`` times a
second and sends one widget update per refresh, plus one final refresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import ipywidgets as widgets

from ..engine.events import Event, Finished
from ..engine.job import Job
from .render import ViewState


class GenerationView:
    """Streams one job into a cell's output.

    Args:
        state: What to show (model, mode, format).
        refresh_hz: Most refreshes per second. Default: 20.
        start_thread: Start the refresh thread on `attach` (tests drive `refresh`).
    """

    def __init__(self, state: ViewState, refresh_hz: float = 20, start_thread: bool = True):
        self.state = state
        self.refresh_hz = refresh_hz
        self.start_thread = start_thread
        self.updates = 0
        self._events: list[Event] = []
        self._seen = 0
        self._done = threading.Event()
        self._on_stop: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None
        self.html = widgets.HTML(value=state.html())
        self.stop_button = widgets.Button(
            description="Stop", icon="stop", button_style="danger", tooltip="Stop generating",
            layout=widgets.Layout(width="auto"),
        )
        self.stop_button.on_click(self._clicked)
        self.widget = widgets.VBox([self.html, self.stop_button])
        self.widget.add_class("mlxnb-view")

    # -- wiring -------------------------------------------------------------
    def attach(self, job: Job) -> GenerationView:
        """Follow ``job``: Stop cancels it; its events feed this view."""
        self._on_stop = job.cancel
        job.add_listener(self.push)
        if self.start_thread:
            self._thread = threading.Thread(target=self._loop, name="mlxnb-view", daemon=True)
            self._thread.start()
        return self

    def push(self, ev: Event) -> None:
        """Listener, called on the worker thread: append only, never touch widgets."""
        self._events.append(ev)
        if isinstance(ev, Finished):
            self._done.set()

    def stop(self) -> None:
        """What the Stop button does: cancel the job (never blocks)."""
        self.state.stopping = True
        self.stop_button.disabled = True
        if self._on_stop is not None:
            self._on_stop()

    def _clicked(self, _button) -> None:
        self.stop()

    # -- refreshing ---------------------------------------------------------
    def _loop(self) -> None:
        while not self._done.wait(1 / self.refresh_hz):
            self.refresh()
        self.refresh()  # the final one, with the complete text

    def wait_rendered(self, timeout: float | None = None) -> bool:
        """Block until the final refresh has been sent."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return self._done.is_set()

    def refresh(self) -> bool:
        """Fold new events and send at most one update; return whether one was sent."""
        n = len(self._events)
        for ev in self._events[self._seen : n]:
            self.state.apply(ev)
        self._seen = n
        html = self.state.html()
        sent = False
        if html != self.html.value:
            self.html.value = html
            self.updates += 1
            sent = True
        fin = self.state.finished
        if fin is not None and self.stop_button.description == "Stop":
            with self.stop_button.hold_sync():  # one message for both traits
                self.stop_button.disabled = True
                self.stop_button.description = (
                    "Stopped" if fin.finish_reason == "cancelled" else "Done"
                )
        return sent

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
