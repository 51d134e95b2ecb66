"""Which views are ipywidgets: only the Panel and %%evaluate's per-column Stop row.

Every other view is an anywidget (the live views, the chat window) or static HTML,
so it runs where anywidgets run (marimo refuses plain ipywidgets). This test walks
the notebook layer's imports: a new view built on ipywidgets fails here.
"""

import ast
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[2] / "mlx_notebook" / "notebook"
STILL_IPYWIDGETS = {"panel/panel.py", "panel/controls.py", "evaluate/cell.py"}


def _imports_ipywidgets(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "ipywidgets" for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ipywidgets":
            return True
    return False


def test_only_the_panel_and_the_evaluate_row_use_ipywidgets():
    users = {
        p.relative_to(NOTEBOOK).as_posix() for p in NOTEBOOK.rglob("*.py") if _imports_ipywidgets(p)
    }
    assert users == STILL_IPYWIDGETS


def test_the_live_views_and_the_chat_window_are_anywidgets():
    from anywidget import AnyWidget

    from mlx_notebook.notebook.chat_ui.widget import ChatUI
    from mlx_notebook.notebook.live.widget import LiveWidget

    assert issubclass(LiveWidget, AnyWidget) and issubclass(ChatUI, AnyWidget)
