"""An output that starts as a live widget and ends as a document saved with the notebook.

While a job runs, the cell's output is the widget (with a static HTML and plain
text fallback in the same bundle). When it ends, the output is replaced, by
display id, with static HTML and plain text only: no widget reference is left
to fail with "Error displaying widget" after the kernel is gone, and
nbconvert, nbviewer and GitHub show the text.

A widget that stays live (the Panel) cannot be replaced; it is displayed as
two outputs instead: the widget, then a `Snapshot` of its last state kept
current by display id. A stylesheet in the snapshot hides whichever of the two
is not wanted: while the widget renders, the snapshot; where it cannot render
(a reopened notebook, "Loading widget...", "Error displaying widget"), the
widget's output.

A headless runner (nbclient) only reads messages addressed to the cell it is
running, so an update sent between two cells can be lost. Each final update
is therefore sent again when the next cell starts (IPython's ``pre_run_cell``
event), which addresses it to that cell.
"""

from __future__ import annotations

import threading
import uuid

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

_lock = threading.Lock()
_unconfirmed: dict[str, dict] = {}


class Document:
    """One display of a live view, finalized to static HTML and text.

    Args:
        widget: The live widget shown while the job runs.
    """

    def __init__(self, widget) -> None:
        self.widget = widget
        self.display_id = uuid.uuid4().hex
        self.final: dict | None = None

    def show(self, html: str, plain: str) -> None:
        """Display the widget, with ``html``/``plain`` as the fallback for other frontends."""
        from IPython.display import display

        bundle = {
            WIDGET_MIME: {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.widget.model_id,
            },
            "text/html": html,
            "text/plain": plain,
        }
        display(bundle, raw=True, display_id=self.display_id)

    def finalize(self, html: str, plain: str, metadata: dict | None = None) -> None:
        """Replace the widget with its final text (any thread); ``metadata`` is saved too."""
        self.final = {"text/html": html, "text/plain": plain}
        _send(self.display_id, self.final, metadata)


def _send(display_id: str, bundle: dict, metadata: dict | None = None) -> None:
    from IPython.display import update_display

    with _lock:
        _unconfirmed[display_id] = (bundle, metadata)
    update_display(bundle, raw=True, display_id=display_id, metadata=metadata)


# Which of the pair shows, by whether the live widget (class ``mlxnb-live``) rendered,
# connected to its kernel, in the output just before the snapshot. A widget restored
# from saved widget state, or whose kernel died, is marked disconnected by ipywidgets:
# then the snapshot shows instead. (`:has` is in every current browser.)
_LIVE = ".mlxnb-live:not(.jupyter-widgets-disconnected)"
PAIR_CSS = (
    f"<style>.jp-OutputArea-child:has({_LIVE})+.jp-OutputArea-child .mlxnb-snapshot"
    f"{{display:none}}.jp-OutputArea-child:not(:has({_LIVE})):has(+.jp-OutputArea-child"
    " .mlxnb-snapshot){display:none}</style>"
)


class Snapshot:
    """A live widget's output followed by a static snapshot of its state, kept current."""

    def __init__(self) -> None:
        self.display_id = uuid.uuid4().hex
        self.bundle: dict | None = None

    def _bundle(self, html: str, plain: str) -> dict:
        body = f'{PAIR_CSS}<div class="mlxnb-snapshot">{html}</div>'
        return {"text/html": body, "text/plain": plain}

    def show(self, widget, html: str, plain: str) -> None:
        """Display ``widget`` (marked live), then the snapshot (``html``/``plain``)."""
        from IPython.display import display

        widget.add_class("mlxnb-live")
        head = plain.splitlines()[0] if plain else "widget"
        live = {
            WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": widget.model_id},
            "text/plain": f"{head} (live controls: run the cell to use them)",
        }
        display(live, raw=True)
        self.bundle = self._bundle(html, plain)
        display(self.bundle, raw=True, display_id=self.display_id)

    def update(self, html: str, plain: str) -> None:
        """Replace the snapshot everywhere it is shown (any thread); a no-op before `show`."""
        if self.bundle is None:
            return
        self.bundle = self._bundle(html, plain)
        _send(self.display_id, self.bundle)


def resend_final(*_args) -> None:
    """``pre_run_cell`` hook: send every final update again, addressed to this cell."""
    from IPython.display import update_display

    with _lock:
        pending = list(_unconfirmed.items())
        _unconfirmed.clear()
    for display_id, (bundle, metadata) in pending:
        update_display(bundle, raw=True, display_id=display_id, metadata=metadata)
