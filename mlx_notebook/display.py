"""Results that show as their views wherever a notebook renders HTML, extension or not.

A `Result`, `TokenTable`, `MapResult`, `CompareResult`, `SweepResult`, `EvalResult`
or `EvalRun` shown as a cell's value in JupyterLab, Notebook 7, marimo, VS Code or Colab is drawn
as the view a magic would draw (the document, the inspector, the table, the verdict),
with the model's text escaped. The layers below the notebook do not know how: the
package hands this module the notebook layer's renderer when it is imported
(`set_renderer`), and the renderer loads nothing until the first such value is shown.

A result that may still be running (`LiveDisplay`: a `MapResult` from
``map(..., wait=False)``, a `Comparison` or `Sweep` from ``compare``/``sweep`` with
``wait=False``) shows as its live view instead, with Stop, while it runs:
in IPython by ``_ipython_display_``, in marimo by ``_display_`` (the view's
anywidget); the notebook layer makes the view (`set_live`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("mlx_notebook")

_render: Callable[[object], str] | None = None
_live: Callable[[object, bool], object] | None = None


def set_renderer(render: Callable[[object], str] | None) -> None:
    """Make ``render(value)`` the HTML of every `RichDisplay` value (None: plain text only)."""
    global _render
    _render = render


def set_live(live: Callable[[object, bool], object] | None) -> None:
    """Make ``live(value, marimo)`` show a running value's live view (see `LiveDisplay`)."""
    global _live
    _live = live


class RichDisplay:
    """Mixin: ``_repr_html_`` is the value's view (``repr`` stays the plain text)."""

    def _repr_html_(self) -> str | None:
        return _render(self) if _render is not None else None


def _in_kernel() -> bool:
    """Whether this is a Jupyter kernel (widgets are drawn), not a terminal IPython."""
    from IPython import get_ipython

    return getattr(get_ipython(), "kernel", None) is not None


class _Html:
    """Static HTML for marimo's ``_display_`` (a value with only ``_repr_html_``)."""

    def __init__(self, html: str) -> None:
        self.html = html

    def _repr_html_(self) -> str:
        return self.html


class LiveDisplay(RichDisplay):
    """Mixin: while ``self.done`` is False, shown as a live view; then as `RichDisplay`."""

    def _live_view(self, marimo: bool):
        if _live is None or getattr(self, "done", True):
            return None
        if not marimo and not _in_kernel():
            return None  # a terminal IPython draws no widget: the static view
        try:
            return _live(self, marimo)
        except Exception:  # the live view could not be made: the static view instead
            log.exception("mlx_notebook: no live view for %s", type(self).__name__)
            return None

    def _ipython_display_(self) -> None:
        if self._live_view(marimo=False) is not None:  # displayed by the notebook layer
            return
        from IPython.display import display

        html = self._repr_html_()
        bundle = {"text/plain": repr(self)} | ({"text/html": html} if html else {})
        display(bundle, raw=True)

    def _display_(self):
        widget = self._live_view(marimo=True)
        if widget is not None:
            return widget
        html = self._repr_html_()
        return _Html(html) if html else repr(self)
