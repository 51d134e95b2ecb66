"""The notebook layer in a REAL kernel: streaming, Stop via comm message, queueing, interrupt."""

import statistics
import time

import pytest

from tests.kernel_harness import ENDLESS, Harness

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def kernel(tiny_dir):
    h = Harness()
    try:
        r = h.execute("%load_ext mlx_notebook")
        assert r["status"] == "ok"
        assert h.execute(ENDLESS.format(tiny=tiny_dir))["status"] == "ok"
        yield h
    finally:
        h.close()


def new_views(k, before):
    """(view ids, view ids) of the live views opened since ``before`` (a set of comm ids).

    A live view is one widget: its HTML (folded from deltas by the harness as its
    script does) and its Stop button.
    """
    views = [c for c in k.views() if c not in before and "mlxnb" in (k.value(c, "value") or "")]
    return views, views


def start(k, line, prompt="Hello"):
    before = set(k.state)
    msg_id = k.execute(f"%%generate {line}\n{prompt}", wait=False)
    return msg_id, before


def view_of(k, before, n=1):
    def found():
        h, b = new_views(k, before)
        return (h, b) if len(h) >= n and len(b) >= n else None

    return k.wait_for(f"{n} new generation view(s)", found)


def test_stream_then_stop_by_comm_click(kernel, tiny_dir):
    k = kernel
    msg_id, before = start(k, "-m endless -n 100000 --raw")
    reply = k.reply(msg_id, 30)
    assert reply["status"] == "ok"  # the cell returned at once
    (html,), (button,) = view_of(k, before)
    k.wait_for("streamed text", lambda: "generating" in (k.value(html, "value") or ""))
    t_first = time.monotonic()
    time.sleep(2.0)
    k.click(button)
    k.wait_for("stopped state", lambda: "stopped" in (k.value(html, "value") or ""))
    k.wait_for("button disabled", lambda: k.value(button, "stopping") is True)
    final = k.value(html, "value")
    assert 'class="md"' in final and final.count("and on") > 10  # partial text kept, as markdown
    # The view was sent deltas: each update carries what changed (a few tokens, the
    # header's figures), and the whole view only at updates 1, 4, 16, 64, ...
    sizes = {
        kind: [n for c, kd, n in k.live_msgs if c == html and kd == kind]
        for kind in ("delta", "full")
    }
    assert len(sizes["full"]) <= 1 + len(sizes["delta"]).bit_length() // 2
    # ~200 tokens: a resent view would make the median update half the final's size.
    assert statistics.median(sizes["delta"]) < 200 < len(final) / 2
    # the output becomes a document: static HTML and text, no widget reference
    doc = k.wait_for("final document", lambda: k.final_output(msg_id))
    assert "application/vnd.jupyter.widget-view+json" not in doc
    assert "stopped" in doc["text/html"] and doc["text/plain"].endswith(" · stopped")
    # at most 20 updates/s of the view, whatever the token rate (100 tokens/s here).
    # Times are when this client read them: half a second of slack for a busy
    # machine delaying the first ones, still far under one update per token.
    ups = [t for t, cid, st in k.updates if cid == html and "value" in st]
    span = ups[-1] - ups[0]
    assert len(ups) <= 20 * (span + 0.5) + 3, (len(ups), span)
    assert ups[-1] - t_first > 0.5
    # the kernel is responsive
    mid = k.execute("1+1", wait=False)
    assert k.reply(mid, 10)["status"] == "ok"  # the kernel is free (usually ~10 ms)
    k.wait_for("the result", lambda: "2" in k.texts(mid), 5)
    # and the next generation works
    msg_id, before = start(k, f"-m {tiny_dir} -n 20 --raw -o second")
    (html2,), _ = view_of(k, before)
    k.wait_for(
        "second generation done", lambda: "done (max tokens)" in (k.value(html2, "value") or "")
    )
    _, out = k.output("print(second.finish_reason, second.stats.generation_tokens)", 10)
    assert "length 20" in out


