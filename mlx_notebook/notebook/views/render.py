"""Event folding and rendering for generation views, as HTML and as plain text. No widgets.

The same markup serves the live widget and the output saved with the notebook,
so what streamed is what is kept: line breaks, font and format do not change
when the job ends, whether it finished or was stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ...engine.events import (
    ENGINE,
    Event,
    Finished,
    Loading,
    Notice,
    PrefillProgress,
    Queued,
    Started,
    Token,
)
from ...measure.stats import counted
from .markup import (
    FORMATS,
    ProgressiveMarkdown,
    code_html,
    escape,
    markdown_html,
    text_html,
    thinking_html,
)
from .style import STYLE

__all__ = ["FORMATS", "STYLE", "ViewState", "escape", "stats_line"]

_DONE_WORDS = {"cancelled": "stopped", "error": "error", "length": "done", "stop": "done"}


MIN_RATE_S = 0.5  # the shortest interval a live tok/s figure is measured over...
MIN_RATE_TOKENS = 8  # ...or the fewest tokens


@dataclass
class ViewState:
    """Folds a job's events into what a view shows.

    Args:
        model: Model name for the header.
        mode: ``normal``, ``lookup`` or ``draft``.
        k: Draft tokens per step (speculative modes).
        fmt: ``markdown``, ``text`` or ``code``; the same while streaming and after.
        clock: Monotonic clock, injectable for tests.
        highlight_drafts: Mark accepted draft tokens (text is shown as plain text).
        notices: Lines to show above the text (e.g. unknown ``{names}``).
        inspect: Show the text as the token inspector (each token tinted by its
            probability, a card on hover) once tokens carry records.
    """

    model: str = "default"
    mode: str = "normal"
    k: int = 0
    fmt: str = "markdown"
    clock: object = time.monotonic
    highlight_drafts: bool = False
    notices: list[str] = field(default_factory=list)
    inspect: bool = False
    records: list = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    thought: list[str] = field(default_factory=list)
    drafts: list[bool] = field(default_factory=list)
    queued: Queued | None = None
    started: bool = False
    loading: str | None = None
    prefill: tuple[int, int] | None = None
    prefill_t0: tuple[float, int] | None = None
    tokens: int = 0
    first_token_at: float | None = None
    finished: Finished | None = None
    stopping: bool = False
    _md: ProgressiveMarkdown = field(default_factory=ProgressiveMarkdown, repr=False)

    def apply(self, ev: Event) -> None:
        """Fold one event in."""
        if isinstance(ev, Token):
            self.tokens = ev.index + 1
            if self.first_token_at is None:
                self.first_token_at = self.clock()
            self.pieces.append(ev.text)
            self.drafts.append(ev.from_draft)
            if ev.reasoning:
                self.thought.append(ev.reasoning)
            if ev.info is not None:
                self.records.append(ev.info)
        elif isinstance(ev, PrefillProgress):
            if ev.model == "main":
                self.prefill = (ev.done, ev.total)
                if self.prefill_t0 is None:
                    self.prefill_t0 = (self.clock(), ev.done)
        elif isinstance(ev, Queued):
            self.queued = ev
        elif isinstance(ev, Started):
            self.started, self.queued = True, None
            if self.loading == ENGINE:  # the worker is up: it picked the job
                self.loading = None
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

    @property
    def reasoning(self) -> str:
        """A thinking model's reasoning so far (final once finished)."""
        return self.finished.reasoning if self.finished else "".join(self.thought)

    @property
    def failed(self) -> bool:
        """Whether the job ended in error."""
        return self.finished is not None and self.finished.finish_reason == "error"

    def state_label(self) -> str:
        """One word or phrase for the header."""
        f = self.finished
        if f is not None:
            word = _DONE_WORDS[f.finish_reason]
            return "done (max tokens)" if f.finish_reason == "length" else word
        if self.stopping:
            return "stopping…"
        if self.loading == ENGINE and not self.started:
            return "loading the engine…"  # the worker imports MLX (first use, seconds)
        if self.queued is not None and not self.started:
            q = self.queued
            behind = f", waiting for {q.waiting_for}" if q.waiting_for else ""
            return f"queued ({q.position} ahead{behind})"
        if not self.tokens:
            if self.prefill:
                return "prefilling"
            return f"loading {self.loading}…" if self.loading else "starting"
        return "generating"

    def live_figures(self) -> str:
        """`` · 42 tokens · 21.3 tok/s`` while tokens stream; empty otherwise."""
        if self.finished is not None or not self.tokens or self.stopping:
            return ""
        bits = f" · {self.tokens} token{'s' * (self.tokens != 1)}"
        elapsed = self.clock() - self.first_token_at
        # A rate over two tokens a few microseconds apart means nothing ("20643 tok/s"):
        # only over at least MIN_RATE_S seconds or MIN_RATE_TOKENS intervals.
        steps = self.tokens - 1
        if elapsed > 0 and steps > 0 and (elapsed >= MIN_RATE_S or steps >= MIN_RATE_TOKENS):
            bits += f" · {steps / elapsed:.1f} tok/s"
        return bits

    def header(self) -> str:
        """``model · mode · state`` as plain text."""
        mode = self.mode if self.mode == "normal" else f"{self.mode}, k={self.k}"
        return f"{self.model} · {mode} · {self.state_label()}{self.live_figures()}"

    def html(self, style: bool = True) -> str:
        """The whole view as one HTML string."""
        return "".join(self.blocks(style))

    def blocks(self, style: bool = True) -> list[str]:
        """The view in fixed slots (style, header, notes, progress, thinking, text, end).

        A live view sends each slot's change on its own: the header's figures and the
        text's new end make two small splices, not one spanning the whole text.
        """
        mode = self.mode if self.mode == "normal" else f"{self.mode}, k={self.k}"
        icon = '<span class="bad"></span>' if self.failed else ""
        head = (
            f'<div class="mlxnb"><div class="hdr">{escape(self.model)} · {escape(mode)} · '
            f'{icon}<span class="state">{escape(self.state_label())}</span>'
            f"{escape(self.live_figures())}</div>"
        )
        notes = "".join(f'<div class="note">{escape(n)}</div>' for n in self.notices)
        progress = ""
        if self.prefill and not self.tokens and self.finished is None:
            progress = self._progress_html()
        thinking = self.thinking_html() if self.reasoning else ""
        body = self.body_html() if self.text or self.finished is None else ""
        end = ""
        f = self.finished
        if f is not None and f.finish_reason == "error":
            end = f'<div class="err">{escape(f.error or "error")}</div>'
        elif f is not None:
            end = f'<div class="stats">{escape(stats_line(f))}</div>'
            if f.stats.replayed:  # said in the page only: the saved text stays the run's
                end += f'<div class="stats replayed">{escape(replayed_note(f.stats))}</div>'
        return [STYLE if style else "", head, notes, progress, thinking, body, end + "</div>"]

    def plain(self) -> str:
        """The view as plain text: header, notices, the exact text, stats or error."""
        lines = [f"[{self.header()}]"]
        lines += [f"warning: {n}" for n in self.notices]
        if self.reasoning:
            lines += ["[thinking]", self.reasoning, "[answer]"]
        lines.append(self.text)
        f = self.finished
        if f is not None:
            lines.append(f"error: {f.error}" if f.finish_reason == "error" else stats_line(f))
        return "\n".join(lines)

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

    def thinking_html(self) -> str:
        """The reasoning, folded away once the answer starts (open while it is all there is)."""
        return thinking_html(self.reasoning, not self.text and self.finished is None)

    def body_html(self) -> str:
        """The text as HTML: Markdown, code or plain text, or the inspection."""
        if self.inspect and self.records:
            from .inspect import inspect_body

            return inspect_body(self.records, cards=self.finished is not None)
        body = self._text_html()
        if self.records and self.finished is not None:
            # The inspection, one click away, in the saved document too: no script.
            from .inspect import inspect_body

            n = len(self.records)
            body += (
                f'<details class="insp-fold"><summary>inspect {n} token{"s" * (n != 1)}'
                f"</summary>{inspect_body(self.records)}</details>"
            )
        return body

    def _text_html(self) -> str:
        text = self.text
        if self.highlight_drafts or (self.fmt == "text" and any(self.drafts)):
            return f'<pre class="txt">{self._draft_marked()}</pre>'
        if self.fmt == "markdown":
            body = markdown_html(text) if self.finished else self._md.render(text)
            return f'<div class="md">{body}</div>'
        if self.fmt in ("code", "json"):  # json: structured output, highlighted as JSON
            language = "json" if self.fmt == "json" else None
            return code_html(text, final=self.finished is not None, language=language)
        return text_html(text)

    def _draft_marked(self) -> str:
        out = []
        for piece, d in zip(self.pieces, self.drafts):
            out.append(f'<span class="draft">{escape(piece)}</span>' if d else escape(piece))
        streamed = "".join(self.pieces)
        if self.finished is not None and self.finished.text.startswith(streamed):
            out.append(escape(self.finished.text[len(streamed) :]))  # withheld tail, if any
        return "".join(out)


