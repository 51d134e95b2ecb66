"""``%%chat`` and ``%chat``: named conversations in cells, a thin layer over `Chat`.

The cell body is the next user message; the reply streams into the cell with
Stop and is saved with the notebook like a ``%%generate`` output.
"""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.utils.process import arg_split

from ...chat.conversation import Chat, ChatBusy
from ..views.transcript import transcript_html
from .options import HELP, generation_options, in_flags, parse, wants_help

COMMANDS = "list | history [NAME] | reset [NAME] | undo [NAME] | save NAME FILE | " \
    "load NAME FILE | show [NAME] | ui [NAME]"  # fmt: skip


@magics_class
class ChatMagics(Magics):
    """``%%chat`` (send a message) and ``%chat`` (manage conversations).

    Args:
        shell: The IPython shell.
        settings: The `MLXNotebook` magics, for defaults, routing and views.
    """

    def __init__(self, shell, settings) -> None:
        super().__init__(shell=shell)
        self.settings = settings
        self.chats: dict[str, Chat] = {}

    @magic_arguments()
    @argument("-c", "--chat", default="chat", help="conversation name (default: chat)")
    @argument("-s", "--system", default=None, help="system prompt, when the chat starts")
    @generation_options
    @line_cell_magic
    def chat(self, line: str, cell: str | None = None):
        """``%%chat``: the cell is the next message; ``%chat CMD``: {commands}."""
        if wants_help(line):
            print(HELP)
            return None
        if cell is None:
            return self.command(line)
        args = parse(self.chat, line)
        fields = self.settings.request_fields(args)
        text, notices = self.settings.fill_body(cell)
        if not text.strip():
            raise UsageError("%%chat: the message is empty")
        conv = self._conversation(args.chat, fields.pop("model"), args.system)
        route = self.settings.route(conv.model)
        try:
            turn = conv.send(text, **fields)
        except (ValueError, ChatBusy) as exc:
            where = "" if args.chat == "chat" else f" {args.chat}"
            raise UsageError(f"%%chat{where}: {in_flags(str(exc))}") from None
        n = sum(m["role"] == "user" for m in conv.messages)
        name = "chat" if args.chat == "chat" else f"chat {args.chat!r}"
        label = f"{name}, turn {n} · {route.label}"
        bind = (args.out, turn) if args.out else None
        self.settings.show(turn.job, label, args.format, notices, bind, args.wait)

    chat.__doc__ = chat.__doc__.replace("{commands}", COMMANDS)

    def _conversation(self, name: str, model: str, system: str | None) -> Chat:
        conv = self.chats.get(name)
        if conv is None:
            s = self.settings
            engine = s._engine if s._engine is not None and not s._engine.closed else None
            conv = self.chats[name] = Chat(
                model, system, backend=engine, server_url=s.server_url or None
            )
        elif system and not any(m["role"] == "system" for m in conv.messages):
            conv.messages.insert(0, {"role": "system", "content": system})
        conv.model = model  # -m may change the model mid-conversation
        return conv

    # -- %chat -----------------------------------------------------------------
    def command(self, line: str):
        """``%chat`` commands; each refusal is one line."""
        words = arg_split(line, posix=True, strict=False)
        if not words:
            raise UsageError(f"%chat needs a command: {COMMANDS}")
        cmd, rest = words[0], words[1:]
        if cmd == "list":
            if not self.chats:
                print("no conversations yet (start one with %%chat)")
            for name, c in self.chats.items():
                turns = sum(m["role"] == "user" for m in c.messages)
                print(f"{name}: {turns} turn(s), model {c.model}")
        elif cmd == "ui":
            name = rest[0] if rest else "chat"
            s = self.settings
            conv = self.chats.get(name) or self._conversation(name, s.default_model, None)
            return self._ui(name, conv)
        elif cmd in ("history", "reset", "undo", "show"):
            name = rest[0] if rest else "chat"
            conv = self._known(name)
            if cmd == "history":
                print(conv.transcript() or f"{name}: no messages yet")
            elif cmd == "reset":
                conv.reset()
                print(f"{name}: history cleared")
            elif cmd == "undo":
                removed = conv.undo()
                print(f"{name}: removed {len(removed)} message(s)" if removed else
                      f"{name}: nothing to undo")  # fmt: skip
            else:
                self._show(name, conv)
        elif cmd in ("save", "load"):
            if len(rest) != 2:
                raise UsageError(f"usage: %chat {cmd} NAME FILE")
            name, path = rest
            if cmd == "save":
                self._known(name).save(path)
                print(f"{name}: saved {len(self.chats[name].messages)} message(s) to {path}")
            else:
                try:
                    old = self.chats.get(name)
                    model = old.model if old else self.settings.default_model
                    self.chats[name] = Chat.load(path, model=model)
                except ValueError as exc:
                    raise UsageError(f"%chat load: {exc}") from None
                print(f"{name}: loaded {len(self.chats[name].messages)} message(s) from {path}")
        else:
            raise UsageError(f"unknown %chat command {cmd!r}; commands: {COMMANDS}")
        return None

    def _known(self, name: str) -> Chat:
        if name not in self.chats:
            known = ", ".join(self.chats) or "none yet"
            raise UsageError(f"no conversation named {name!r} (known: {known})")
        return self.chats[name]

    def _ui(self, name: str, conv: Chat):
        from ..chat_ui.widget import ChatUI

        return ChatUI(conv, name=name)  # the cell's result: displayed with its transcript

    def _show(self, name: str, conv: Chat) -> None:
        from IPython.display import display

        title = "chat" if name == "chat" else f"chat {name}"
        html = transcript_html(conv.messages, title)
        display({"text/html": html, "text/plain": conv.transcript()}, raw=True)


__all__ = ["ChatMagics"]
