"""`ChatUI`: a chat window in a cell, over the very same `Chat` as ``%%chat`` and code.

The widget (anywidget: a small ES module, `widget.js`) shows the conversation
as bubbles, an input box (Enter sends, Shift+Enter is a newline), Stop and Stop
thinking while a reply streams, per-message Edit, Regenerate and Delete, New
chat, and a settings row (system prompt, sampling, length). Each click arrives
as a comm message and becomes one `Chat` call on the kernel's thread; the
engine does the work on its worker, so the kernel stays free.

The streaming reply is redrawn on the widget's own clock (at most
``refresh_hz`` a second) from the job's events, never per token. Every HTML
string is built in Python from escaped text (`transcript`), so the widget sets
only markup we made. Displayed, the widget is followed by a static transcript
(`document.Snapshot`), which is what a saved notebook shows without a kernel.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import anywidget
from traitlets import Bool, Float, Int, Unicode, observe

from ...chat.conversation import REQUEST_FIELDS, Chat, ChatBusy, ChatTurn
from ...engine.events import Finished
from ...engine.request import DEFAULT_MAX_TOKENS
from ..live.delta import Deltas
from ..views.document import Snapshot
from ..views.render import ViewState
from ..views.transcript import bubble_parts, transcript_html

log = logging.getLogger("mlx_notebook")
_HERE = Path(__file__).parent
_CHAT_ARGS = {"model", "system", "backend", "server_url"}
_SETTINGS = ("temperature", "top_p", "max_tokens")


def reply_figures(fin: Finished) -> str:
    """A reply's figures under its bubble: ``TTFT 0.12 s · 21.4 tok/s · 64 tokens · …``."""
    s = fin.stats
    bits = [f"TTFT {s.ttft_s:.2f} s"] if s.ttft_s is not None else []
    if s.generation_tokens > 1:
        bits.append(f"{s.generation_tps:.1f} tok/s")
    bits.append(f"{s.generation_tokens} token{'s' * (s.generation_tokens != 1)}")
    if s.cached_tokens:  # what the prompt cache saved; a first reply has nothing to say
        bits.append(f"{s.cached_tokens} of {s.prompt_tokens} prompt tokens cached")
    else:
        bits.append(f"{s.prompt_tokens} prompt tokens")
    if fin.finish_reason == "length":
        bits.append("max tokens")
    return " · ".join(bits)