def test_two_cells_stream_concurrently_and_stop_one(kernel, tiny_dir):
    k = kernel
    m1, b1 = start(k, "-m endless -n 100000 --raw")
    k.reply(m1)
    (h1,), (s1,) = view_of(k, b1)
    k.wait_for("first generating", lambda: "generating" in (k.value(h1, "value") or ""))
    m2, b2 = start(k, "-m endless -n 100000 --raw", prompt="Rivers flow")
    k.reply(m2)
    (h2,), (s2,) = view_of(k, b2)
    # The second streams while the first is still generating: no queue between them.
    k.wait_for("second generating", lambda: "generating" in (k.value(h2, "value") or ""))
    assert "generating" in k.value(h1, "value")
    k.click(s1)
    k.wait_for("first stopped", lambda: "stopped" in (k.value(h1, "value") or ""))
    before = len(k.value(h2, "value"))
    k.wait_for("second still streaming", lambda: len(k.value(h2, "value") or "") > before + 200)
    assert "generating" in k.value(h2, "value")
    k.click(s2)
    k.wait_for("second stopped", lambda: "stopped" in (k.value(h2, "value") or ""))


SLOW_MODEL = """
import mlx_notebook
from pathlib import Path
from mlx_lm.utils import load_tokenizer
from mlx_notebook.testing import ScriptedModel
tok = load_tokenizer(Path({tiny!r}))
fill = tok.encode(" x", add_special_tokens=False)[0]
eng = mlx_notebook.Engine.default()
eng.call(lambda: eng.registry.register(
    "slowk", ScriptedModel(len(tok.get_vocab()), lambda p, t: fill, delay_s=0.05), tok
)).result()
topics = ["rivers", "mountains", "lakes", "forests", "deserts", "islands"]
%config MLXNotebook.max_batch = 2
"""


def test_over_shows_one_view_and_stop_keeps_finished_rows(kernel, tiny_dir):
    k = kernel
    assert k.execute(SLOW_MODEL.format(tiny=tiny_dir))["status"] == "ok"
    try:
        m, before = start(k, "-m slowk --raw -n 12 --over topics -o res", prompt="About {item}")
        assert k.reply(m)["status"] == "ok"
        (html,), (stop,) = view_of(k, before)
        k.wait_for("two rows done", lambda: "2/6 rows" in (k.value(html, "value") or ""), 30)
        assert len(view_of(k, before)[0]) == 1  # one view for all rows
        k.click(stop)
        k.wait_for("stopped", lambda: "stopped" in (k.value(html, "value") or ""))
        doc = k.wait_for("final document", lambda: k.final_output(m))
        assert "row 0" in doc["text/plain"] and "map over 6 rows" in doc["text/html"]
        code = "print([r.finish_reason for r in res], [len(r.text) > 0 for r in res][:2])"
        _, out = k.output(code, 10)
        reasons = eval(out.split("]")[0] + "]")  # noqa: S307 - our own printed list
        assert reasons[:2] == ["length", "length"] and "cancelled" in reasons
        assert "[True, True]" in out
    finally:
        k.execute("%config MLXNotebook.max_batch = 8")


def test_queueing_two_cells(kernel, tiny_dir):
    k = kernel
    # With batching off, cells queue first come, first served.
    assert k.execute("%config MLXNotebook.max_batch = 1")["status"] == "ok"
    try:
        _queueing_two_cells(k, tiny_dir)
    finally:
        k.execute("%config MLXNotebook.max_batch = 8")


