"""Inline-SVG charts and HTML tables for Compare, Sweep and the run history. No dependencies.

Text uses ``currentColor`` and series colours come from the theme's variables,
so the charts read in light and dark themes alike.
"""

from __future__ import annotations

import math

from ..views.render import escape

BRAND = "var(--jp-brand-color1,#1976d2)"
GOOD = "var(--jp-success-color1,#388e3c)"
HISTORY_COLUMNS = (
    "#", "action", "prompt", "mode", "k", "tok/s", "e2e s", "accepted", "TTFT s", "finish",
)  # fmt: skip
_HISTORY_WIDTHS = (4, 10, 35, 8, 4, 7, 7, 9, 7, 9)  # percent, per column; the prompt widest
# Hover text of the short headers (long ones wrap over lines in narrow columns).
TITLES = {
    "e2e s": "end to end: seconds from submit to the last token, prefill included",
    "TTFT s": "time to first token, seconds",
    "tok/s": "decode speed, tokens per second",
    "k": "draft tokens per step",
}


def _head(columns) -> str:
    cells = []
    for c in columns:
        title = f' title="{escape(TITLES[c])}"' if c in TITLES else ""
        cells.append(f"<th{title}>{escape(c)}</th>")
    return "".join(cells)


def nice_ticks(top: float, n: int = 5) -> list[float]:
    """Ticks from 0 to at least ``top`` at round steps (1, 2 or 5 times a power of 10)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _anchor(x: float, left: float, right: float, room: float = 40) -> str:
    """SVG text-anchor for a label centred at ``x`` that must stay inside the plot."""
    if x > right - room:
        return "end"
    return "start" if x < left + room else "middle"


def _fmt(v: float) -> str:
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg class="mlxnb-chart" width="{width}" height="{height}" viewBox="0 0 {width} '
        f'{height}" fill="currentColor" font-size="11" font-family="sans-serif" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


def sweep_chart(
    rows: list[dict],
    baseline: list[float],
    best_k: int | None = None,
    unit: str = "tok/s",
    width: int = 560,
    height: int = 260,
) -> str:
    """Speedup against k, the figure the best k is chosen by; normal decoding is the 1× line.

    Each k is its median speedup over the normal runs beside it, with its 95%
    interval as a bar (cut at the top of the plot when it runs past it): a
    filled dot when the interval clears the 1× line, a hollow one when it does
    not. Only ``best_k`` is ringed and labelled.

    Args:
        rows: Per k: ``{"k", "speedup", "low", "high"}`` (``speedup`` None: no
            ratio yet; ``low`` None: no interval yet).
        baseline: Normal runs' speeds: their spread is a band around the 1× line,
            and their median is in its label.
        best_k: The k to mark (`SweepResult.best_k`), if any.
        unit: Unit of the normal runs' speeds.
        width: SVG width in pixels.
        height: SVG height in pixels.
    """
    pts = [r for r in rows if r.get("speedup") is not None]
    if not pts and not baseline:
        return ""
    pad_l, pad_r, pad_t, pad_b = 52, 16, 24, 40
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    ks = [r["k"] for r in rows]
    kmin, kmax = min(ks), max(ks)
    top = max([r["speedup"] for r in pts] + [1.0])
    # Intervals from two or three runs can be very wide: the axis follows them up to
    # twice the highest median, and a longer bar is cut at the top.
    ends = [min(r["high"], 2 * top) for r in pts if r.get("high") is not None]
    if baseline:
        med = sorted(baseline)[len(baseline) // 2]
        ends.append(max(baseline) / med)
    ticks = nice_ticks(max([top, *ends]) * 1.05)
    ymax = ticks[-1]

    def x(k):
        return pad_l + (w * (k - kmin) / (kmax - kmin) if kmax > kmin else w / 2)

    def y(v):
        return pad_t + h * (1 - min(max(v, 0.0), ymax) / ymax)

    out = [
        f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}" '
        'stroke="currentColor" stroke-opacity="0.6"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + h}" '
        'stroke="currentColor" stroke-opacity="0.6"/>',
    ]
    for t in ticks:
        out.append(
            f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
            'stroke="currentColor" stroke-opacity="0.12"/>'
            f'<text x="{pad_l - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{_fmt(t)}×</text>'
        )
    for k in ks:
        out.append(f'<text x="{x(k):.1f}" y="{pad_t + h + 16}" text-anchor="middle">{k}</text>')
    out.append(
        f'<text x="{pad_l + w / 2:.1f}" y="{height - 6}" text-anchor="middle">'
        "draft tokens k</text>"
        f'<text x="14" y="{pad_t + h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {pad_t + h / 2:.1f})">speedup (95% interval)</text>'
    )
    if baseline:
        lo, hi = min(baseline) / med, max(baseline) / med
        out.append(
            f'<rect x="{pad_l}" y="{y(hi):.1f}" width="{w}" height="{max(y(lo) - y(hi), 1):.1f}" '
            'fill="currentColor" fill-opacity="0.08"/>'
            f'<text x="{pad_l + w - 4}" y="{y(1) + 14:.1f}" text-anchor="end">'
            f"normal decoding = 1× ({_fmt(med)} {escape(unit)})</text>"
        )
    out.append(
        f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{y(1):.1f}" y2="{y(1):.1f}" '
        'stroke="currentColor" stroke-dasharray="5 4"/>'
    )
    path = " ".join(f"{x(r['k']):.1f},{y(r['speedup']):.1f}" for r in pts)
    if len(pts) > 1:
        out.append(
            f'<polyline points="{path}" fill="none" style="stroke:{BRAND}" stroke-width="2" '
            'stroke-opacity="0.5"/>'
        )
    for r in pts:
        cx, cy = x(r["k"]), y(r["speedup"])
        above = cy  # where the label of the best k goes
        title = f"k={r['k']}: {r['speedup']:.2f}×"
        if r.get("low") is not None:
            above = y(r["high"])
            title += f" (95% CI {r['low']:.2f}–{r['high']:.2f}×)"
            out.append(
                f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{above:.1f}" '
                f'y2="{y(r["low"]):.1f}" style="stroke:{BRAND}" stroke-width="1.5"/>'
            )
        fill = BRAND if r.get("clears") else "none"
        out.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" style="fill:{fill};stroke:{BRAND}" '
            f'stroke-width="1.5"><title>{escape(title)}</title></circle>'
        )
        if r["k"] == best_k:
            out.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="9" fill="none" '
                f'style="stroke:{GOOD}" stroke-width="2.5"/>'
                # Anchored inward at the plot's edges, so the label is never cut off.
                f'<text x="{cx:.1f}" y="{above - 8:.1f}" '
                f'text-anchor="{_anchor(cx, pad_l, pad_l + w)}" '
                f'font-weight="bold">best k = {r["k"]}</text>'
            )
    return _svg(width, height, out, "speedup over normal decoding against draft tokens k")


def position_chart(values: list[float], width: int = 300, height: int = 130) -> str:
    """Acceptance by draft position: one bar per position, 0-100%."""
    if not values:
        return ""
    pad_l, pad_r, pad_t, pad_b = 40, 8, 16, 32
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    bw = w / len(values)
    out = [
        f'<text x="{pad_l}" y="11">accepted, by draft position</text>',
        f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}" '
        'stroke="currentColor" stroke-opacity="0.6"/>',
    ]
    for frac in (0, 0.5, 1):
        yy = pad_t + h * (1 - frac)
        out.append(f'<text x="{pad_l - 5}" y="{yy + 4:.1f}" text-anchor="end">{frac:.0%}</text>')
    for i, v in enumerate(values):
        bh = h * max(0.0, min(1.0, v))
        bx = pad_l + i * bw + bw * 0.15
        out.append(
            f'<rect x="{bx:.1f}" y="{pad_t + h - bh:.1f}" width="{bw * 0.7:.1f}" '
            f'height="{bh:.1f}" style="fill:{GOOD}"><title>position {i + 1}: {v:.0%}'
            "</title></rect>"
            f'<text x="{bx + bw * 0.35:.1f}" y="{pad_t + h + 14}" text-anchor="middle">'
            f"{i + 1}</text>"
        )
    out.append(
        f'<text x="{pad_l + w / 2:.1f}" y="{height - 3}" text-anchor="middle">position</text>'
    )
    return _svg(width, height, out, "acceptance by draft position")


def history_row(req, res, mode: str, k: int | None = None) -> dict:
    """One run of the Panel's history: prompt, mode, k, speed, acceptance, TTFT, finish."""
    prompt = req.prompt if isinstance(req.prompt, str) else str(req.prompt[-1]["content"])
    return {
        "prompt": " ".join(prompt.split()),
        "mode": mode,
        "k": None if mode == "normal" else (k or req.num_draft_tokens),
        "tps": res.stats.generation_tps,
        "e2e_s": res.stats.total_s,
        "acceptance": res.stats.acceptance_rate,
        "ttft": res.stats.ttft_s,
        "finish": res.finish_reason,
        "tokens": res.stats.generation_tokens,
    }


