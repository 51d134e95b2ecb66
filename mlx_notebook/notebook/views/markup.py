"""Untrusted model output to HTML: escaped text, safe Markdown, highlighted code.

Model output never becomes live HTML. Raw HTML in Markdown is shown as text.
Nothing that loads by itself is produced: an image becomes its alt text and
URL, as text. Links are not clickable: the label is followed by its target in
angle brackets, so a prompt-injected URL is seen, never followed or prefetched.
"""

from __future__ import annotations

import html
from functools import lru_cache

FORMATS = ("markdown", "text", "code", "json")


def escape(text: str) -> str:
    """HTML-escape untrusted text (quotes included)."""
    return html.escape(text, quote=True)


def _image(_self, tokens, idx, _options, _env) -> str:
    tok = tokens[idx]
    alt = "".join(c.content for c in tok.children or []) or "image"
    src = tok.attrGet("src") or ""
    return f'<span class="mlxnb-media">[image: {escape(alt)} &lt;{escape(src)}&gt;]</span>'


def _link_open(_self, tokens, idx, _options, env) -> str:
    env.setdefault("mlxnb_links", []).append(tokens[idx].attrGet("href") or "")
    return '<span class="mlxnb-link">'


def _link_close(_self, _tokens, _idx, _options, env) -> str:
    href = env["mlxnb_links"].pop()
    return f'</span> <span class="mlxnb-href">&lt;{escape(href)}&gt;</span>'


@lru_cache(maxsize=1)
def _markdown():
    from markdown_it import MarkdownIt

    # breaks: a newline the model wrote stays a line break, as it streamed.
    md = MarkdownIt(
        "commonmark",
        {"html": False, "linkify": False, "breaks": True, "highlight": _highlight_fence},
    )
    md.enable("table")
    md.add_render_rule("image", _image)
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("link_close", _link_close)
    return md


def _spans(code: str, lexer) -> str:
    # Escaped by Pygments; classes, not inline colours: style.py maps them to the theme.
    from pygments import highlight
    from pygments.formatters import HtmlFormatter

    return highlight(code, lexer, HtmlFormatter(nowrap=True, classprefix="tok-"))


def _highlight_fence(code: str, lang: str, _attrs) -> str:
    # A fence that names its language is highlighted; markdown-it wraps the spans in
    # its <pre><code>. Anything else: escaped by markdown-it.
    if not lang:
        return ""
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        return _spans(code, get_lexer_by_name(lang))
    except ClassNotFound:
        return ""


def markdown_html(text: str) -> str:
    """Markdown to HTML: raw HTML escaped, images as text, links not clickable."""
    return _markdown().render(text, {})


class ProgressiveMarkdown:
    """Renders growing Markdown at a view's refresh rate without redoing all of it.

    Blocks before the last blank line outside a code fence are final: their HTML
    is kept and only the tail is rendered again. The finished text is rendered
    in one pass by `markdown_html`.
    """

    def __init__(self) -> None:
        self._prefix = ""
        self._prefix_html = ""

    def render(self, text: str) -> str:
        """HTML for ``text``, which extends the text of the previous call."""
        if not text.startswith(self._prefix):
            self._prefix, self._prefix_html = "", ""
        cut = _stable_cut(text, len(self._prefix))
        if cut > len(self._prefix):
            self._prefix_html += markdown_html(text[len(self._prefix) : cut])
            self._prefix = text[:cut]
        return self._prefix_html + markdown_html(text[cut:])


def _stable_cut(text: str, start: int) -> int:
    # The end of the last blank line after which no code fence is open.
    cut, pos, fences = start, start, _fences(text[:start])
    while True:
        i = text.find("\n\n", pos)
        if i < 0:
            return cut
        fences += _fences(text[pos:i])
        if fences % 2 == 0:
            cut = i + 2
        pos = i + 2


def _fences(text: str) -> int:
    return sum(1 for line in text.split("\n") if line.lstrip().startswith(("```", "~~~")))


def thinking_html(reasoning: str, open_: bool) -> str:
    """A reply's reasoning: open (``thinking…``) while it is all there is, else folded."""
    words = len(reasoning.split())
    label = "thinking…" if open_ else f"thinking ({words} word{'s' * (words != 1)})"
    return (
        f'<details class="think"{" open" if open_ else ""}><summary>{label}</summary>'
        f"{text_html(reasoning)}</details>"
    )


def text_html(text: str) -> str:
    """Plain text, escaped, every line break kept (a ``pre`` keeps them without CSS too)."""
    return f'<pre class="txt">{escape(text)}</pre>'


def code_html(text: str, final: bool = True, language: str | None = None) -> str:
    """Code in the code font; highlighted once final (language guessed unless given).

    Args:
        text: The code, optionally inside a Markdown fence.
        final: Highlight now; while streaming the guess would flicker.
        language: A Pygments lexer name (``"json"``), or None to guess.
    """
    body = _strip_fence(text)
    if not final:
        return f'<pre class="code">{escape(body)}</pre>'
    from pygments.lexers import TextLexer, get_lexer_by_name, guess_lexer

    try:
        lexer = get_lexer_by_name(language) if language else guess_lexer(body)
    except Exception:
        lexer = TextLexer()
    return _spans(body, lexer).join(('<pre class="code">', "</pre>"))


def _strip_fence(text: str) -> str:
    lines = text.strip("\n").splitlines()
    if len(lines) >= 2 and lines[0].startswith("```"):
        end = len(lines) - 1 if lines[-1].startswith("```") else len(lines)
        return "\n".join(lines[1:end])
    return text