def _queueing_two_cells(k, tiny_dir):
    m1, b1 = start(k, "-m endless -n 100000 --raw")
    k.reply(m1)
    (h1,), (s1,) = view_of(k, b1)
    k.wait_for("first generating", lambda: "generating" in (k.value(h1, "value") or ""))
    m2, b2 = start(k, f"-m {tiny_dir} -n 10 --raw")
    k.reply(m2)
    (h2,), (s2,) = view_of(k, b2)
    k.wait_for("second queued", lambda: "queued (1 ahead" in (k.value(h2, "value") or ""))
    # a third, stopped while queued, never runs
    m3, b3 = start(k, f"-m {tiny_dir} -n 10 --raw")
    k.reply(m3)
    (h3,), (s3,) = view_of(k, b3)
    k.wait_for("third queued", lambda: "queued (2 ahead" in (k.value(h3, "value") or ""))
    k.click(s3)
    k.wait_for("third stopped", lambda: "stopped" in (k.value(h3, "value") or ""))
    k.click(s1)
    k.wait_for("second done", lambda: "done (max tokens)" in (k.value(h2, "value") or ""))
    assert "stopped" in k.value(h1, "value")
    assert 'class="stats"' not in k.value(h3, "value") or "0 tokens" in k.value(h3, "value")


def test_wait_then_kernel_interrupt_stops_run_all(kernel, tiny_dir):
    # Run All: the --wait cell and the next one are queued together, as JupyterLab does.
    k = kernel
    msg_id, before = start(k, "-m endless -n 100000 --raw --wait -o waited")
    after = k.execute('print("after")', wait=False)
    (html,), (button,) = view_of(k, before)
    k.wait_for(
        "streaming while the cell blocks", lambda: "generating" in (k.value(html, "value") or "")
    )
    time.sleep(0.5)
    k.interrupt()
    reply = k.reply(msg_id, 20)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    assert k.reply(after, 20)["status"] == "aborted"  # Run All stopped there
    assert "after" not in k.texts(after)
    k.wait_for("stopped after interrupt", lambda: "stopped" in (k.value(html, "value") or ""))
    _, out = k.output("print(waited.finish_reason, len(waited.text) > 0)", 10)
    assert "cancelled True" in out  # stopped, its text kept
    # the engine is usable at once
    mid = k.execute(f"%%generate -m {tiny_dir} -n 5 --raw --wait -o after\nHi", wait=False)
    assert k.reply(mid, 30)["status"] == "ok"
    _, out = k.output("print(after.finish_reason)", 10)
    assert "length" in out


def test_handle_wait_in_later_cell_can_be_interrupted(kernel, tiny_dir):
    k = kernel
    m, before = start(k, "-m endless -n 100000 --raw -o bg")
    k.reply(m)
    view_of(k, before)
    mid = k.execute("bg.wait()", wait=False)
    k.started(mid)  # interrupt the wait, not something before it
    time.sleep(0.5)
    k.interrupt()
    reply = k.reply(mid, 20)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    # A request that reaches ipykernel while it clears its queue after the error is
    # answered "aborted" (as Run All stops); on a loaded machine the next cell can be one.
    for _ in range(10):
        if k.output("pass", 10, quiet=True)[0]["status"] == "ok":
            break
    # Wait for the job's end rather than a fixed time: on a loaded machine the worker
    # can take seconds to reach its next cancel point after the interrupt.
    reply, out = k.output("bg.wait(); print(bg.finish_reason)", 60)
    assert "cancelled" in out, (reply, out)


def test_interrupt_on_an_idle_kernel_stops_streaming_generations(kernel, tiny_dir):
    k = kernel
    views = []
    for name in ("idle1", "idle2"):
        m, before = start(k, f"-m endless -n 100000 --raw -o {name}")
        assert k.reply(m)["status"] == "ok"  # the cell is done; its view streams on
        views.append(view_of(k, before)[0][0])
    k.wait_for("both streaming", lambda: all(
        "generating" in (k.value(v, "value") or "") for v in views
    ))  # fmt: skip
    t0 = time.monotonic()
    k.interrupt()  # ■ with no cell running
    k.wait_for("both stopped", lambda: all("stopped" in (k.value(v, "value") or "") for v in views))
    stopped_after = time.monotonic() - t0
    assert stopped_after < 10  # usually well under 1 s; the view refreshes at 20 Hz
    _, out = k.output("print(idle1.finish_reason, idle2.finish_reason, len(idle1.text) > 0)")
    assert "cancelled cancelled True" in out
    # Nothing else changed: the next cell runs, and ■ during a --wait still interrupts it.
    _, out = k.output("print(1 + 1)")
    assert "2" in out


