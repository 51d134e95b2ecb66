"""Event folding and HTML rendering for generation views. No widgets here.

Model output is untrusted: every piece of it is escaped before it becomes
HTML, Markdown is rendered with raw HTML disabled, and code goes through
Pygments, which escapes too.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from functools import lru_cache

from ..engine.events import (
    Event,
    Finished,
    Loading,
    Notice,
    PrefillProgress,
    Queued,
    Started,
    Token,
)

FORMATS = ("markdown", "text", "code")
STYLE = (
    "<style>.mlxnb{font-family:var(--jp-ui-font-family,sans-serif);font-size:13px}"
    ".mlxnb .hdr{color:#666;margin-bottom:4px}.mlxnb .txt{white-space:pre-wrap;"
    "font-family:var(--jp-code-font-family,monospace);line-height:1.4}"
    ".mlxnb .stats{color:#555;margin-top:6px;font-size:12px}.mlxnb .bar{background:#e5e5e5;"
    "height:6px;border-radius:3px;overflow:hidden;width:320px;display:inline-block;"
    "vertical-align:middle;margin-right:8px}.mlxnb .bar>div{background:#3b82f6;height:100%}"
    ".mlxnb .draft{background:#dcfce7}.mlxnb .warn{color:#b91c1c;font-weight:600}"
    ".mlxnb .state{font-weight:600}.mlxnb .md p{margin:0 0 .5em 0}</style>"
)


def escape(text: str) -> str:
    """HTML-escape untrusted text (quotes included)."""
    return html.escape(text, quote=True)


@lru_cache(maxsize=1)
def _markdown():
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    return md.enable("table")


def markdown_html(text: str) -> str:
    """Markdown to HTML with raw HTML disabled and unsafe links refused."""
    return _markdown().render(text)


def code_html(text: str) -> str:
    """Highlight as code (language guessed), escaped by Pygments."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import TextLexer, guess_lexer

    body = _strip_fence(text)
    try:
        lexer = guess_lexer(body)
    except Exception:
        lexer = TextLexer()
    fmt = HtmlFormatter(noclasses=True, nowrap=False)
    return highlight(body, lexer, fmt)


def _strip_fence(text: str) -> str:
    lines = text.strip("\n").splitlines()
    if len(lines) >= 2 and lines[0].startswith("```"):
        end = len(lines) - 1 if lines[-1].startswith("```") else len(lines)
        return "\n".join(lines[1:end])
    return text


