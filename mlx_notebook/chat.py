"""Multi-turn conversations: `Chat`, independent of IPython (``%%chat`` is a thin layer).

Each turn sends the whole message list; the engine's prompt cache keeps the
conversation's KV cache, so a turn prefills only its new tokens. Editing
``chat.messages`` is safe: the cache reuses the unchanged prefix and recomputes
the rest. A turn that is stopped keeps its partial reply as the assistant's
message, marked ``"stopped": True``, and the next turn continues from it.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import fields
from pathlib import Path

from .engine.errors import GenerationError
from .engine.events import Event, Finished
from .engine.job import Job
from .engine.request import Request

ROLES = ("system", "user", "assistant")
_NOT_DEFAULTS = {"prompt", "model", "system", "chat"}
REQUEST_FIELDS = {f.name for f in fields(Request)} - _NOT_DEFAULTS


class ChatBusy(RuntimeError):
    """A turn is still generating; stop it or wait for it before sending another."""


class ChatTurn:
    """One exchange: the user's message and the reply as it streams.

    Attributes:
        chat: The conversation.
        job: The engine job of the reply.
        user: The user's message (a dict in ``chat.messages``).
    """

    def __init__(self, chat: Chat, job: Job, user: dict) -> None:
        self.chat, self.job, self.user = chat, job, user
        self.reply: dict | None = None
        self._settled = False
        self._lock = threading.Lock()
        job.add_listener(self._on_event)

    def _on_event(self, ev: Event) -> None:
        if isinstance(ev, Finished):
            self._settle(ev)

    def _settle(self, fin: Finished) -> None:
        # Called by the listener and by `wait` (whichever comes first): the history
        # must hold the reply as soon as the turn has ended.
        with self._lock:
            if self._settled:
                return
            self._settled = True
        self.chat._settle(self, fin)

    @property
    def text(self) -> str:
        """The reply so far (final once `done`)."""
        return self.job.text

    @property
    def done(self) -> bool:
        """Whether the reply has ended."""
        return self.job.done

    @property
    def finish_reason(self) -> str | None:
        """``stop``, ``length``, ``cancelled`` or ``error``; None while running."""
        fin = self.job.finished
        return fin.finish_reason if fin else None

    @property
    def stats(self):
        """Timing figures once done."""
        fin = self.job.finished
        return fin.stats if fin else None

    def wait(self, timeout: float | None = None) -> ChatTurn:
        """Block until the reply ends; Ctrl-C stops it (the partial reply is kept).

        Raises:
            GenerationError: The reply ended in error (the exchange was taken back).
        """
        try:
            self.job.result(timeout)
        finally:
            if self.job.done:
                self._settle(self.job.finished)
        return self

    def cancel(self) -> None:
        """Stop the reply (the partial text stays in the history, marked stopped)."""
        self.job.cancel()

    def __repr__(self) -> str:
        state = self.finish_reason or "running"
        return f"<ChatTurn {state}, {len(self.text)} chars>"


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
        self._lock = threading.Lock()

    # -- turns -------------------------------------------------------------------
    def _route(self):
        if self.backend is not None:
            return self.backend, self.model
        from .engine.backend import backend_for

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
            turn = self.last = ChatTurn(self, job, user)
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
                if turn.user in self.messages:
                    self.messages.remove(turn.user)
                return
            reply = {"role": "assistant", "content": fin.text}
            if fin.reasoning:  # the key Qwen3, gpt-oss and others' templates read
                reply["reasoning_content"] = fin.reasoning
            if fin.finish_reason == "cancelled":
                reply["stopped"] = True
            turn.reply = reply
            if turn.user in self.messages:  # not undone or reset meanwhile
                i = next(i for i, m in enumerate(self.messages) if m is turn.user)
                self.messages.insert(i + 1, reply)

    # -- history -----------------------------------------------------------------
    def undo(self) -> list[dict]:
        """Remove the last exchange (stopping it if it is still running); return it."""
        self._stop_running()
        with self._lock:
            last_user = max(
                (i for i, m in enumerate(self.messages) if m["role"] == "user"), default=None
            )
            if last_user is None:
                return []
            removed = self.messages[last_user:]
            del self.messages[last_user:]
            return removed

    def reset(self) -> None:
        """Forget every exchange (the system prompt stays)."""
        self._stop_running()
        with self._lock:
            self.messages[:] = [m for m in self.messages if m["role"] == "system"][:1]

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


def _clean(m: dict) -> dict:
    # Only what chat templates and servers expect; our own marks stay in the history.
    out = {"role": m["role"], "content": m["content"]}
    if m.get("reasoning_content"):
        out["reasoning_content"] = m["reasoning_content"]
    return out


__all__ = ["Chat", "ChatBusy", "ChatTurn", "GenerationError", "validate_messages"]
