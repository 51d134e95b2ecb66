"""The same session as a user meets it in Jupyter Notebook 7 (its own page, not Lab)."""

import re

import pytest

from .lab import run_cell, run_done, state_word, step, themed
from .test_lab import scripted_cell

SESSION = [
    scripted_cell("stream", "Streaming text arrives a token at a time. " * 300, delay=0.02),
    "%%generate -m stream -n 100000 --raw -f text\ngo",  # 2: streams, then Stop
    "topics = ['rivers', 'lakes', 'hills']",  # 3
    "%%generate -m {tiny} -n 12 --raw --over topics\nAbout {item}",  # 4: a table fills
    "%%generate -m {tiny} -n 16 --logprobs 3 --raw -f text\nHello",  # 5: the inspector
    (  # 6: a chat window on a model whose reply cannot end before Stop
        "import mlx_notebook\nfrom pathlib import Path\n"
        "from mlx_lm.utils import load_tokenizer\n"
        "from mlx_notebook.testing import looping_model\n"
        "tok = load_tokenizer(Path(TINY))\n"
        "river = looping_model(tok, ' The river runs on and on.', delay_s=0.02)\n"
        "mlx_notebook.Engine.default().register_model('river', river, tok)\n"
        "ui = mlx_notebook.ChatUI(model='river', max_tokens=3000)\nui"
    ),
    (  # 7: the Panel compares
        "panel = mlx_notebook.Panel(model=TINY, draft_source='lookup', lookup_ngram=1, "
        "chat=False, max_tokens=30, prompt='Hello world. Hello world. Hello')\npanel"
    ),
]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_the_session_in_notebook_7(lab, artifacts, theme):
    page, slug, out = themed(lab, SESSION, theme, app="notebook")
    assert "/notebooks/" in page.url  # Notebook 7's page for one notebook
    run_done(page, 0)
    run_done(page, 1, 30)

    # A generation streams and is stopped with the mouse.
    run_cell(page, 2)
    view = out(2).locator(".mlxnb-view")
    step("streams", lambda: view.count() == 1 and state_word(view) == "generating", 60)
    step("text arrives", lambda: len(view.locator(".txt").inner_text()) > 200, 30)
    page.screenshot(path=str(artifacts / f"notebook7-{slug}-streaming.png"))
    view.get_by_role("button", name="Stop", exact=True).click()
    step("stopped, as a document", lambda: state_word(out(2)) == "stopped", 30)
    step("no widget left", lambda: out(2).locator(".mlxnb-view").count() == 0, 10)
    assert len(out(2).locator(".txt").inner_text()) > 200  # the partial text is kept

    # A map's table fills, one row per item.
    run_done(page, 3, 30)
    run_cell(page, 4)
    step("3 rows done", lambda: "3/3 rows" in out(4).inner_text(), 120)
    assert out(4).locator("table.grid tr").count() >= 4  # header and three rows

    # The inspector: the saved document folds it; a token's card shows on hover.
    run_done(page, 5, 60)
    out(5).locator("summary", has_text="inspect").click()
    tokens = out(5).locator(".insp .tk")  # (not the legend's swatches)
    step("tinted tokens", lambda: tokens.count() >= 8, 10)
    tokens.nth(3).hover()
    step("a card on hover", lambda: tokens.nth(3).locator(".card").is_visible(), 10)
    page.screenshot(path=str(artifacts / f"notebook7-{slug}-inspect.png"))

    # The chat window sends and stops.
    run_cell(page, 6)
    widget = out(6).locator(".mlxnb-chatui")
    step("chat window", lambda: widget.count() == 1, 60)
    box = widget.get_by_label("Message")
    box.click()
    box.type("Tell me about rivers.")
    box.press("Enter")
    live = widget.locator(".turn.live")
    step("the reply streams", lambda: re.search(r"(\d+) tokens", live.inner_text(), re.I), 60)
    page.screenshot(path=str(artifacts / f"notebook7-{slug}-chat.png"))
    widget.locator("button:text-is('Stop')").click()
    last = widget.locator(".turn.assistant").last
    step("stopped", lambda: live.count() == 0 and "stopped" in last.inner_text().lower(), 30)
    assert last.locator(".md").inner_text().strip()  # the partial reply is kept

    # The Panel compares.
    run_cell(page, 7)
    panel = out(7).locator(".mlxnb-panel")
    step("panel rendered", lambda: panel.count() == 1, 60)
    panel.get_by_role("button", name="Compare").click()
    verdict = panel.locator(".mlxnb-compare")
    step("columns and verdict", lambda: "identical text in all" in verdict.inner_text(), 120)
    page.screenshot(path=str(artifacts / f"notebook7-{slug}-panel.png"))