@dataclass
class ViewState:
    """Folds a job's events into what a view shows.

    Args:
        model: Model name for the header.
        mode: ``normal``, ``lookup`` or ``draft``.
        k: Draft tokens per step (speculative modes).
        fmt: Final rendering: ``markdown``, ``text`` or ``code``.
        clock: Monotonic clock, injectable for tests.
    """

    model: str = "default"
    mode: str = "normal"
    k: int = 0
    fmt: str = "markdown"
    clock: object = time.monotonic
    pieces: list[str] = field(default_factory=list)
    drafts: list[bool] = field(default_factory=list)
    queued: int | None = None
    started: bool = False
    prefill: tuple[int, int] | None = None
    prefill_t0: tuple[float, int] | None = None
    tokens: int = 0
    finished: Finished | None = None
    stopping: bool = False
    highlight_drafts: bool = False
    loading: str | None = None
    notices: list[str] = field(default_factory=list)

    def apply(self, ev: Event) -> None:
        """Fold one event in."""
        if isinstance(ev, Token):
            self.tokens = ev.index + 1
            self.pieces.append(ev.text)
            self.drafts.append(ev.from_draft)
        elif isinstance(ev, PrefillProgress):
            if ev.model == "main":
                self.prefill = (ev.done, ev.total)
                if self.prefill_t0 is None:
                    self.prefill_t0 = (self.clock(), ev.done)
        elif isinstance(ev, Queued):
            self.queued = ev.position
        elif isinstance(ev, Started):
            self.started, self.queued = True, None
        elif isinstance(ev, Loading):
            self.loading = ev.model
        elif isinstance(ev, Notice):
            self.notices.append(ev.message)
        elif isinstance(ev, Finished):
            self.finished = ev

    @property
    def text(self) -> str:
        """Text so far; the terminal event's text once finished."""
        return self.finished.text if self.finished else "".join(self.pieces)

    def state_label(self) -> str:
        """One word or phrase for the header."""
        f = self.finished
        if f is not None:
            return {
                "cancelled": "stopped",
                "error": "error",
                "length": "done (max tokens)",
                "stop": "done",
            }[f.finish_reason]
        if self.stopping:
            return "stopping…"
        if self.queued is not None and not self.started:
            return f"queued ({self.queued} ahead)"
        if not self.tokens:
            if self.prefill:
                return "prefilling"
            return f"loading {self.loading}…" if self.loading else "starting"
        return "generating"

    def html(self) -> str:
        """The whole view as one HTML string (one widget update per refresh)."""
        mode = self.mode if self.mode == "normal" else f"{self.mode}, k={self.k}"
        parts = [
            STYLE,
            '<div class="mlxnb">',
            f'<div class="hdr">{escape(self.model)} · {escape(mode)} · '
            f'<span class="state">{escape(self.state_label())}</span></div>',
        ]
        for note in self.notices:
            parts.append(f'<div class="note">{escape(note)}</div>')
        if self.prefill and not self.tokens and self.finished is None:
            parts.append(self._progress_html())
        parts.append(self._body_html())
        f = self.finished
        if f is not None and f.finish_reason == "error":
            parts.append(f'<div class="warn">{escape(f.error or "error")}</div>')
        if f is not None:
            parts.append(f'<div class="stats">{escape(stats_line(f))}</div>')
        parts.append("</div>")
        return "".join(parts)

    def _progress_html(self) -> str:
        done, total = self.prefill
        pct = 100 * done / max(total, 1)
        eta = ""
        if self.prefill_t0 is not None:
            t0, d0 = self.prefill_t0
            rate = (done - d0) / max(self.clock() - t0, 1e-6)
            if rate > 0 and done > d0:
                eta = f", ETA {(total - done) / rate:.1f} s"
        return (
            f'<div class="prog"><span class="bar"><div style="width:{pct:.1f}%"></div>'
            f"</span>prompt {done}/{total} tokens{eta}</div>"
        )

    def _body_html(self) -> str:
        text = self.text
        if self.highlight_drafts:
            return f'<div class="txt">{self._draft_marked()}</div>'
        if self.finished is not None and self.finished.finish_reason != "cancelled":
            if self.fmt == "markdown":
                return f'<div class="md">{markdown_html(text)}</div>'
            if self.fmt == "code":
                return code_html(text)
        if self.mode != "normal" and any(self.drafts) and self.finished is None:
            return f'<div class="txt">{self._draft_marked()}</div>'
        return f'<div class="txt">{escape(text)}</div>'

    def _draft_marked(self) -> str:
        out = []
        for piece, d in zip(self.pieces, self.drafts):
            out.append(f'<span class="draft">{escape(piece)}</span>' if d else escape(piece))
        streamed = "".join(self.pieces)
        if self.finished is not None and self.finished.text.startswith(streamed):
            out.append(escape(self.finished.text[len(streamed) :]))  # withheld tail, if any
        return "".join(out)


def stats_line(f: Finished) -> str:
    """``TTFT 0.12 s · prompt 830 tok/s · 21.4 tok/s · 64 tokens · ...``."""
    s = f.stats
    bits = []
    if s.ttft_s is not None:
        bits += [f"TTFT {s.ttft_s:.2f} s", f"prompt {s.prompt_tps:.0f} tok/s"]
    bits.append(f"{s.generation_tps:.1f} tok/s")
    bits.append(f"{s.generation_tokens} tokens")
    if s.acceptance_rate is not None:
        bits.append(f"accepted {s.acceptance_rate:.0%} of {s.draft_tokens_proposed} drafts")
    if s.cached_tokens:
        bits.append(f"{s.cached_tokens} cached prompt tokens")
    reason = f.finish_reason + (f" ({f.matched_stop!r})" if f.matched_stop else "")
    bits.append(reason)
    return " · ".join(bits)
