"""Tiny inline-SVG chart and HTML table for the panel's sweep and history. No dependencies."""

from __future__ import annotations

from .render import escape

COLUMNS = ("mode", "k", "tok/s", "acceptance", "TTFT s", "finish")


def history_table(rows: list[dict]) -> str:
    """Run history as an HTML table; every cell is escaped."""
    head = "".join(f"<th style='padding:2px 8px;text-align:left'>{c}</th>" for c in COLUMNS)
    body = []
    for r in rows:
        cells = [
            r["mode"],
            "" if r["k"] is None else str(r["k"]),
            f"{r['tps']:.1f}",
            "" if r["acceptance"] is None else f"{r['acceptance']:.0%}",
            "" if r["ttft"] is None else f"{r['ttft']:.2f}",
            r["finish"],
        ]
        body.append(
            "<tr>"
            + "".join(f"<td style='padding:2px 8px'>{escape(str(c))}</td>" for c in cells)
            + "</tr>"
        )
    return (
        f"<table class='mlxnb-history' style='font-size:12px;border-collapse:collapse'>"
        f"<tr>{head}</tr>{''.join(body)}</table>"
    )


def sweep_chart(
    points: list[tuple[int, float, float | None]],
    baseline: float | None,
    width: int = 420,
    height: int = 200,
) -> str:
    """tok/s (blue, left axis) and acceptance (green, right axis) against k, as SVG.

    Args:
        points: ``(k, tokens_per_s, acceptance_rate)`` per speculative run.
        baseline: Normal decoding tok/s, drawn dashed.
        width: SVG width in pixels.
        height: SVG height in pixels.
    """
    if not points:
        return ""
    pad_l, pad_r, pad_t, pad_b = 44, 44, 12, 30
    ks = [p[0] for p in points]
    kmin, kmax = min(ks), max(ks)
    top = max([p[1] for p in points] + [baseline or 0]) * 1.15 or 1.0
    w, h = width - pad_l - pad_r, height - pad_t - pad_b

    def x(k):
        return pad_l + (w * (k - kmin) / (kmax - kmin) if kmax > kmin else w / 2)

    def y_tps(v):
        return pad_t + h * (1 - v / top)

    def y_acc(a):
        return pad_t + h * (1 - a)

    def poly(pts, color):
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
        dots = "".join(
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{color}"/>' for px, py in pts
        )
        return f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>{dots}'

    parts = [
        f'<svg class="mlxnb-chart" width="{width}" height="{height}" fill="currentColor" '
        f'xmlns="http://www.w3.org/2000/svg" font-size="10" font-family="sans-serif">',
        f'<rect x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" fill="none" '
        'stroke="currentColor" stroke-opacity="0.3"/>',
    ]
    parts.append(poly([(x(k), y_tps(t)) for k, t, _ in points], "#2563eb"))
    acc = [(x(k), y_acc(a)) for k, _, a in points if a is not None]
    if acc:
        parts.append(poly(acc, "#16a34a"))
    if baseline:
        yb = y_tps(baseline)
        parts.append(
            f'<line x1="{pad_l}" x2="{pad_l + w}" y1="{yb:.1f}" y2="{yb:.1f}" '
            f'stroke="#6b7280" stroke-dasharray="4 3"/>'
            f'<text x="{pad_l + 4}" y="{yb - 3:.1f}">normal '
            f"{baseline:.1f} tok/s</text>"
        )
    for k in ks:
        parts.append(f'<text x="{x(k):.1f}" y="{height - 14}" text-anchor="middle">{k}</text>')
    parts.append(
        f'<text x="{pad_l + w / 2}" y="{height - 2}" text-anchor="middle">draft tokens k</text>'
    )
    for frac in (0, 0.5, 1):
        yy = pad_t + h * (1 - frac)
        parts.append(
            f'<text x="{pad_l - 4}" y="{yy + 3:.1f}" text-anchor="end">{top * frac:.0f}</text>'
        )
        parts.append(f'<text x="{pad_l + w + 4}" y="{yy + 3:.1f}">{frac:.0%}</text>')
    parts.append(
        f'<text x="{pad_l}" y="{pad_t - 2}">tok/s (blue)</text>'
        f'<text x="{pad_l + w}" y="{pad_t - 2}" text-anchor="end">acceptance (green)</text></svg>'
    )
    return "".join(parts)
