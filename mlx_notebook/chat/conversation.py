"""Multi-turn conversations: `Chat`, independent of IPython (``%%chat`` is a thin layer).

Each turn sends the whole message list; the engine's prompt cache keeps the
conversation's KV cache, so a turn prefills only its new tokens. Editing
``chat.messages`` is safe: the cache reuses the unchanged prefix and recomputes
the rest. A turn that is stopped keeps its partial reply as the assistant's
message, marked ``"stopped": True``, and the next turn continues from it.

`regenerate`, `edit` and `delete` change the history the way a chat window
does; an edit or a regeneration keeps the conversation as it was in
``chat.branches``. Listeners (`add_listener`) hear of every change, so a view
(`ChatUI`) and code can take turns on one conversation.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from ..engine.errors import GenerationError
from ..engine.events import Finished
from ..engine.request import Request
from .turn import ChatTurn

log = logging.getLogger("mlx_notebook")

ROLES = ("system", "user", "assistant")
_NOT_DEFAULTS = {"prompt", "model", "system", "chat"}
REQUEST_FIELDS = {f.name for f in fields(Request)} - _NOT_DEFAULTS


class ChatBusy(RuntimeError):
    """A turn is still generating; stop it or wait for it before sending another."""


class Chat:
    """A conversation with a model: send messages, keep the history, reuse its cache.

    Args:
        model: Model spec (``default``, a path, a hub id or ``http(s)://…/v1#MODEL``).
        system: Optional system prompt, the first message.
        backend: Where to run; chosen from ``model`` when None.
        server_url: A server for non-URL model specs (as ``MLXNotebook.server_url``).
        **request_defaults: `Request` fields for every turn (``max_tokens``,
            ``temperature``, ``draft``, ``stop``, ...).

    Raises:
        ValueError: An unknown request field.
    """

    def __init__(
        self,
        model: str = "default",
        system: str | None = None,
        *,
        backend=None,
        server_url: str | None = None,
        **request_defaults,
    ) -> None:
        unknown = set(request_defaults) - REQUEST_FIELDS
        if unknown:
            raise ValueError(f"Chat: unknown request field(s): {', '.join(sorted(unknown))}")
        self.model, self.backend, self.server_url = model, backend, server_url
        self.defaults = dict(request_defaults)
        self.messages: list[dict] = [{"role": "system", "content": system}] if system else []
        self.last: ChatTurn | None = None
        self.branches: list[list[dict]] = []
        self._listeners: list[Callable[[str, ChatTurn | None], None]] = []
        self._lock = threading.Lock()

    def add_listener(self, fn: Callable[[str, ChatTurn | None], None]) -> None:
        """Call ``fn(what, turn)`` after each change of the conversation.

        ``what`` is ``"send"`` (a turn started), ``"settle"`` (it ended) or
        ``"history"`` (messages changed otherwise).

        It runs on whichever thread made the change (the worker's for ``"settle"``);
        an exception in it is logged, never raised into the change.
        """
        self._listeners.append(fn)

    def remove_listener(self, fn) -> None:
        """Stop calling ``fn`` (no error if it was not added)."""
        if fn in self._listeners:
            self._listeners.remove(fn)

    def _notify(self, what: str, turn: ChatTurn | None = None) -> None:
        for fn in list(self._listeners):
            try:
                fn(what, turn)
            except Exception:  # a view's bug must not break the conversation
                log.exception("chat listener %r failed on %r", fn, what)

    # -- turns -------------------------------------------------------------------
    def _route(self):
        if self.backend is not None:
            return self.backend, self.model
        from ..engine.backend import backend_for

        r = backend_for(self.model, self.server_url)
        return r.backend, r.model

    def request(self, text: str, **overrides) -> Request:
        """The request the next turn would send for ``text`` (nothing is sent)."""
        unknown = set(overrides) - REQUEST_FIELDS
        if unknown:
            raise ValueError(f"unknown request field(s): {', '.join(sorted(unknown))}")
        _, model = self._route()
        prompt = [_clean(m) for m in self.messages] + [{"role": "user", "content": text}]
        return Request(prompt=prompt, model=model, chat=True, **{**self.defaults, **overrides})

    def send(self, text: str, **overrides) -> ChatTurn:
        """Send the next user message; return the streaming turn.

        Raises:
            ValueError: An empty message or a bad option (nothing was sent).
            ChatBusy: The previous turn is still generating.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("message: must not be empty")
        with self._lock:
            if self.last is not None and not self.last.done:
                raise ChatBusy(
                    "the previous turn is still generating; stop it (or wait) before sending"
                )
            backend, _ = self._route()
            job = backend.submit(self.request(text, **overrides))  # raises before any change
            user = {"role": "user", "content": text}
            self.messages.append(user)
            turn = self.last = ChatTurn(job, user, self._settle)
        self._notify("send", turn)
        return turn

    def ask(self, text: str, **overrides) -> str:
        """Send and block for the reply's text (Ctrl-C stops it, keeping the partial reply).

        Raises:
            GenerationError: The reply ended in error.
        """
        return self.send(text, **overrides).wait().text

    def _settle(self, turn: ChatTurn, fin: Finished) -> None:
        with self._lock:
            if fin.finish_reason == "error":
                # A failed exchange leaves no half in the history: try again as it was.
                i = _index(self.messages, turn.user)
                if i is not None:
                    del self.messages[i]
            else:
                reply = {"role": "assistant", "content": fin.text}
                if fin.reasoning:  # the key Qwen3, gpt-oss and others' templates read
                    reply["reasoning_content"] = fin.reasoning
                if fin.finish_reason == "cancelled":
                    reply["stopped"] = True
                turn.reply = reply
                i = _index(self.messages, turn.user)
                if i is not None:  # not undone or reset meanwhile
                    self.messages.insert(i + 1, reply)
        self._notify("settle", turn)

    # -- history -----------------------------------------------------------------
    def undo(self) -> list[dict]:
        """Remove the last exchange (stopping it if it is still running); return it."""
        self._stop_running()
        with self._lock:
            last_user = self._last_user()
            removed = self.messages[last_user:] if last_user is not None else []
            del self.messages[len(self.messages) - len(removed) :]
        if removed:
            self._notify("history")
        return removed

    def reset(self) -> None:
        """Forget every exchange (the system prompt stays)."""
        self._stop_running()
        with self._lock:
            self.messages[:] = [m for m in self.messages if m["role"] == "system"][:1]
        self._notify("history")

    def regenerate(self, **overrides) -> ChatTurn:
        """Answer the last user message again, replacing its reply (kept in `branches`).

        A reply still running is stopped first.

        Raises:
            ValueError: There is no user message yet, or a bad option (nothing changed).
        """
        self._stop_running()
        with self._lock:
            u = self._last_user()
            if u is None:
                raise ValueError("nothing to regenerate: the conversation has no message yet")
        return self._resend(u, self.messages[u]["content"], overrides)

    def edit(self, index: int, text: str, **overrides) -> ChatTurn:
        """Replace user message ``index`` with ``text`` and answer it from there.

        The messages after it go; the conversation as it was is kept in
        `branches`. The prompt cache still serves everything before the edit.

        Raises:
            ValueError: ``index`` is not a user message, ``text`` is empty, or a bad
                option (nothing changed).
        """
        self._stop_running()
        with self._lock:
            if not 0 <= index < len(self.messages) or self.messages[index]["role"] != "user":
                raise ValueError(f"message {index} is not a user message")
        return self._resend(index, text, overrides)

    def _resend(self, index: int, text: str, overrides: dict) -> ChatTurn:
        with self._lock:
            before = copy.deepcopy(self.messages)
            tail = self.messages[index:]
            del self.messages[index:]
        try:
            turn = self.send(text, **overrides)
        except BaseException:
            with self._lock:
                self.messages[index:index] = tail  # refused: the history stays as it was
            raise
        self.branches.append(before)
        return turn

    def delete(self, index: int) -> list[dict]:
        """Remove the exchange holding message ``index`` (the user message and its reply).

        Whole exchanges go, so roles keep alternating as chat templates require. A
        reply still running in it is stopped.

        Raises:
            ValueError: ``index`` is out of range or the system prompt.
        """
        doomed = self._exchange(index)
        turn = self.last
        if turn is not None and not turn.done and any(m is turn.user for m in doomed):
            self._stop_running()  # its stopped reply joins the exchange
            doomed = self._exchange(_index(self.messages, turn.user))
        with self._lock:
            for m in doomed:
                i = _index(self.messages, m)
                if i is not None:
                    del self.messages[i]
        self._notify("history")
        return doomed

    def _exchange(self, index: int) -> list[dict]:
        with self._lock:
            if not 0 <= index < len(self.messages):
                raise ValueError(f"no message {index} (the chat has {len(self.messages)})")
            if self.messages[index]["role"] == "system":
                raise ValueError("the system prompt is not an exchange; set it instead")
            start = index
            while start > 0 and self.messages[start]["role"] != "user":
                start -= 1
            end = index + 1
            while end < len(self.messages) and self.messages[end]["role"] != "user":
                end += 1
            return self.messages[start:end]

    def set_system(self, text: str | None) -> None:
        """Set, replace or (with ``""``/None) remove the system prompt."""
        with self._lock:
            rest = [m for m in self.messages if m["role"] != "system"]
            self.messages[:] = ([{"role": "system", "content": text}] if text else []) + rest
        self._notify("history")

    def _last_user(self) -> int | None:
        return max((i for i, m in enumerate(self.messages) if m["role"] == "user"), default=None)

    def fork(self) -> Chat:
        """An independent copy of the conversation with the same settings."""
        other = Chat(self.model, backend=self.backend, server_url=self.server_url, **self.defaults)
        with self._lock:
            other.messages = copy.deepcopy(self.messages)
        return other

    def _stop_running(self) -> None:
        turn = self.last
        if turn is not None and not turn.done:
            turn.cancel()
            turn.job.settle()
            turn._settle(turn.job.finished)

    # -- text and files ------------------------------------------------------------
    def transcript(self) -> str:
        """The conversation as readable text."""
        out = []
        for m in self.messages:
            mark = " (stopped)" if m.get("stopped") else ""
            out.append(f"[{m['role']}{mark}]\n{m['content']}")
        return "\n\n".join(out)

    def save(self, path: str | Path) -> None:
        """Write the messages as JSON (OpenAI's and mlx-lm's chat-template format)."""
        Path(path).write_text(json.dumps(self.messages, ensure_ascii=False, indent=1))

    @classmethod
    def load(cls, path: str | Path, **kw) -> Chat:
        """A conversation from a JSON file of messages (as `save` writes).

        Raises:
            ValueError: The file cannot be read or is not a list of messages.
        """
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ValueError(f"{str(path)!r} is not JSON: {exc}") from None
        chat = cls(**kw)
        chat.messages = validate_messages(data, str(path))
        return chat


def validate_messages(data, where: str = "messages") -> list[dict]:
    """Check a list of chat messages; return copies.

    Raises:
        ValueError: One line saying what is wrong and where.
    """
    if not isinstance(data, list):
        raise ValueError(f"{where}: expected a JSON list of messages, got {type(data).__name__}")
    out = []
    for i, m in enumerate(data):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ValueError(f"{where}: message {i} needs a role of {', '.join(ROLES)}")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"{where}: message {i} needs a text 'content'")
        out.append(dict(m))
    return out


def _index(messages: list[dict], message: dict) -> int | None:
    # By identity: two messages with the same text are still two messages.
    return next((i for i, m in enumerate(messages) if m is message), None)


def _clean(m: dict) -> dict:
    # Only what chat templates and servers expect; our own marks stay in the history.
    out = {"role": m["role"], "content": m["content"]}
    if m.get("reasoning_content"):
        out["reasoning_content"] = m["reasoning_content"]
    return out


__all__ = ["Chat", "ChatBusy", "ChatTurn", "GenerationError", "validate_messages"]
