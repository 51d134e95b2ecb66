from mlx_notebook.engine.events import Finished, PrefillProgress, Queued, Started, Stats, Token
from mlx_notebook.notebook.views.render import ViewState, code_html, markdown_html, stats_line

EVIL = ['<img src=x onerror="alert(1)">', "<script>alert(1)</script>"]


def fold(text, fmt="markdown", reason="length"):
    st = ViewState(fmt=fmt)
    st.apply(Started())
    st.apply(Token(text, 1, False, 0))
    html_live = st.html()
    st.apply(Finished(text, reason, stats=Stats(generation_tokens=1)))
    return html_live, st.html()


def test_model_output_is_never_raw_html():
    for evil in EVIL:
        for fmt in ("markdown", "text", "code"):
            for reason in ("length", "cancelled", "error"):
                live, final = fold(f"before {evil} after", fmt, reason)
                for html in (live, final):
                    assert "<img" not in html and "<script>" not in html, (fmt, html)
                    assert "&lt;" in html


def test_markdown_renders_and_escapes():
    out = markdown_html("# Title\n\n**bold** `<b>` [x](javascript:alert(1))\n\n<div>raw</div>")
    assert "<h1>Title</h1>" in out and "<strong>bold</strong>" in out
    assert "<code>&lt;b&gt;</code>" in out and 'href="javascript' not in out
    assert "<div>" not in out


def test_code_is_highlighted_and_escaped():
    out = code_html("```python\ndef f(x):\n    return '<script>'\n```")
    assert "def" in out and "<script>" not in out and "&lt;script&gt;" in out and "<span" in out


def test_states_and_progress():
    t = [0.0]
    st = ViewState(model="m", mode="lookup", k=4, fmt="text", clock=lambda: t[0])
    st.apply(Queued(2, "job 7 on big"))
    assert "queued (2 ahead, waiting for job 7 on big)" in st.html()
    st.apply(Started())
    st.apply(PrefillProgress(0, 1000))
    t[0] = 1.0
    st.apply(PrefillProgress(250, 1000))
    html = st.html()
    assert "prompt 250/1000 tokens" in html and "ETA 3.0 s" in html and "lookup, k=4" in html
    st.apply(Token("Hi", 5, True, 0))
    assert "prompt 250" not in st.html()  # bar hidden once the first token arrives
    assert 'class="draft"' in st.html()
    st.stopping = True
    assert "stopping" in st.html()
    st.apply(Finished("Hi", "cancelled"))
    assert "stopped" in st.html() and "Hi" in st.html()


def test_stats_line():
    s = Stats(
        prompt_tokens=10,
        cached_tokens=4,
        generation_tokens=20,
        ttft_s=0.5,
        prompt_tps=12,
        generation_tps=8.25,
        draft_tokens_proposed=10,
        draft_tokens_accepted=7,
    )
    line = stats_line(Finished("x", "stop", matched_stop="END", stats=s))
    for part in [
        "TTFT 0.50 s",
        "prompt 12 tok/s",
        "8.2 tok/s",
        "20 tokens",
        "accepted 70%",
        "4 cached",
        "stop ('END')",
    ]:
        assert part in line


def test_notices_and_loading_are_shown():
    from mlx_notebook.engine.events import Loading, Notice, Started

    s = ViewState(model="m")
    s.apply(Started())
    s.apply(Loading("some/model"))
    assert s.state_label() == "loading some/model…"
    s.apply(Notice("max_tokens lowered from 500 to 40: <context>"))
    html = s.html()
    assert "max_tokens lowered from 500 to 40: &lt;context&gt;" in html


def test_the_header_counts_tokens_and_speed_while_streaming():
    from mlx_notebook.engine.events import Finished, Token

    now = [100.0]
    s = ViewState(model="m", clock=lambda: now[0])
    for i in range(11):
        s.apply(Token("x", i, False, i))
        now[0] += 0.1
    assert s.header() == "m · normal · generating · 11 tokens · 9.1 tok/s"
    assert "</span> · 11 tokens · 9.1 tok/s</div>" in s.html()
    s.apply(Finished("x" * 11, "cancelled"))
    assert s.header() == "m · normal · stopped"  # final figures live in the stats line
    assert s.plain().splitlines()[-1].endswith(" · stopped")  # the stats say it the same way


def test_no_speed_before_half_a_second_or_eight_tokens():
    from mlx_notebook.engine.events import Token

    now = [0.0]
    s = ViewState(model="m", clock=lambda: now[0])
    s.apply(Token("a", 0, False, 0))
    now[0] += 0.0001
    s.apply(Token("b", 1, False, 1))  # two tokens 0.1 ms apart: "10000 tok/s" means nothing
    assert s.header() == "m · normal · generating · 2 tokens"
    now[0] += 0.5
    assert s.header().endswith(" · 2 tokens · 2.0 tok/s")  # half a second: a rate
    fast = ViewState(model="m", clock=lambda: now[0])
    for i in range(9):  # eight intervals in 8 ms: enough tokens to be a rate
        fast.apply(Token("x", i, False, i))
        now[0] += 0.001
    assert fast.header().endswith(" · 9 tokens · 888.9 tok/s")  # 8 intervals in 9 ms


def test_while_the_worker_imports_mlx_the_view_says_the_engine_is_loading():
    from mlx_notebook.engine.events import ENGINE, Loading, Queued, Started

    s = ViewState(model="default")
    s.apply(Queued(0))
    s.apply(Loading(ENGINE))
    assert s.state_label() == "loading the engine…"
    s.apply(Started())
    assert s.state_label() == "starting"
    s.apply(Loading("default"))
    assert s.state_label() == "loading default…"


def test_stats_line_counts_agree_with_their_nouns():
    s = Stats(generation_tokens=1, cached_tokens=1, draft_tokens_proposed=1)
    s.draft_tokens_accepted = 1
    line = stats_line(Finished("x", "length", stats=s))
    assert "1 token ·" in line and "of 1 draft ·" in line and "1 cached prompt token ·" in line


def test_a_replayed_result_says_so_with_when_and_how_long():
    import time

    from mlx_notebook.engine.events import Finished, Stats

    made = time.mktime((2026, 11, 28, 14, 3, 0, 0, 0, -1))
    s = ViewState(model="m")
    s.apply(Finished("hi", "stop", stats=Stats(replayed={"made": made, "seconds": 3.21})))
    note = "replayed · made 2026-11-28 14:03 in 3.2 s (--refresh regenerates)"
    assert note in s.html() and s.state_label() == "done"
    # The saved text is the original run's, byte for byte: the note is in the page only.
    fresh = ViewState(model="m")
    fresh.apply(Finished("hi", "stop", stats=Stats()))
    assert s.plain() == fresh.plain() and note not in s.plain()
