"""ChatUI as a user meets it: typed into and clicked in JupyterLab, saved, reopened."""

import re

import nbformat
import pytest

from .lab import (
    DREAMER,
    contrasts,
    lab_server,
    run_cell,
    run_done,
    set_theme,
    step,
    themed,
)

CHAT = [
    "import mlx_notebook\nui = mlx_notebook.ChatUI(max_tokens=40)\nui",  # 1: the default model
    "1+1",  # 2: the kernel answers while a reply streams
    "len(ui.chat.messages), len(ui.chat.branches)",  # 3
    (  # 4: a model whose reply cannot end before Stop (the default's may, or may finish)
        "from pathlib import Path\n"
        "from mlx_lm.utils import load_tokenizer\n"
        "from mlx_notebook.testing import looping_model\n"
        "tok = load_tokenizer(Path(TINY))\n"
        "river = looping_model(tok, ' The river runs on and on.', delay_s=0.02)\n"
        "mlx_notebook.Engine.default().register_model('river', river, tok)\n"
        "ui.chat.model = 'river'"
    ),
    "ui.chat.model = 'default'  # 5: the default model again",
    "ui.chat.delete(5);  # 6: another cell changes the chat",
]
SYSTEM = "You are a helpful assistant. Answer in one or two sentences."


SEEN = """w => ({
  idle: !w.classList.contains("cu-busy"),
  roles: [...w.querySelectorAll(".cu-log .turn:not(.live)")].map(e => e.className.split(" ")[1]),
  last: [...w.querySelectorAll(".cu-log .turn.assistant:not(.live) .role")].map(
    e => e.textContent.toLowerCase()).pop() || "",
})"""


def seen(widget):
    """What the widget shows, read at one instant: idle, the bubbles' roles, the last reply."""
    return widget.evaluate(SEEN)


def bubbles(widget):
    """The roles of the settled bubbles, in order."""
    return seen(widget)["roles"]


def done(widget, n):
    """Idle with ``n`` settled bubbles, the last a reply (read at one instant)."""
    s = seen(widget)
    return s["idle"] and len(s["roles"]) == n and s["roles"][-1] == "assistant"


def settings(widget, **values):
    """Open the settings row and type ``values`` (label: text), as a user does."""
    if not widget.locator(".cu-settings").evaluate("d => d.open"):
        widget.locator(".cu-settings summary").click()
    for label, text in values.items():
        box = widget.get_by_label(label, exact=True)
        box.fill(text)
        box.press("Tab")  # the change lands when the field is left


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_chat_ui_by_keyboard_and_mouse(lab, artifacts, theme, tmp_path):
    page, slug, out = themed(lab, CHAT, theme)
    run_done(page, 0)
    run_cell(page, 1)
    widget = out(1).locator(".mlxnb-chatui")
    step("the chat window", lambda: widget.is_visible(), 180)
    settings(widget, **{"System prompt": SYSTEM})
    box = widget.get_by_label("Message", exact=True)
    step("system prompt shown", lambda: bubbles(widget) == ["system"], 30)

    # Three messages by keyboard: Enter sends, Shift+Enter is a new line in the box.
    box.click()
    box.type("Hello! Who are you?")
    box.press("Shift+Enter")
    box.type("Say it briefly.")
    assert box.input_value() == "Hello! Who are you?\nSay it briefly."
    box.press("Enter")
    assert box.input_value() == ""
    assert page.evaluate("() => document.activeElement.getAttribute('aria-label')") == "Message"
    step("the reply streams as a bubble", lambda: widget.locator(".turn.live").count() == 1, 180)
    step("first reply done", lambda: done(widget, 3), 120)
    user = widget.locator(".turn.user").first.inner_text()
    assert "Who are you?" in user and "Say it briefly." in user
    box.type("What is the capital of France?")
    box.press("Enter")
    step("second reply done", lambda: done(widget, 5), 120)

    # A long reply: stopped mid-way, while the kernel answers another cell.
    run_done(page, 4, 60)
    settings(widget, **{"Max tokens": "600"})
    box.click()
    box.type("Write a long story about a river, in many paragraphs.")
    box.press("Enter")
    live = widget.locator(".turn.live")
    step("tokens stream", lambda: re.search(r"(\d+) tokens", live.inner_text(), re.I), 120)
    assert box.evaluate("b => b.readOnly") and not seen(widget)["idle"]  # the input waits
    run_done(page, 2, 60)
    assert out(2).inner_text().strip().endswith("2")
    assert live.count() == 1  # still streaming: the kernel was free
    widget.locator("button:text-is('Stop')").click()
    step("stopped", lambda: done(widget, 7) and "stopped" in seen(widget)["last"], 30)
    last = widget.locator(".turn.assistant").last
    assert "stopped" in last.locator(".role").inner_text().lower()
    assert last.locator(".md").inner_text().strip()  # the partial reply is kept
    assert not box.evaluate("b => b.readOnly")

    # Regenerate the stopped reply (at 40 tokens again), then edit the first message.
    run_done(page, 5, 30)
    settings(widget, **{"Max tokens": "40"})
    last.locator("button:text-is('Regenerate')").click()
    step("regenerated", lambda: done(widget, 7) and "stopped" not in seen(widget)["last"], 120)
    widget.locator(".turn.user").first.locator("button:text-is('Edit')").click()
    edit = widget.get_by_label("Edit message 1")
    assert "Who are you?" in edit.input_value()
    edit.fill("Hi! What can you do?")
    # The chat changes under the open edit (a cell deletes the last exchange): the
    # bubbles are redrawn, and the edit stays open with the text typed so far.
    run_done(page, 6, 30)
    two = ["system", "user", "assistant", "user", "assistant"]
    step("redrawn under the edit", lambda: bubbles(widget) == two, 30)
    assert edit.input_value() == "Hi! What can you do?"
    edit.press("Enter")
    step("branched", lambda: done(widget, 3), 120)
    figures = widget.locator(".turn.assistant .stats").last.inner_text()
    cached, total = map(int, re.search(r"(\d+) of (\d+) prompt tokens cached", figures).groups())
    assert cached > 0 and cached < total  # the system prompt came from the prompt cache
    run_done(page, 3, 30)
    assert "(3, 2)" in out(3).inner_text()  # the regenerate and the edit kept branches

    parts = ".cu-btn .act .role .md>p .stats .cu-title .cu-settings>summary".split()
    ratios = contrasts(page, ", ".join(f".mlxnb-chatui {p}" for p in parts))
    assert ratios and min(ratios) >= 4.5, ratios
    widget.screenshot(path=str(artifacts / f"chat-ui-{slug}.png"))

    if slug == "light":  # saved, then reopened without a kernel: the transcript stays
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        root = tmp_path / "root"
        step("saved", lambda: "saved transcript" in (root / "demo.ipynb").read_text(), 30)
        reopen(page.context.browser, root, tmp_path / "again", artifacts)


