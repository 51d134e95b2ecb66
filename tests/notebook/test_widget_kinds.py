"""No view is an ipywidgets view: every live one is an anywidget, the rest static HTML.

The live views (generation, ``--over`` table, Compare/Sweep, ``%%evaluate`` with
its per-column Stop row), the Panel and the chat window are anywidgets, so they
run where anywidgets run (marimo refuses plain ipywidgets). This test walks the
notebook layer's imports: a new view built on ipywidgets fails here.
"""

import ast
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[2] / "mlx_notebook" / "notebook"


def _imports_ipywidgets(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "ipywidgets" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ipywidgets":
            return True
    return False


def test_no_module_of_the_notebook_layer_uses_ipywidgets():
    users = {
        p.relative_to(NOTEBOOK).as_posix() for p in NOTEBOOK.rglob("*.py") if _imports_ipywidgets(p)
    }
    assert users == set()


def test_the_live_views_the_panel_and_the_chat_window_are_anywidgets():
    from anywidget import AnyWidget

    from mlx_notebook.notebook.chat_ui.widget import ChatUI
    from mlx_notebook.notebook.live.widget import LiveWidget
    from mlx_notebook.notebook.panel.panel import Panel

    for cls in (LiveWidget, ChatUI, Panel):
        assert issubclass(cls, AnyWidget) and cls._esm.strip(), cls
