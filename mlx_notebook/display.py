"""Results that show as their views wherever a notebook renders HTML, extension or not.

A `Result`, `TokenTable`, `MapResult`, `CompareResult`, `EvalResult` or `EvalRun`
shown as a cell's value in JupyterLab, Notebook 7, marimo, VS Code or Colab is drawn
as the view a magic would draw (the document, the inspector, the table, the verdict),
with the model's text escaped. The layers below the notebook do not know how: the
package hands this module the notebook layer's renderer when it is imported
(`set_renderer`), and the renderer loads nothing until the first such value is shown.
"""

from __future__ import annotations

from collections.abc import Callable

_render: Callable[[object], str] | None = None


def set_renderer(render: Callable[[object], str] | None) -> None:
    """Make ``render(value)`` the HTML of every `RichDisplay` value (None: plain text only)."""
    global _render
    _render = render


class RichDisplay:
    """Mixin: ``_repr_html_`` is the value's view (``repr`` stays the plain text)."""

    def _repr_html_(self) -> str | None:
        return _render(self) if _render is not None else None
