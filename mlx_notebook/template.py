"""``{name}`` in a cell body, filled from the user's variables.

Rules: ``{{`` and ``}}`` are literal braces; ``{name}`` takes a variable the
user defined (not IPython's own names, nothing starting with ``_``, no
modules); anything else in braces (``{0}``, ``{"a": 1}``) stays as written.
An unknown name also stays as written, and is reported so the view can say so.
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping

_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z][A-Za-z0-9_]*)\}")


class TemplateError(ValueError):
    """A variable's ``str()`` raised; the message is one line naming it."""


def cell_body(cell: str) -> str:
    """The text a user typed in a cell: IPython ends every cell with a newline they did not."""
    return cell[:-1] if cell.endswith("\n") else cell


def visible(namespace: Mapping, hidden: Mapping | set | None = None) -> dict:
    """The variables a template may use: the user's own, without modules."""
    hidden = hidden or ()
    return {
        k: v
        for k, v in namespace.items()
        if not k.startswith("_") and k not in hidden and not isinstance(v, types.ModuleType)
    }


def fill(template: str, variables: Mapping) -> tuple[str, list[str]]:
    """Fill ``template``; return ``(text, unknown_names)``.

    Raises:
        TemplateError: A variable could not be turned into text.
    """
    unknown: list[str] = []

    def sub(m: re.Match) -> str:
        tok = m.group(0)
        if tok == "{{":
            return "{"
        if tok == "}}":
            return "}"
        name = m.group(1)
        if name not in variables:
            if name not in unknown:
                unknown.append(name)
            return tok
        try:
            return str(variables[name])
        except Exception as exc:
            raise TemplateError(
                f"{{{name}}}: str() of the variable {name!r} raised "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
            ) from None

    return _TOKEN.sub(sub, template), unknown


def unknown_notice(names: list[str]) -> str:
    """The view's warning line for unknown names."""
    listed = ", ".join("{" + n + "}" for n in names)
    return (
        f"{listed} {'is' if len(names) == 1 else 'are'} not defined and "
        f"{'was' if len(names) == 1 else 'were'} left as written (use {{{{ }}}} for literal braces)"
    )
