"""Results show as their views without the extension (marimo, a notebook without
``%load_ext``): each type the formatters know has its ``_repr_html_``."""

import importlib

from mlx_notebook.display import RichDisplay
from mlx_notebook.engine.events import Stats
from mlx_notebook.engine.job import Result
from mlx_notebook.notebook.magics.formatters import FORMATTERS, html_for


def test_every_type_with_a_view_has_it_as_its_html():
    for module, name in FORMATTERS:
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, RichDisplay), name


def test_a_result_outside_ipython_is_its_escaped_document():
    evil = Result("<img src=x onerror=alert(1)> **bold**", "stop", None, None, Stats())
    html = evil._repr_html_()
    assert html == html_for(evil)
    assert 'class="state">done' in html and "<strong>bold</strong>" in html
    assert "<img" not in html and "&lt;img" in html  # model text is never markup
    assert repr(evil).startswith("Result(")  # the plain repr is unchanged
