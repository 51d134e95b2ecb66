"""Results that show as their views wherever a notebook renders HTML, extension or not.

A `Result`, `TokenTable`, `MapResult`, `CompareResult`, `EvalResult` or `EvalRun`
shown as a cell's value in JupyterLab, Notebook 7, marimo, VS Code or Colab is drawn
as the view a magic would draw (the document, the inspector, the table, the verdict),
with the model's text escaped; nothing of a notebook library is imported for it. The
HTML comes from the notebook layer's formatters (`notebook.magics.formatters`),
loaded when the first such value is shown.
"""

from __future__ import annotations


class RichDisplay:
    """Mixin: ``_repr_html_`` is the value's view (``repr`` stays the plain text)."""

    def _repr_html_(self) -> str:
        from .notebook.magics.formatters import html_for

        return html_for(self)
