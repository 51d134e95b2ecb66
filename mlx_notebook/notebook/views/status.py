"""``%mlx status`` as a small document: what a user needs first, the internals folded.

Each backend: its state in one line (where it runs, the worker, the jobs), its models
as a table, then a folded list of how it is accelerated and what it caches. Text
wraps at spaces like prose (stdout would break words anywhere), and every string is
escaped: model names and server replies are not markup.
"""

from __future__ import annotations

from .markup import escape
from .style import STYLE

CSS = (
    "<style>"
    ".mlxnb.mlxnb-status{white-space:normal;overflow-wrap:break-word;line-height:1.5}"
    ".mlxnb-status .state{font-weight:600}"
    ".mlxnb-status table.grid{margin:4px 0}"
    ".mlxnb-status details{margin-top:4px}"
    ".mlxnb-status summary{cursor:pointer}"
    ".mlxnb-status ul{margin:2px 0 0 0;padding-left:1.4em}"
    "</style>"
)


def status_html(infos) -> str:
    """The status of each backend (`EngineInfo`), as one HTML document."""
    parts = [_one(info) for info in infos]
    return f'{STYLE}{CSS}<div class="mlxnb mlxnb-status">{"<hr>".join(parts)}</div>'


def _one(info) -> str:
    worker = "ready" if info.worker_alive else "stopped"
    running = f"job {info.running} running" if info.running is not None else "idle"
    queued = f"{info.queued} queued" if info.queued else "nothing queued"
    where = "on a server" if info.kind == "remote" else "local"
    head = (
        f'<div><span class="state">{escape(where)} · {escape(info.device)}</span> · '
        f"worker {worker} · {escape(running)} · {escape(queued)}</div>"
    )
    if info.closed:
        head += f'<div class="err">closed: {escape(info.closed)}</div>'
    if info.models:
        rows = "".join(
            "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in _model_row(m, info.kind)) + "</tr>"
            for m in info.models
        )
        heads = ("model", "precision", "memory", "sampling by default")
        width = 4 if info.kind == "local" else 1
        head += (
            '<table class="grid"><tr>'
            + "".join(f"<th>{h}</th>" for h in heads[:width])
            + f"</tr>{rows}</table>"
        )
    else:
        head += "<div>no model loaded yet</div>"
    if info.notes:
        items = "".join(f"<li>{escape(n)}</li>" for n in info.notes)
        head += (
            f"<details><summary>acceleration, batch and caches</summary><ul>{items}</ul></details>"
        )
    return head


def _model_row(m, kind: str) -> list[str]:
    if kind != "local":
        return [m.name]
    from ...engine.info import sampling_text

    memory = f"{m.memory_mb} MB" if m.memory_mb is not None else ""
    return [m.name, m.dtype or "", memory, sampling_text(m.defaults)]
