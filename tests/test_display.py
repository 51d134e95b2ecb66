"""Results show as their views without the extension (marimo, a notebook without
``%load_ext``): each type the formatters know has its ``_repr_html_``; a map still
running shows as its live table, in IPython and in marimo."""

import importlib
import time

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


def _running_map(engine, scripted):
    import mlx_notebook

    scripted("slow", delay_s=0.02)
    return mlx_notebook.map(["a", "b", "c"], model="slow", chat=False, max_tokens=40,
                            backend=engine, wait=False)  # fmt: skip


def test_a_running_map_is_its_live_table_in_marimo_then_static(engine, scripted):
    from mlx_notebook.display import _Html
    from mlx_notebook.notebook.live.widget import LiveWidget

    res = _running_map(engine, scripted)
    widget = res._display_()  # what marimo shows for a cell's value
    assert isinstance(widget, LiveWidget) and not widget.ended
    assert "0/3 rows" in widget.value or "1/3 rows" in widget.value
    res.cancel()
    assert len(res.texts) == 3 and res.run is None  # settled
    done = res._display_()  # once ended: the static table
    assert isinstance(done, _Html) and "map · 3 rows" in done._repr_html_()


def test_a_running_map_displayed_in_ipython_is_its_live_view(
    engine, scripted, ipshell, monkeypatch
):
    from IPython.display import display
    from IPython.utils.capture import capture_output

    import mlx_notebook.display as shown
    from mlx_notebook.notebook.views.document import WIDGET_MIME

    res = _running_map(engine, scripted)
    monkeypatch.setattr(shown, "_in_kernel", lambda: True)  # (a terminal draws no widget)
    with capture_output() as live:
        display(res)
    assert WIDGET_MIME in live.outputs[0].data  # the live table, with Stop
    assert len(res.texts) == 3
    with capture_output() as final:
        display(res)
    # (the live view's own final document may land here too, as an update)
    (out,) = [o for o in final.outputs if not o.update]
    assert WIDGET_MIME not in out.data and "map · 3 rows" in out.data["text/html"]


def test_a_running_compare_and_sweep_are_their_live_views_then_static(engine, scripted):
    import mlx_notebook
    from mlx_notebook.display import _Html
    from mlx_notebook.measure.compare import Comparison
    from mlx_notebook.measure.sweep import Sweep
    from mlx_notebook.notebook.live.widget import LiveWidget

    scripted("slow", delay_s=0.01)
    fields = dict(model="slow", chat=False, max_tokens=12, backend=engine, wait=False)
    cmp = mlx_notebook.compare("Hello", draft="lookup", repeats=2, **fields)
    assert isinstance(cmp, Comparison) and not cmp.done
    widget = cmp._display_()  # marimo: the live view, following runs already submitted
    assert isinstance(widget, LiveWidget)
    res = cmp.wait(60)
    assert len(res.runs) == 4
    for _ in range(500):  # the view's last refresh, on its own thread
        if widget.ended:
            break
        time.sleep(0.02)
    assert widget.ended and "identical text in all 4 runs" in widget.value  # every pair
    done = cmp._display_()
    assert isinstance(done, _Html) and 'class="verdict"' in done._repr_html_()

    sw = mlx_notebook.sweep("Hello", ks=[1, 2], repeats=1, **fields)
    assert isinstance(sw, Sweep) and not sw.done
    widget = sw._display_()
    assert isinstance(widget, LiveWidget)
    res = sw.wait(60)
    html = sw._display_()._repr_html_()
    assert "normal decoding" in html and "k=2" in html
    assert res._repr_html_() == html  # the blocking sweep's result: the same view


def test_a_running_map_in_a_terminal_ipython_is_its_static_table(engine, scripted, ipshell):
    from IPython.display import display
    from IPython.utils.capture import capture_output

    from mlx_notebook.notebook.views.document import WIDGET_MIME

    res = _running_map(engine, scripted)
    with capture_output() as shown:  # the test shell is a terminal's: no kernel
        display(res)
    (out,) = shown.outputs
    assert WIDGET_MIME not in out.data and "map · 3 rows" in out.data["text/html"]
    res.cancel()
