"""The product as a user meets it: JupyterLab in headless Chromium, clicked with the mouse."""

import nbformat
import pytest

from .lab import browser, lab_server, leftovers, step

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
EVIL = '<img src=x onerror="window.__pwned=1"> and <script>window.__pwned=2</script>'


def notebook(path, tiny_dir):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    cells = [
        "%load_ext mlx_notebook",
        f"%%generate -m {tiny_dir} -n 100000 --raw -f text\nHello",
        "1+1",
        (
            "from pathlib import Path\n"
            "from mlx_lm.utils import load_tokenizer\n"
            "from mlx_notebook import Engine\n"
            "from mlx_notebook.testing import ScriptedModel, script_rule\n"
            f"tok = load_tokenizer(Path({tiny_dir!r}))\n"
            f"out = tok.encode({EVIL!r}, add_special_tokens=False) + [tok.eos_token_id]\n"
            "n = len(tok.encode('show it', add_special_tokens=False))\n"
            "Engine.default().register_model('evil', ScriptedModel(len(tok.get_vocab()), "
            "script_rule(n, out, tok.eos_token_id)), tok)\n'registered'"
        ),
        "%%generate -m evil --raw\nshow it",
        (
            "import mlx_notebook\n"
            f"panel = mlx_notebook.Panel(model={tiny_dir!r}, draft_source='lookup', "
            "lookup_ngram=1, chat=False, max_tokens=40)\npanel"
        ),
    ]
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)


def run_cell(page, i, tries=4):
    """Run cell ``i`` the way a user does; retry if the keypress was lost while Lab settled."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(i)
    prompt = cell.locator(".jp-InputPrompt")
    before = prompt.inner_text().strip()
    for _ in range(tries):
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+Enter")
        try:
            step(f"cell {i} starts", lambda: prompt.inner_text().strip() != before, 5)
            return cell
        except AssertionError:
            continue
    raise AssertionError(f"step 'run cell {i}' stalled: the cell never started")


@pytest.fixture
def lab(request, tmp_path, tiny_dir, chromium, artifacts):
    root = tmp_path / "root"
    root.mkdir()
    notebook(root / "demo.ipynb", tiny_dir)
    with lab_server(root) as (base, token), browser() as b:
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(30_000)
        page.goto(f"{base}/lab/tree/demo.ipynb?token={token}")
        step("open the notebook", lambda: page.locator(".jp-Notebook .jp-Cell").count() == 6, 90)
        step(
            "kernel ready",
            lambda: page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count() > 0,
            90,
        )
        dismiss_news(page)
        yield page
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            page.screenshot(path=str(artifacts / f"failure-{request.node.name}.png"))


def dismiss_news(page):
    # JupyterLab's first-run "get notified about news?" toast covers part of the page.
    try:
        page.get_by_role("button", name="No", exact=True).click(timeout=3000)
    except Exception:
        pass


def view_state(view):
    return view.locator(".mlxnb .state").first.inner_text()


def test_generate_stream_stop_and_escaping(lab, artifacts):
    page = lab
    load = run_cell(page, 0)
    step(
        "%load_ext finished",
        lambda: load.locator(".jp-InputPrompt").inner_text().strip() not in ("[ ]:", "[*]:", ""),
        60,
    )

    cell = run_cell(page, 1)
    view = cell.locator(".mlxnb-view")
    step("view rendered (widget manager loaded)", lambda: view.count() == 1, 60)
    step(
        "streamed text visible",
        lambda: view_state(view) == "generating" and len(view.locator(".txt").inner_text()) > 200,
        60,
    )
    page.screenshot(path=str(artifacts / "streaming.png"), full_page=False)

    view.get_by_role("button", name="Stop").click()  # with the mouse, as a user would
    step("view shows stopped", lambda: view_state(view) == "stopped", 30)
    partial = view.locator(".txt").inner_text()
    assert len(partial) > 200
    button = view.locator("button")
    step("Stop button disabled", lambda: button.is_disabled(), 10)
    assert "Stopped" in button.inner_text()
    assert "cancelled" in view.locator(".stats").inner_text()
    page.screenshot(path=str(artifacts / "stopped.png"), full_page=False)

    follow = run_cell(page, 2)
    step(
        "next cell prints 2",
        lambda: follow.locator(".jp-OutputArea-output").inner_text().strip() == "2",
        20,
    )

    reg = run_cell(page, 3)
    step(
        "scripted model registered",
        lambda: "registered" in reg.locator(".jp-OutputArea-output").inner_text(),
        30,
    )
    evil = run_cell(page, 4)
    ev = evil.locator(".mlxnb-view")
    step("scripted output finished", lambda: ev.count() == 1 and view_state(ev) == "done", 30)
    shown = ev.locator(".mlxnb").inner_text()
    assert '<img src=x onerror="window.__pwned=1">' in shown and "<script>" in shown
    assert ev.locator(".mlxnb img, .mlxnb script").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    ev.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "escaped.png"), full_page=False)


def test_panel_compare(lab, artifacts):
    page = lab
    run_cell(page, 0)
    cell = run_cell(page, 5)
    panel = cell.locator(".mlxnb-panel")
    step("panel rendered", lambda: panel.count() == 1, 60)
    prompt = panel.locator("textarea").first
    prompt.click()
    prompt.fill("Hello world. The quick brown fox. Hello world. The quick brown fox. Hello")
    panel.get_by_role("button", name="Compare").click()
    verdict = panel.locator(".mlxnb-compare")
    step("both columns and the verdict", lambda: "identical text" in verdict.inner_text(), 90)
    text = verdict.inner_text()
    assert "speedup" in text and "×" in text
    assert verdict.locator("td").count() == 2
    verdict.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "panel_compare.png"), full_page=False)


def test_server_and_kernels_are_torn_down(tmp_path, tiny_dir, chromium):
    root = tmp_path / "root"
    root.mkdir()
    notebook(root / "demo.ipynb", tiny_dir)
    state = tmp_path / "root-jupyter"
    with lab_server(root) as (base, token), browser() as b:
        page = b.new_page()
        page.goto(f"{base}/lab/tree/demo.ipynb?token={token}")
        step(
            "kernel started",
            lambda: any("ipykernel" in open(f"/proc/{p}/cmdline").read() for p in leftovers(state)),
            90,
        )
    assert leftovers(state) == []