SHUT_DOWN = """async (token) => {
  const h = {Authorization: "token " + token};
  const sessions = await (await fetch("/api/sessions", {headers: h})).json();
  for (const s of sessions) await fetch("/api/sessions/" + s.id, {method: "DELETE", headers: h});
}"""


def reopen(b, root, again, artifacts):
    """Open the saved notebook on a second server with no kernel, in a new page."""
    nb = nbformat.read(root / "demo.ipynb", as_version=4)
    nb.metadata["kernelspec"] = {"name": "mlxnb-no-such-kernel", "display_name": "none"}
    again.mkdir()
    from nbformat.sign import NotebookNotary  # your own notebook: trusted, as Lab signs it

    data = again.parent / (again.name + "-jupyter") / "data"
    data.mkdir(parents=True)
    NotebookNotary(data_dir=str(data)).sign(nb)
    nbformat.write(nb, again / "demo.ipynb")
    with lab_server(again) as (base, token):
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{base}/lab/tree/demo.ipynb?token={token}")
        # Lab may ask for a kernel or start its default one: either way, none runs.
        cells = page.locator(".jp-Notebook .jp-Cell")
        step("the notebook opens", lambda: cells.count() == len(CHAT) + 1, 90)
        dialog, kernel = page.locator(".jp-Dialog"), page.locator(".jp-Toolbar-kernelName").first

        def no_kernel():  # whenever Lab gets round to starting one, it is shut down
            if dialog.count():
                dialog.first.press("Escape")
            page.evaluate(SHUT_DOWN, token)
            return "No Kernel" in kernel.inner_text()

        step("no kernel", no_kernel, 90)
        saved = page.locator(".mlxnb-snapshot .mlxnb-chat")
        step("the saved transcript shows", lambda: saved.count() == 1 and saved.is_visible(), 60)
        text = page.locator(".jp-Notebook").inner_text()
        assert "Error displaying widget" not in text and "Loading widget" not in text
        assert saved.locator(".turn").count() == 3 and "What can you do?" in saved.inner_text()
        assert saved.locator("button").count() == 0
        bubble = saved.locator(".turn.user").first  # styled as the live bubbles
        assert bubble.evaluate("e => getComputedStyle(e).borderRadius") == "8px"
        for theme in ("JupyterLab Light", "JupyterLab Dark"):
            set_theme(page, theme)
            ratios = contrasts(page, ".mlxnb-snapshot .mlxnb-chat :is(.role, .md p, .stats, .hdr)")
            assert ratios and min(ratios) >= 4.5, (theme, ratios)
            slug = theme.split()[-1].lower()
            saved.screenshot(path=str(artifacts / f"chat-ui-saved-{slug}.png"))


