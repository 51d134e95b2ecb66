"""What the Panel shows as text: its snapshot, history table, sampling line and sweep estimate.

All of it is static HTML with every value escaped, so the snapshot a saved
notebook keeps is as inert as any other view.
"""

from __future__ import annotations

import statistics

from ..measure_views.charts import history_table
from ..views.render import escape
from ..views.style import STYLE

SHOWN_ROWS = 10  # history rows shown; the rest sit behind "show all"
_SOURCES = {"none": "none", "lookup": "prompt lookup", "suffix": "suffix", "model": "draft model"}


def history_html(rows: list[dict], shown: int = SHOWN_ROWS) -> str:
    """The last ``shown`` runs as a table, and every run behind a "show all" fold."""
    if not rows:
        return ""
    html = history_table(rows[-shown:])
    if len(rows) > shown:
        html += (
            f'<details class="mlxnb-all"><summary>show all {len(rows)} runs</summary>'
            f"{history_table(rows)}</details>"
        )
    return f'{STYLE}<div class="mlxnb">{html}</div>'


def sampling_text(defaults: dict) -> str:
    """A model's own sampling (its ``defaults``), as `defaults.describe` says it."""
    from ...engine.defaults import describe, in_force
    from ...engine.request import Request

    return escape(describe(in_force(Request(""), defaults)))


def _duration(s: float) -> str:
    if s < 60:
        return f"{max(1, round(s))} s"
    if s < 3600:
        m, sec = divmod(round(s), 60)
        return f"{m} min" + (f" {sec} s" if sec and m < 10 else "")
    h, m = divmod(round(s / 60), 60)
    return f"{h} h" + (f" {m} min" if m else "")


def seconds_per_token(rows: list[dict], model: str) -> float | None:
    """Median end-to-end seconds per generated token over this model's past runs."""
    per = [
        r["e2e_s"] / r["tokens"]
        for r in rows
        if r.get("model") == model and r.get("tokens") and r.get("e2e_s")
    ]
    return statistics.median(per) if per else None


def estimate_text(panel) -> str:
    """Before a sweep: how many runs it makes, and at most how long they take."""
    from ...measure.sweep import schedule

    if panel.draft_source == "none":
        return ""
    lo, hi = sorted((panel.sweep_from, panel.sweep_to))
    ks = list(range(lo, hi + 1))
    runs = len(schedule(ks, panel.repeats))
    what = f"Sweep k {ks[0]}–{ks[-1]}: {runs} runs of up to {panel.max_tokens} tokens"
    per = seconds_per_token(panel.history, panel.route().model)
    if per is None:
        return escape(f"{what}; Generate once for a time estimate")
    return escape(f"{what}, at most about {_duration(runs * panel.max_tokens * per)}")


def settings_line(panel) -> str:
    """The settings of the snapshot: model, drafts, sampling, budget."""
    bits = [f"model {panel.model}", f"drafts: {_SOURCES[panel.draft_source]}"]
    if panel.draft_source == "model":
        bits[-1] += f" {panel.draft_model}"
    if panel.draft_source != "none":
        bits[-1] += f", k {panel.num_draft_tokens}"
    if panel.draft_source == "lookup":
        bits[-1] += f", n-gram {panel.lookup_ngram}"
    if panel.model_sampling:
        bits.append("the model's own sampling")
    else:
        bits.append(f"temperature {panel.temperature:g}, top-p {panel.top_p:g}")
    bits.append(f"at most {panel.max_tokens} tokens")
    return " · ".join(escape(b) for b in bits)


def snapshot_html(panel) -> str:
    """The panel's last state as a document: settings, prompt, last run, history."""
    view = panel._view.renderer.html() if panel._view is not None else ""
    prompt = panel.prompt if len(panel.prompt) <= 400 else panel.prompt[:397] + "..."
    parts = [
        f'{STYLE}<div class="mlxnb"><div class="hdr"><span class="state">Panel</span> · '
        f"{settings_line(panel)} · saved snapshot (run the cell for live controls)</div>",
        f'<pre class="txt">{escape(prompt)}</pre>' if prompt.strip() else "",
        "</div>",
        view,
        history_html(panel.history),
    ]
    return "".join(parts)