def test_unloading_restores_the_idle_interrupt_handler(kernel, tiny_dir):
    k = kernel
    probe = (
        "import signal\nk = get_ipython().kernel\n"
        "print(getattr(k.saved_sigint_handler, 'mlx_notebook', False))"
    )
    _, out = k.output(probe)
    assert "True" in out
    k.output("%unload_ext mlx_notebook", quiet=True)
    _, out = k.output(probe)
    assert "False" in out
    _, out = k.output(
        "import signal\nprint(get_ipython().kernel.saved_sigint_handler is signal.SIG_IGN)"
    )
    assert "True" in out  # ipykernel's own idle handler is back
    k.output("%load_ext mlx_notebook", quiet=True)
    _, out = k.output(probe)
    assert "True" in out


def test_run_all_reads_finished_results_in_the_next_cells(kernel, tiny_dir):
    """Cells sent back to back, as Run All sends them: reads wait for the generations."""
    k = kernel
    frame = "import pandas as pd\ndf = pd.DataFrame({'topic': ['rivers', 'lakes', 'seas']})"
    k.output(frame, quiet=True)
    first = k.execute("%%generate -m endless --raw -n 40 --over df -o res\nAbout {topic}",
                      wait=False)  # fmt: skip
    second = k.execute("%%generate -m endless --raw -n 60 -o h\nHello", wait=False)
    third = k.execute(
        "f = res.to_frame()\nprint(f['finish_reason'].tolist(), f['generation_tokens'].tolist())\n"
        "print(h.finish_reason, h.stats.generation_tokens, len(h.text) == len(h.partial_text))",
        wait=False,
    )
    assert [k.reply(m)["status"] for m in (first, second, third)] == ["ok"] * 3
    k.idle(third)
    k.wait_for("the third cell's output", lambda: "length" in k.texts(third))
    out = k.texts(third)
    assert "['length', 'length', 'length'] [40, 40, 40]" in out
    assert "length 60 True" in out


def test_mlx_status_in_kernel(kernel):
    _, out = kernel.output("%mlx status", 10)
    assert "device: cpu" in out or "device: gpu" in out
    assert "BLAS acceleration" in out


def test_panel_compare_by_comm_click(kernel, tiny_dir):
    k = kernel
    before = set(k.state)
    code = (
        "import mlx_notebook\n"
        f"panel = mlx_notebook.Panel(prompt='Hello world. Hello world. Hello', model={tiny_dir!r},"
        " draft_source='lookup', lookup_ngram=1, max_tokens=30, chat=False, max_pairs=3)\npanel"
    )
    assert k.execute(code)["status"] == "ok"
    (cid,) = k.wait_for(
        "the panel",
        lambda: [c for c in k.widgets("AnyModel", kind="panel") if c not in before],
    )
    assert "compare" not in k.value(cid, "off")
    k.click(cid, "compare")
    k.wait_for(
        "comparison verdict",
        lambda: "identical text in all" in (k.value(cid, "value") or ""),  # drawn in the panel
        timeout=60,
    )
    _, out = k.output("r = panel.wait(30); print(r.identical, r.verdict, panel.running)", 40)
    verdicts = ("same", "slower", "faster", "undecided")
    assert any(f"True {v} False" in out for v in verdicts), out
    k.wait_for("controls enabled again", lambda: "compare" not in k.value(cid, "off"))