THINK = [
    DREAMER,  # 1
    "ui = mlx_notebook.ChatUI(model='dreamer', max_tokens=100000)\nui",  # 2
]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_chat_ui_thinking_then_stop_thinking(lab, artifacts, theme):
    # A reasoning model's thinking streams open above the answer; Stop thinking ends it,
    # the model answers, and the thinking folds away.
    page, slug, out = themed(lab, ["import mlx_notebook", *THINK], theme)
    for i in range(3):
        run_done(page, i, 60)
    run_cell(page, 3)
    widget = out(3).locator(".mlxnb-chatui")
    step("the chat window", lambda: widget.is_visible(), 60)
    box = widget.get_by_label("Message", exact=True)
    box.click()
    box.type("Where do rivers go?")
    box.press("Enter")
    think = widget.get_by_role("button", name="Stop thinking")
    step("Stop thinking offered while it reasons", lambda: think.is_visible(), 60)
    live = widget.locator(".turn.live")
    step("the thinking streams", lambda: "flow flow flow" in live.inner_text(), 30)
    assert live.locator("details.think").evaluate("d => d.open")
    assert "thinking…" in live.inner_text()
    widget.screenshot(path=str(artifacts / f"chat-ui-thinking-{slug}.png"))
    think.click()
    step("it answers", lambda: done(widget, 2), 30)
    reply = widget.locator(".turn.assistant").last
    assert reply.locator(".md").inner_text().strip() == "Paris"
    fold = reply.locator("details.think")
    assert not fold.evaluate("d => d.open") and "thinking (" in fold.inner_text()
    assert not think.is_visible()
    ratios = contrasts(page, ".mlxnb-chatui details.think summary, .mlxnb-chatui .role")
    assert ratios and min(ratios) >= 4.5, ratios


SCROLL = [
    (  # 1: a conversation of three long exchanges, made from code, then its window
        "import mlx_notebook\n"
        "from pathlib import Path\n"
        "from mlx_lm.utils import load_tokenizer\n"
        "from mlx_notebook.testing import looping_model\n"
        "tok = load_tokenizer(Path(TINY))\n"
        "river = looping_model(tok, ' The river runs on and on.', delay_s=0.002)\n"
        "mlx_notebook.Engine.default().register_model('river', river, tok)\n"
        "chat = mlx_notebook.Chat(model='river', max_tokens=600)\n"
        "for q in ('One?', 'Two?', 'Three?'):\n"
        "    chat.ask(q)\n"
        "len(chat.messages)"
    ),
    "ui = mlx_notebook.ChatUI(chat)\nui",  # 2: the window opens on the newest message
    "ui.max_tokens = 600",  # 3: a long reply next
    "chat.ask('Five?');",  # 4: a reply sent from code while the user reads above
]

AT_BOTTOM = "l => l.scrollHeight - l.scrollTop - l.clientHeight < 4"


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_chat_ui_follows_the_newest_message(lab, artifacts, theme):
    page, slug, out = themed(lab, SCROLL, theme)
    run_done(page, 0)
    run_done(page, 1, 120)
    assert "6" in out(1).inner_text()  # three exchanges
    run_cell(page, 2)
    widget = out(2).locator(".mlxnb-chatui")
    log = widget.locator(".cu-log")
    step("the chat window", lambda: widget.is_visible(), 60)
    dims = "l => [l.scrollHeight, l.clientHeight, getComputedStyle(l).maxHeight, innerHeight]"
    step(
        "its log overflows",
        lambda: log.evaluate("l => l.scrollHeight > l.clientHeight + 50"),
        describe=lambda: log.evaluate(dims),
    )
    step("opened at the newest message", lambda: log.evaluate(AT_BOTTOM), 10)
    widget.screenshot(path=str(artifacts / f"chat-ui-scrolled-{slug}.png"))

    # Sent from the window: the message and its reply stay in view while it streams.
    run_done(page, 3)
    box = widget.get_by_label("Message", exact=True)
    box.click()
    box.type("Four?")
    box.press("Enter")
    live = widget.locator(".turn.live")
    step("streaming", lambda: re.search(r"(\d+) tokens", live.inner_text() or "", re.I), 60)
    for _ in range(5):  # several refreshes, each still at the bottom
        assert log.evaluate(AT_BOTTOM)
        page.wait_for_timeout(150)
    step("done", lambda: done(widget, 8), 120)
    assert log.evaluate(AT_BOTTOM)

    # Scrolled up to read: a reply streaming meanwhile leaves the reader where they are.
    log.evaluate("l => { l.scrollTop = 0; }")
    page.wait_for_timeout(100)
    run_cell(page, 4)
    step("it streams", lambda: live.count() == 1, 60)
    page.wait_for_timeout(500)
    assert log.evaluate("l => l.scrollTop") < 5
    step("it ends", lambda: done(widget, 10), 120)
    assert log.evaluate("l => l.scrollTop") < 5
