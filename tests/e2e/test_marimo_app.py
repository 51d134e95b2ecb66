"""mlx_notebook in marimo, as a user meets it: ``marimo edit`` (cells run with the Run
button) and ``marimo run`` (an app), clicked in Chromium. The session of the JupyterLab
and Notebook 7 tests: a generation streams and is stopped, a map's table fills, the
inspector shows a card on hover, a comparison from Python ends with its verdict, the
Panel compares, the chat window sends and stops."""

import re

import pytest

from .lab import browser, step
from .marimo_app import marimo_server

NOTEBOOK = """
import marimo

app = marimo.App()


@app.cell
def _():
    import tempfile
    from pathlib import Path

    import marimo as mo
    import mlx_notebook
    from mlx_lm.utils import load_tokenizer
    from mlx_notebook.testing import looping_model

    tok = load_tokenizer(Path({tiny!r}))
    river = looping_model(tok, " The river runs on and on.", 0.02)  # never ends by itself
    mlx_notebook.Engine.default().register_model("river", river, tok)
    return mlx_notebook, mo


@app.cell
def _(mlx_notebook):
    h = mlx_notebook.stream("Hello", model="river", max_tokens=100000)
    h
    return (h,)


@app.cell
def _(mlx_notebook):
    rows = mlx_notebook.map(["one", "two", "three"], model="river", max_tokens=60, wait=False)
    rows
    return


@app.cell
def _(mlx_notebook):
    mlx_notebook.score("The quick brown fox jumps.", model={tiny!r})
    return


@app.cell
def _(mlx_notebook):
    cmp = mlx_notebook.compare("Hello world. Hello world. Hello", model={tiny!r}, chat=False,
                               max_tokens=20, repeats=2, wait=False)
    cmp
    return


@app.cell
def _(mlx_notebook):
    panel = mlx_notebook.Panel(model={tiny!r}, draft_source="lookup", lookup_ngram=1,
                               chat=False, max_tokens=30, prompt="Hello world. Hello world. Hello")
    panel
    return


@app.cell
def _(mlx_notebook, mo):
    ui = mo.ui.anywidget(mlx_notebook.ChatUI(model="river", max_tokens=3000))
    ui
    return


if __name__ == "__main__":
    app.run()
"""


@pytest.mark.parametrize(("mode", "theme"), [("edit", "light"), ("edit", "dark"), ("run", "light")])
def test_a_generation_streams_and_stops_and_the_chat_window_answers(
    tmp_path, tiny_dir, chromium, artifacts, mode, theme
):
    nb = tmp_path / "live.py"
    nb.write_text(NOTEBOOK.format(tiny=tiny_dir))
    with marimo_server(nb, mode, theme) as base, browser() as b:
        page = b.new_page(viewport={"width": 1300, "height": 1000})
        page.set_default_timeout(30_000)
        page.goto(base)
        views = page.locator(".mlxnb-view:not(.pn-run)")  # (a Panel's run area is one too)
        view = views.first  # the cells' order: the generation, then the map
        if mode == "edit":  # marimo edit opens with its cells not yet run
            run_all = page.get_by_test_id("run-button").last
            step("the notebook's Run button", lambda: run_all.is_visible(), 60)
            for _ in range(6):  # a click before the kernel has connected does nothing
                run_all.click()
                try:
                    step("the cells run", lambda: view.count() == 1, 15)
                    break
                except AssertionError:
                    continue
        try:
            step("the live view", lambda: view.count() == 1, 90)
        except AssertionError:
            page.screenshot(path=str(artifacts / f"failure-marimo-{mode}-{theme}.png"))
            raise
        step("text streams", lambda: "generating" in view.inner_text(), 30)
        step("more text", lambda: view.inner_text().count("on and on") >= 5, 30)
        page.screenshot(path=str(artifacts / f"marimo-{mode}-{theme}-streaming.png"))
        view.get_by_role("button", name="Stop", exact=True).click()
        step("stopped", lambda: "· stopped" in view.inner_text(), 30)
        kept = view.inner_text().count("on and on")
        assert kept >= 5  # the partial text stays
        page.wait_for_timeout(500)
        assert view.inner_text().count("on and on") == kept  # and nothing more comes

        # The map's table fills, row by row, and ends as the table of every row.
        table = views.nth(1)
        step("the map's live table", lambda: "map over 3 rows" in table.inner_text(), 60)
        step("every row", lambda: "3/3 rows" in table.inner_text(), 60)
        step("the rows' text", lambda: table.inner_text().count("on and on") >= 3, 30)
        table.scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / f"marimo-{mode}-{theme}-map.png"))

        # The inspector: a card on hover.
        insp = page.locator(".mlxnb .insp").first
        insp.scroll_into_view_if_needed()
        assert "quick brown fox" in insp.inner_text()  # (the first token has no context)
        assert not insp.locator(".card").first.is_visible()
        insp.locator(".tk").nth(2).hover()
        step("a card on hover", lambda: insp.locator(".card").nth(2).is_visible(), 10)
        page.screenshot(path=str(artifacts / f"marimo-{mode}-{theme}-inspector.png"))

        # A comparison called from Python, shown live, ends with its verdict.
        compared = page.locator(".mlxnb-view:not(.pn-run) .mlxnb-compare").first
        step(
            "compare(wait=False)",
            lambda: "identical text in all 4 runs" in compared.inner_text(),
            60,
        )

        # The Panel compares.
        panel = page.locator(".mlxnb-panel")
        panel.scroll_into_view_if_needed()
        panel.get_by_role("button", name="Compare").click()
        verdict = panel.locator(".mlxnb-compare")
        step("the verdict", lambda: "identical text in all" in verdict.inner_text(), 90)
        step(
            "the panel is free again",
            lambda: panel.get_by_role("button", name="Compare").is_enabled(),
            30,
        )
        verdict.scroll_into_view_if_needed()  # (marimo scrolls a tall output in its box)
        page.screenshot(path=str(artifacts / f"marimo-{mode}-{theme}-panel.png"))

        chat = page.locator(".mlxnb-chatui")
        box = chat.get_by_label("Message")
        box.click()
        box.type("Tell me about rivers.")
        box.press("Enter")
        live = chat.locator(".turn.live")
        step("the reply streams", lambda: re.search(r"\d+ tokens", live.inner_text()), 60)
        chat.locator("button:text-is('Stop')").click()
        last = chat.locator(".turn.assistant").last
        step("reply stopped", lambda: live.count() == 0 and "stopped" in last.inner_text().lower())
        assert last.locator(".md").inner_text().strip()
        page.screenshot(path=str(artifacts / f"marimo-{mode}-{theme}-chat.png"))
