"""A conversation as HTML: one bubble per message, styled by role. No widgets.

``%chat show``, the `ChatUI` widget and the transcript a saved notebook keeps
all render through here, so the live bubbles and the saved ones look the same.
Every message is untrusted text: Markdown is rendered safely (`markup`), and
the only markup of our own is the bubble frame and, in the live widget, its
action buttons, which carry a message's number and nothing the model wrote
(a user message's text rides in an escaped attribute, for editing).
"""

from __future__ import annotations

from collections.abc import Callable

from .markup import escape, markdown_html, thinking_html
from .style import STYLE

ROLES = ("user", "assistant", "system")

# (action, label, title) per button; the label is visible text, so it is also the name
# a screen reader reads.
_ACTIONS = {
    "edit": ("Edit", "Edit this message: the conversation goes on from the new text"),
    "regenerate": ("Regenerate", "Answer the last message again (the old reply is kept)"),
    "delete": ("Delete", "Delete this exchange: the message and its reply"),
}


def bubble_html(role: str, body: str, **kw) -> str:
    """One message's bubble: `bubble_parts` (same arguments), joined."""
    return "".join(bubble_parts(role, body, **kw))


def bubble_parts(
    role: str,
    body: str,
    *,
    label: str = "",
    thought: str = "",
    foot: str = "",
    index: int | None = None,
    actions: tuple[str, ...] = (),
    raw: str | None = None,
    live: bool = False,
) -> tuple[str, str, str]:
    """One message's bubble in three parts: its role line, its reasoning, its text.

    A live bubble is sent part by part: the role line's figures change at every
    refresh, the text grows at its end.

    Args:
        role: ``user``, ``assistant`` or ``system`` (anything else is styled neutrally).
        body: The message as HTML, already made safe.
        label: Text after the role (``· stopped``, live figures), escaped here.
        thought: The folded reasoning's HTML (`thinking_html`), above the body.
        foot: A line under the body (the reply's figures), escaped here.
        index: The message's number in ``chat.messages``, for the actions.
        actions: Buttons to show: ``edit``, ``regenerate``, ``delete``.
        raw: The message's own text, for editing in place.
        live: The reply streaming now.

    Returns:
        The role line (opening the bubble), the reasoning, the text (closing it).
    """
    kind = role if role in ROLES else "other"
    attrs = f' data-i="{index}"' if index is not None else ""
    if raw is not None:
        attrs += f' data-raw="{escape(raw)}"'
    buttons = "".join(
        f'<button type="button" class="act" data-act="{a}" data-i="{index}" '
        f'title="{escape(_ACTIONS[a][1])}">{_ACTIONS[a][0]}</button>'
        for a in actions
    )
    tools = f'<span class="acts">{buttons}</span>' if buttons else ""
    foot_html = f'<div class="stats">{escape(foot)}</div>' if foot else ""
    mark = f'<span class="lbl">{escape(label)}</span>' if label else ""
    return (
        f'<div class="turn {kind}{" live" * live}"{attrs}>'
        f'<div class="role">{escape(role)}{mark}{tools}</div>',
        thought,
        f'<div class="md">{body}</div>{foot_html}</div>',
    )


def transcript_html(
    messages: list[dict],
    title: str,
    *,
    actions: bool = False,
    notes: Callable[[dict], str] | None = None,
    style: bool = True,
) -> str:
    """The conversation as one document: a header, then a bubble per message.

    Args:
        messages: ``chat.messages``.
        title: The header's first words (``chat``, ``chat notes``).
        actions: Edit/regenerate/delete buttons (the live widget only: a saved
            document has nothing to click).
        notes: A reply's figures (TTFT, cached tokens), shown under its bubble.
        style: Include the stylesheet.
    """
    turns = sum(m["role"] == "user" for m in messages)
    parts = [
        STYLE if style else "",
        f'<div class="mlxnb mlxnb-chat"><div class="hdr">{escape(title)} · '
        f"{turns} turn{'s' if turns != 1 else ''}</div>",
    ]
    last = len(messages) - 1
    for i, m in enumerate(messages):
        role = m["role"]
        acts: tuple[str, ...] = ()
        if actions and role == "user":
            acts = ("edit", "delete")
        elif actions and role == "assistant":
            acts = ("regenerate", "delete") if i == last else ("delete",)
        thought = thinking_html(m["reasoning_content"], False) if m.get("reasoning_content") else ""
        parts.append(
            bubble_html(
                role,
                markdown_html(m["content"]),
                label=" · stopped" if m.get("stopped") else "",
                thought=thought,
                foot=notes(m) if notes and role == "assistant" else "",
                index=i,
                actions=acts,
                raw=m["content"] if actions and role == "user" else None,
            )
        )
    parts.append("</div>")
    return "".join(parts)


__all__ = ["bubble_html", "transcript_html"]
