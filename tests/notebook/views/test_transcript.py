"""Transcript HTML: a bubble per message by role, escaped, the same live and saved."""

import re

from mlx_notebook.notebook.views.markup import thinking_html
from mlx_notebook.notebook.views.transcript import bubble_html, transcript_html

MESSAGES = [
    {"role": "system", "content": "Be <b>brief</b>."},
    {"role": "user", "content": "Capital of France?"},
    {"role": "assistant", "content": "**Paris**", "reasoning_content": "France <script>"},
    {"role": "user", "content": 'And "Spain" <img src=x onerror=alert(1)>?'},
    {"role": "assistant", "content": "Mad", "stopped": True},
]


def test_a_bubble_per_message_styled_by_role():
    html = transcript_html(MESSAGES, "chat")
    assert len(re.findall(r'<div class="turn user" data-i="\d">', html)) == 2
    assert len(re.findall(r'<div class="turn assistant" data-i="\d">', html)) == 2
    assert '<div class="turn system" data-i="0"><div class="role">system</div>' in html
    assert "<strong>Paris</strong>" in html and "Be &lt;b&gt;brief&lt;/b&gt;." in html
    assert '<details class="think"><summary>thinking (2 words)</summary>' in html
    body = html.split("</style>", 1)[1]
    assert "France &lt;script&gt;" in html and "<script>" not in body and "<img" not in body
    assert '<div class="role">assistant<span class="lbl"> · stopped</span></div>' in html
    assert '<div class="hdr">chat · 2 turns</div>' in html
    assert "<button" not in html and "data-raw" not in html  # a document has nothing to click


def test_live_actions_name_the_message_and_carry_the_text_escaped():
    chars = lambda m: f"{len(m['content'])} chars"  # noqa: E731
    html = transcript_html(MESSAGES, "chat", actions=True, notes=chars)
    acts = re.findall(r'data-act="(\w+)" data-i="(\d)"', html)
    assert acts == [("edit", "1"), ("delete", "1"), ("delete", "2"), ("edit", "3"),
                    ("delete", "3"), ("regenerate", "4"), ("delete", "4")]  # fmt: skip
    raw = 'data-raw="And &quot;Spain&quot; &lt;img src=x onerror=alert(1)&gt;?"'
    assert raw in html  # an attribute the user's own text cannot leave
    assert html.count('<div class="stats">') == 2 and "3 chars" in html
    assert all('title="' in b for b in re.findall(r"<button[^>]*>", html))


def test_bubble_escapes_labels_and_marks_the_live_reply():
    html = bubble_html("assistant", "<p>x</p>", label=" · <b>", foot="<i>", live=True)
    assert html.startswith('<div class="turn assistant live">')
    assert "· &lt;b&gt;" in html and "&lt;i&gt;" in html
    assert bubble_html("tool", "x").startswith('<div class="turn other">')


def test_thinking_folds_unless_open():
    assert '<details class="think" open><summary>thinking…' in thinking_html("a b", True)
    folded = thinking_html("<a>", False)
    assert "open" not in folded and "&lt;a&gt;" in folded and "(1 word)" in folded
