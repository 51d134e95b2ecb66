"""An output that starts as a live widget and ends as a document saved with the notebook.

While a job runs, the cell's output is the widget (with a static HTML and plain
text fallback in the same bundle). When it ends, the output is replaced, by
display id, with static HTML and plain text only: no widget reference is left
to fail with "Error displaying widget" after the kernel is gone, and
nbconvert, nbviewer and GitHub show the text.

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

    def finalize(self, html: str, plain: str) -> None:
        """Replace the widget with its final text (any thread)."""
        from IPython.display import update_display

        self.final = {"text/html": html, "text/plain": plain}
        with _lock:
            _unconfirmed[self.display_id] = self.final
        update_display(self.final, raw=True, display_id=self.display_id)


def resend_final(*_args) -> None:
    """``pre_run_cell`` hook: send every final update again, addressed to this cell."""
    from IPython.display import update_display

    with _lock:
        pending = list(_unconfirmed.items())
        _unconfirmed.clear()
    for display_id, bundle in pending:
        update_display(bundle, raw=True, display_id=display_id)