def test_over_with_a_schema_ends_in_typed_columns(kernel, tiny_dir):
    """Structured output in a real kernel: --over with --schema, then a typed to_frame()."""
    k = kernel
    setup = (
        "import pandas as pd\nfrom typing import Literal, TypedDict\n"
        "class Row(TypedDict):\n    word: str\n    n: int\n    mood: Literal['pos', 'neg']\n"
        "people = pd.DataFrame({'text': ['a', 'b', 'c', 'd']}, index=list('wxyz'))"
    )
    assert k.execute(setup)["status"] == "ok"
    first = k.execute(
        f"%%generate -m {tiny_dir} --raw -t 0 -n 60 --over people --schema Row -o rows\n"
        "Fields of: {text}",
        wait=False,
    )
    second = k.execute(
        "f = rows.to_frame()\nprint(dict(f.dtypes.astype(str)))\n"
        "print(list(f.index), f['valid'].tolist(), f['finish_reason'].tolist())",
        wait=False,
    )
    assert [k.reply(m, 120)["status"] for m in (first, second)] == ["ok", "ok"]
    k.wait_for("the frame", lambda: "valid" in k.texts(second), 60)
    out = k.texts(second)
    assert "'n': 'Int64'" in out and "'mood': 'category'" in out and "'word': 'string'" in out
    assert "['w', 'x', 'y', 'z']" in out
    # Each row either finished its object (valid) or ran out of tokens (not valid).
    valid = out.split("] [", 1)[1]
    assert valid.count("True") == valid.count("'stop'"), out


CHAT_UI = "mlx_notebook.notebook.chat_ui.widget.ChatUI"


def test_chat_ui_by_comm_messages_keeps_the_kernel_free(kernel):
    # The widget's script sends {type: ...} messages; the kernel turns each into a Chat
    # call and returns at once: the reply streams into traits on the widget's clock.
    before = set(kernel.state)
    code = "ui = mlx_notebook.ChatUI(model='endless', max_tokens=100000)\nui"
    assert kernel.execute(code)["status"] == "ok"
    ui = kernel.wait_for(
        "the chat widget",
        lambda: [c for c in kernel.widgets("AnyModel", _anywidget_id=CHAT_UI) if c not in before],
    )[0]
    # Paired with its saved transcript; the class comes in an update after the comm opens.
    kernel.wait_for(
        "the live class", lambda: "mlxnb-live" in (kernel.value(ui, "_dom_classes") or [])
    )
    kernel.custom(ui, {"type": "send", "text": "Hello"})
    kernel.wait_for("streaming", lambda: "tokens" in (kernel.value(ui, "live") or ""), 60)
    assert kernel.value(ui, "busy") is True
    _, out = kernel.output("1+1", 10)
    assert out.strip() == "2" and kernel.value(ui, "busy") is True  # still streaming
    kernel.custom(ui, {"type": "stop"})
    kernel.wait_for("stopped", lambda: kernel.value(ui, "busy") is False, 30)
    assert "· stopped" in kernel.value(ui, "transcript") and kernel.value(ui, "live") == ""
    _, out = kernel.output("print(ui.chat.messages[-1]['stopped'], len(ui.chat.messages))")
    assert out.split() == ["True", "2"]
    kernel.custom(ui, {"type": "delete", "index": 5})
    kernel.wait_for("a refusal", lambda: "no message 5" in kernel.value(ui, "status"), 10)
    kernel.custom(ui, {"type": "new"})
    kernel.wait_for("a new chat", lambda: 'class="turn' not in kernel.value(ui, "transcript"), 10)

    before = set(kernel.state)
    msg_id = kernel.execute("%chat ui notes", wait=False)
    kernel.reply(msg_id)
    notes = kernel.wait_for(
        "%chat ui's widget",
        lambda: [c for c in kernel.widgets("AnyModel", _anywidget_id=CHAT_UI) if c not in before],
    )[0]
    # The widget's comm can open before its state arrives (CI under load saw '' here once).
    kernel.wait_for("its title", lambda: kernel.value(notes, "title") == "notes · default", 30)
    kernel.idle(msg_id)
    saved = [d for d in kernel.display_ids(msg_id) if "saved transcript" in str(
        kernel.displays.get(d, {}).get("text/html", ""))]  # fmt: skip
    assert saved  # the transcript a saved notebook shows