def replayed_note(s) -> str:
    """``replayed · made 2026-11-28 14:03 in 3.2 s (--refresh regenerates)``."""
    r = s.replayed or {}
    made = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.get("made", 0)))
    took = r.get("seconds")
    took = f" in {took:.1f} s" if isinstance(took, (int, float)) else ""
    return f"replayed · made {made}{took} (--refresh regenerates)"


def stats_line(f: Finished) -> str:
    """``TTFT 0.12 s · prompt 830 tok/s · 21.4 tok/s · 64 tokens · ...``."""
    s = f.stats
    bits = []
    if s.ttft_s is not None:
        bits += [f"TTFT {s.ttft_s:.2f} s", f"prompt {s.prompt_tps:.0f} tok/s"]
    if s.generation_tokens > 1:
        bits.append(f"decode {s.generation_tps:.1f} tok/s")
    bits.append(counted(s.generation_tokens, "token"))
    if s.acceptance_rate is not None:
        bits.append(
            f"accepted {s.acceptance_rate:.0%} of {counted(s.draft_tokens_proposed, 'draft')}"
        )
    if s.cached_tokens:
        bits.append(counted(s.cached_tokens, "cached prompt token"))
    if s.sampling:
        from ...engine.defaults import describe

        bits.append(describe(s.sampling))
    word = "stopped" if f.finish_reason == "cancelled" else f.finish_reason  # as the header
    reason = word + (f" ({f.matched_stop!r})" if f.matched_stop else "")
    bits.append(reason)
    return " · ".join(bits)