def history_text(rows: list[dict]) -> str:
    """Run history as plain text."""
    lines = ["  #  mode      k   tok/s  e2e s  accept  TTFT   finish  prompt"]
    for i, r in enumerate(rows):
        acc = "" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
        ttft = "" if r["ttft"] is None else f"{r['ttft']:.2f}"
        lines.append(
            f"{r.get('run', i + 1):>3}  {r['mode']:<8} {'' if r['k'] is None else r['k']:>2} "
            f"{r['tps']:7.1f} "
            f"{r['e2e_s']:6.2f} {acc:>6} {ttft:>5}  {r['finish']:<7} {r['prompt'][:30]}"
        )
    return "\n".join(lines)


def history_table(rows: list[dict]) -> str:
    """Run history as an HTML table; every cell is escaped."""
    head = _head(HISTORY_COLUMNS)
    body = []
    for i, r in enumerate(rows):
        prompt = r.get("prompt", "")
        cells = [
            r.get("run", i + 1),
            r.get("action", ""),
            prompt if len(prompt) <= 40 else prompt[:37] + "...",
            r["mode"],
            "" if r["k"] is None else str(r["k"]),
            f"{r['tps']:.1f}",
            "" if r.get("e2e_s") is None else f"{r['e2e_s']:.2f}",
            "" if r["acceptance"] is None else f"{r['acceptance']:.0%}",
            "" if r["ttft"] is None else f"{r['ttft']:.2f}",
            r["finish"],
        ]
        body.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    cols = "".join(f'<col style="width:{w}%">' for w in _HISTORY_WIDTHS)
    return (
        f"<table class='grid mlxnb-history'><colgroup>{cols}</colgroup><tr>{head}</tr>"
        f"{''.join(body)}</table>"
    )


def runs_table(rows: list[dict]) -> str:
    """The runs of a Compare: one line each."""
    head = (
        "<tr>"
        + _head(("run", "pair", "decoding", "tok/s", "e2e s", "TTFT s", "accepted", "finish"))
        + "</tr>"
    )
    body = []
    for r in rows:
        acc = f"{r['accepted']}/{r['proposed']}" if r["proposed"] else ""
        ttft = "" if r["ttft_s"] is None else f"{r['ttft_s']:.2f}"
        cells = [
            r["run"],
            r["pair"],
            r["role"],
            f"{r['decode_tps']:.1f}",
            f"{r['e2e_s']:.2f}",
            ttft,
            acc,
            r["finish_reason"],
        ]
        body.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    # Sized by content: short cells, and a fixed layout would break "speculative".
    return f"<table class='grid auto'>{head}{''.join(body)}</table>"