SPY = """
import importlib.machinery, sys, threading
first_mlx = {}
release = threading.Event()

class HoldMLX:  # records who imports mlx.core first, and holds that import until released
    def find_spec(self, name, path=None, target=None):
        if name != "mlx.core" or first_mlx:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader

        class Held:  # waits in create_module: the global import lock is not held there
            def create_module(self, spec):
                first_mlx["thread"] = threading.current_thread().name
                first_mlx["released"] = release.wait(20)
                return real.create_module(spec)

            def exec_module(self, module):
                return real.exec_module(module)

        spec.loader = Held()
        return spec

sys.meta_path.insert(0, HoldMLX())

def after(result):  # the %%generate cell has returned to the kernel
    if result.info.raw_cell.startswith("%%generate"):
        release.set()

get_ipython().events.register("post_run_cell", after)
"""


def test_the_first_cell_of_a_fresh_kernel_returns_before_mlx_is_imported(tiny_dir):
    k = Harness()
    try:
        assert k.execute(SPY)["status"] == "ok"
        assert k.execute("%load_ext mlx_notebook")["status"] == "ok"
        before = set(k.state)
        msg_id = k.execute(f"%%generate -m {tiny_dir} -n 3 --raw -o first\nHello", wait=False)
        assert k.reply(msg_id, 60)["status"] == "ok"
        (html,), _ = view_of(k, before)
        k.wait_for("done", lambda: "done" in (k.value(html, "value") or ""), timeout=120)
        _, out = k.output("print(first_mlx, first.finish_reason)")
        # The worker imported MLX, and the cell had returned while that import was held:
        # had the cell waited for MLX it would have held itself (20 s, then released=False).
        assert "'thread': 'mlx-worker'" in out and "'released': True" in out, out
        assert "length" in out
        seen = [s.get("value", "") for _, c, s in k.updates if c == html]
        seen.insert(0, k.state.get(html, {}).get("value", ""))
        assert any("loading the engine…" in v for v in seen + first_values(k, html)), seen[:3]
    finally:
        k.close()


def first_values(k, cid):
    """The widget's value as it was opened (before any update)."""
    with k._lock:
        msgs = [m for ms in k.outputs.values() for m in ms if m["msg_type"] == "comm_open"]
    return [
        m["content"]["data"].get("state", {}).get("value", "")
        for m in msgs
        if m["content"]["comm_id"] == cid
    ]


def test_stream_from_python_shows_the_live_view_and_stops(kernel):
    k = kernel
    before = set(k.state)
    code = (
        "import mlx_notebook\n"
        "h = mlx_notebook.stream('Hello', model='endless', max_tokens=100000, chat=False)\nh"
    )
    msg_id = k.execute(code, wait=False)
    assert k.reply(msg_id, 30)["status"] == "ok"  # the cell returned at once
    (html,), (button,) = view_of(k, before)
    k.wait_for("streamed text", lambda: "and on and on" in (k.value(html, "value") or ""))
    k.click(button)
    k.wait_for("stopped state", lambda: "stopped" in (k.value(html, "value") or ""))
    doc = k.wait_for("final document", lambda: k.final_output(msg_id))
    assert "application/vnd.jupyter.widget-view+json" not in doc
    assert "stopped" in doc["text/html"] and "and on and on" in doc["text/plain"]
    _, out = k.output("print(h.finish_reason, len(h.text) > 10, h.done)", 10)
    assert "cancelled True True" in out