class ChatUI(anywidget.AnyWidget):
    """A chat window over a `Chat`: bubbles, an input box, Stop, edit and regenerate.

    ``ui.chat`` is the conversation: ``ui.chat.messages``, ``ui.chat.ask(...)``
    and ``%%chat`` on the same `Chat` show up here, and the other way round.

    Args:
        chat: The conversation to show; a new `Chat` from ``options`` when None.
        name: Its name in the header (``%chat ui NAME`` passes it).
        refresh_hz: Most redraws per second while a reply streams. Default: 20.
        start_thread: Redraw on a thread (tests call `refresh` instead).
        clock: Monotonic clock for the live figures, injectable for tests.
        **options: `Chat` arguments (``model``, ``system``, ``backend``,
            ``server_url``) and request fields for every turn (``max_tokens``,
            ``temperature``, ...). With ``chat`` given, request fields update
            its defaults.

    Raises:
        ValueError: An unknown option.
    """

    _esm = (_HERE.parent / "live" / "copy.js").read_text() + (_HERE / "widget.js").read_text()
    _css = (_HERE / "widget.css").read_text()

    title = Unicode("", help="The header: the conversation's name and model.").tag(sync=True)
    transcript = Unicode("", help="The settled messages as HTML bubbles.").tag(sync=True)
    status = Unicode("", help="A line under the bubbles: a refusal or an error.").tag(sync=True)
    busy = Bool(False, help="A reply is streaming: the input waits, Stop shows.").tag(sync=True)
    thinking = Bool(False, help="The reply is still reasoning: Stop thinking shows.").tag(sync=True)
    system = Unicode("", help="The system prompt; empty for none.").tag(sync=True)
    temperature = Float(
        None, allow_none=True, help="Sampling temperature; None: the model's own."
    ).tag(sync=True)
    top_p = Float(None, allow_none=True, help="Nucleus threshold; None: the model's own.").tag(
        sync=True
    )
    max_tokens = Int(DEFAULT_MAX_TOKENS, min=1, help="Most tokens per reply.").tag(sync=True)

    def __init__(
        self,
        chat: Chat | None = None,
        *,
        name: str = "chat",
        refresh_hz: float = 20,
        start_thread: bool = True,
        clock=time.monotonic,
        **options,
    ) -> None:
        from ..hosts import prepare

        prepare()  # an anywidget: Colab needs its custom widget manager first
        unknown = set(options) - REQUEST_FIELDS - _CHAT_ARGS
        if unknown:
            raise ValueError(f"ChatUI: unknown option(s): {', '.join(sorted(unknown))}")
        fields = {k: v for k, v in options.items() if k in REQUEST_FIELDS}
        if chat is not None and set(options) & _CHAT_ARGS:
            given = ", ".join(sorted(set(options) & _CHAT_ARGS))
            raise ValueError(f"ChatUI: {given}: give them to the Chat, or pass no chat")
        if chat is None:
            chat = Chat(**{k: v for k, v in options.items() if k in _CHAT_ARGS}, **fields)
        else:
            chat.defaults.update(fields)
        self.chat, self.name = chat, name
        self.refresh_hz, self.start_thread, self.clock = refresh_hz, start_thread, clock
        self.snapshot = Snapshot()
        self._live = Deltas()  # the streaming reply: sent as deltas, not a trait
        self._lock = threading.RLock()
        self._turn: ChatTurn | None = None
        self._state: ViewState | None = None
        self._events: list = []
        self._seen = 0
        self._figures: dict[int, tuple[dict, str]] = {}  # id(reply) -> (reply, figures)
        d = chat.defaults
        system = next((m["content"] for m in chat.messages if m["role"] == "system"), "")
        super().__init__(
            system=system,
            temperature=d.get("temperature"),
            top_p=d.get("top_p"),
            max_tokens=d.get("max_tokens", DEFAULT_MAX_TOKENS),
        )
        chat.defaults["max_tokens"] = self.max_tokens
        self.title = f"{name} · {chat.model}"
        self.on_msg(self._on_msg)
        chat.add_listener(self._on_chat)
        self._redraw()
        if chat.last is not None and not chat.last.done:
            self._follow(chat.last)

    # -- display ---------------------------------------------------------------------
    def _ipython_display_(self) -> None:
        # The live widget, then its transcript: a saved notebook shows the transcript.
        self.snapshot.show(self, self._saved_html(), self._plain())

    def _plain(self) -> str:
        return f"{self.title}\n\n{self.chat.transcript()}".rstrip()

    def _saved_html(self) -> str:
        return transcript_html(
            self.chat.messages, f"{self.title} · saved transcript", notes=self._note
        )

    def _note(self, message: dict) -> str:
        kept = self._figures.get(id(message))
        return kept[1] if kept and kept[0] is message else ""

    def _redraw(self) -> None:
        """Draw the settled messages (and the saved transcript after them)."""
        with self._lock:
            messages, turn = self.chat.messages, self._turn
            if self._state is not None and turn is not None:
                # Its reply is the live bubble until the last refresh, even if the job
                # has already ended and the chat holds it.
                upto = next((i for i, m in enumerate(messages) if m is turn.user), None)
                messages = messages if upto is None else messages[: upto + 1]
            self.transcript = transcript_html(messages, self.name, actions=True, notes=self._note)
            self.snapshot.update(self._saved_html(), self._plain())

    # -- what the browser asks -------------------------------------------------------
    def _on_msg(self, _widget, content: dict, _buffers) -> None:
        if isinstance(content, dict) and content.get("kind") == "sync":
            self._live.want_full()  # its copy of the live reply fell behind
            return
        kind = content.get("type") if isinstance(content, dict) else None
        try:
            self.handle(kind, content)
        except Exception as exc:  # a click has no cell to raise into: say it in the widget
            if not isinstance(exc, (ValueError, ChatBusy)):
                log.exception("ChatUI: %r failed", kind)
            self.status = str(exc) or type(exc).__name__
            if kind == "send":  # give the text back: nothing was sent
                self.send({"type": "restore", "text": content.get("text", "")})

    def handle(self, kind: str | None, content: dict | None = None) -> None:
        """Do what a button or key in the widget asked (the comm message's ``type``).

        Raises:
            ValueError: A refusal, shown in the widget's status line.
            ChatBusy: A message sent while a reply streams.
        """
        content = content or {}
        self.status = ""
        chat = self.chat
        if kind == "send":
            chat.send(str(content.get("text", "")))
        elif kind == "stop":
            if chat.last is not None and not chat.last.done:
                chat.last.cancel()
                with self._lock:
                    if self._state is not None:
                        self._state.stopping = True  # "stopping…" until it has
        elif kind == "stop_thinking":
            if chat.last is not None and not chat.last.done:
                chat.last.job.end_thinking()
        elif kind == "regenerate":
            chat.regenerate()
        elif kind == "edit":
            chat.edit(_int(content.get("index")), str(content.get("text", "")))
        elif kind == "delete":
            chat.delete(_int(content.get("index")))
        elif kind == "new":
            chat.reset()
        else:
            raise ValueError(f"unknown action {kind!r}")

    @observe("system")
    def _set_system(self, change) -> None:
        now = next((m["content"] for m in self.chat.messages if m["role"] == "system"), "")
        if change["new"] != now:
            self.chat.set_system(change["new"])

    @observe(*_SETTINGS)
    def _set_sampling(self, change) -> None:
        if change["new"] is None:
            self.chat.defaults.pop(change["name"], None)
        else:
            self.chat.defaults[change["name"]] = change["new"]

    # -- following a reply -------------------------------------------------------------
    def _on_chat(self, what: str, turn: ChatTurn | None) -> None:
        if what == "send" and turn is not None:
            self._follow(turn)
        elif what == "history":
            self._redraw()
        # "settle": the reply's last refresh draws it (it comes after the settle).

    def _follow(self, turn: ChatTurn) -> None:
        with self._lock:
            with self.hold_sync():
                self._turn, self._events, self._seen = turn, [], 0
                self._state = ViewState(model=str(self.chat.model), clock=self.clock)
                self._redraw()  # the user's message joins the bubbles at once
                self.busy = True
            # After the traits (sent as hold_sync ends): the user's bubble, then the reply's.
            self._show_live(self._live_blocks())
            turn.job.add_listener(self._events.append)  # replays what already came
        if self.start_thread:
            loop = threading.Thread(target=self._loop, args=(turn,), name="mlxnb-chat")
            loop.daemon = True
            loop.start()

    def _loop(self, turn: ChatTurn) -> None:
        period = 1 / self.refresh_hz
        while self._turn is turn and not self.refresh():
            time.sleep(period)

    def refresh(self) -> bool:
        """Fold the reply's new events and redraw it; return True once it has ended."""
        with self._lock:
            state, turn, events = self._state, self._turn, self._events
            if state is None or turn is None:
                return True
            new = events[self._seen :]
            self._seen += len(new)
            for ev in new:
                state.apply(ev)
            fin = state.finished
            if fin is None:
                with self.hold_sync():
                    self._show_live(self._live_blocks())
                    self.thinking = (
                        bool(state.reasoning) and not state.text and not (turn.job.thinking_ended)
                    )
                return False
            # The history already holds the reply: the chat's own listener on the job
            # was added first, so it settled before this Finished reached us.
            if turn.reply is not None:
                self._figures[id(turn.reply)] = (turn.reply, reply_figures(fin))
            self._state = None
            with self.hold_sync():
                self._redraw()
                self.busy, self.thinking = False, False
                if fin.finish_reason == "error":  # the chat took the exchange back
                    self.status = f"error: {fin.error}"
            # After the transcript holds the reply: it never vanishes for a frame.
            self._show_live([])
            if fin.finish_reason == "error":
                self.send({"type": "restore", "text": turn.user["content"]})
            return True

    @property
    def live(self) -> str:
        """The reply streaming now as an HTML bubble, as the browser has it; empty if none."""
        return "".join(self._live.blocks)

    def _show_live(self, blocks: list[str]) -> None:
        msg = self._live.message(blocks)
        if msg is not None:
            self.send({"type": "live", **msg})

    def _live_blocks(self) -> list[str]:
        st = self._state
        label = f" · {st.state_label()}{st.live_figures()}"
        thought = st.thinking_html() if st.reasoning else ""
        head, thought, body = bubble_parts(
            "assistant", st.body_html(), label=label, thought=thought, live=True
        )
        # styled as the settled ones
        return ['<div class="mlxnb mlxnb-chat">' + head, thought, body + "</div>"]

    def close(self) -> None:
        """Close the widget and stop listening to the conversation (which goes on)."""
        chat = getattr(self, "chat", None)  # None if __init__ failed (close runs in __del__)
        if chat is not None:
            chat.remove_listener(self._on_chat)
        self._turn = None
        super().close()


def _int(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"message number: expected an integer, got {value!r}")
    return value


__all__ = ["ChatUI", "reply_figures"]
