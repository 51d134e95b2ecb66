"""The token inspector: text shaded by each token's probability, a card per token on hover.

Static HTML and CSS, no script, so it is saved with the notebook and shows the
same when reopened without a kernel. Shading is one hue (orange) at five
strengths: the less likely a token was, the stronger its tint. A single hue
reads the same to colour-blind eyes, and the tints are translucent over the
theme's background, under the theme's own text colour, in light and dark
themes alike. Accepted draft tokens are underlined, one line style per source
(a branch's chosen token: a double line). A card opens below its token, or above
it near the bottom of the window (where the browser supports anchor positioning).
Every piece of model text is escaped: hostile output stays inert.
"""

from __future__ import annotations

import math

from .markup import escape
from .style import STYLE

# Lower bounds of the probability bands, most likely first: band i tints i.
BANDS = (0.9, 0.5, 0.2, 0.05, 0.0)
BAND_LABELS = ("≥ 0.9", "0.5–0.9", "0.2–0.5", "0.05–0.2", "< 0.05")
_TINT = "230,97,0"  # orange: tell apart from blue without hue (colour-blind safe)
_ALPHA = (0.0, 0.14, 0.28, 0.42, 0.56)
SOURCES = {
    "prompt-lookup": "solid", "suffix": "dashed", "draft-model": "dotted", "chosen": "double",
}  # fmt: skip

CSS = (
    "<style>"
    # A card may reach past the output's box: JupyterLab's output areas scroll
    # (overflow auto) and would clip it, so outputs holding an inspection don't.
    ".jp-OutputArea-output:has(.mlxnb .insp),.jp-OutputArea-child:has(.mlxnb .insp),"
    ".jp-OutputArea:has(.mlxnb .insp),.jp-Cell-outputWrapper:has(.mlxnb .insp)"
    "{overflow:visible}"
    ".jp-Cell:has(.mlxnb .insp:hover){z-index:5}"
    ".mlxnb .insp{white-space:pre-wrap;font-family:var(--jp-code-font-family,monospace);"
    "line-height:1.9;overflow-wrap:break-word}"
    ".mlxnb .tk{position:relative;border-radius:2px;padding:1px 0}"
    + "".join(f".mlxnb .b{i}{{background:rgba({_TINT},{a})}}" for i, a in enumerate(_ALPHA))
    + "".join(
        f".mlxnb .s-{name}{{border-bottom:2px {style} currentColor}}"
        for name, style in SOURCES.items()
    )
    + ".mlxnb .tk>.card{display:none;position:absolute;left:0;top:1.6em;z-index:10;"
    "min-width:14em;white-space:normal;padding:4px 8px;font-size:12px;line-height:1.4;"
    "font-family:var(--jp-ui-font-family,sans-serif);"
    "background:var(--jp-layout-color1,#fff);color:var(--jp-ui-font-color1,#000);"
    "border:1px solid var(--jp-border-color1,#999);border-radius:3px;"
    "box-shadow:0 2px 6px rgba(0,0,0,.3)}"
    ".mlxnb .tk:hover>.card{display:block!important}"
    # Where the browser can place it against its token (CSS anchor positioning), the
    # card opens below the token, or above it when the window has no room below
    # (flip-block): near the bottom of the window it was cut off.
    "@supports (anchor-name:--a) and (position-try-fallbacks:flip-block){"
    ".mlxnb .tk{anchor-scope:--mlxnb-tk;anchor-name:--mlxnb-tk}"
    ".mlxnb .tk>.card{position:fixed;position-anchor:--mlxnb-tk;top:anchor(bottom);"
    "left:anchor(left);margin:2px 0;position-try-fallbacks:flip-block,flip-inline,"
    "flip-block flip-inline}}"
    ".mlxnb .card table{border-collapse:collapse}"
    ".mlxnb .card table tr:nth-child(n),.mlxnb .card table td{background:transparent}"
    ".mlxnb .card td{padding:0 6px 0 0;white-space:pre;text-align:left;border:none;"
    "font-family:var(--jp-code-font-family,monospace)}"
    ".mlxnb .card .me td{font-weight:700}"
    # A special token (end of turn) has no text: a small mark stands for it.
    ".mlxnb .tk.sp::before{content:'\\23CE';opacity:.6;font-size:.85em}"
    ".mlxnb .legend-row{font-family:var(--jp-ui-font-family,sans-serif);font-size:12px;"
    "margin:4px 0}"
    ".mlxnb .legend-row .tk{padding:1px 6px;margin-right:4px;"
    "border:1px solid var(--jp-border-color2,rgba(127,127,127,.4))}"
    "</style>"
)


def band(prob: float) -> int:
    """The shading band of a probability: 0 (≥ 0.9) to 4 (< 0.05)."""
    return next(i for i, lo in enumerate(BANDS) if prob >= lo)


SPECIAL = "special token"  # what a card calls a token that is not text (end of turn...)


def _visible(text: str) -> str:
    """A token's text for the card: whitespace shown, not collapsed; a special token named."""
    if text == "":  # records give special tokens no text (`TokenRecord.special`)
        return f"({SPECIAL})"
    return repr(text)[1:-1] if text.strip() == "" or "\n" in text else text


def _card(r) -> str:
    me = ' class="me"'
    rows = [
        f"<tr{me if tid == r.token_id else ''}><td>{escape(_visible(t))}</td>"
        f"<td>{math.exp(lp):.3f}</td></tr>"
        for t, tid, lp in r.top
    ]
    if r.token_id not in {tid for _, tid, _ in r.top}:
        rows.append(f'<tr class="me"><td>{escape(_visible(r.text))}</td><td>{r.prob:.3f}</td></tr>')
    head = (
        f"<b>{escape(_visible(r.text))}</b> · p {r.prob:.3f} · rank {r.rank}"
        + ("" if math.isnan(r.entropy) else f" · entropy {r.entropy:.2f}")  # a server sends none
        + (f" · {escape(r.source)}" if r.source != "text" else "")
    )
    # Hidden inline too: where a sanitizer strips the stylesheet (an untrusted
    # notebook) the cards stay hidden and the text reads plainly.
    return f'<span class="card" style="display:none">{head}<table>{"".join(rows)}</table></span>'


def inspect_html(records, title: str = "") -> str:
    """The inspection of ``records`` (`TokenRecord`): a legend, then the shaded text."""
    head = f'<div class="hdr">{escape(title)}</div>' if title else ""
    return f'{STYLE}<div class="mlxnb">{head}{inspect_body(records)}</div>'


def inspect_body(records, cards: bool = True) -> str:
    """The legend and the shaded tokens, inside a view (its stylesheet included).

    Without ``cards`` (a view refreshing while it streams) only the tints are
    drawn, a quarter of the work; the final document has them.
    """
    legend = "".join(
        f'<span class="tk b{i}">{escape(label)}</span>' for i, label in enumerate(BAND_LABELS)
    )
    used = {r.source for r in records}
    marked = [n for n in SOURCES if n in used]  # the underlines this text has
    drafts = " · underlined: " + ", ".join(
        f'<span class="s-{n}">{escape(n)}</span>' for n in marked
    )
    return (
        f'{CSS}<div class="legend-row">probability: {legend}'
        f"{drafts if marked else ''} · hover a token for its alternatives</div>"
        f'<div class="insp">{inspect_tokens(records, cards)}</div>'
    )


def inspect_tokens(records, cards: bool = True, first_class: str = "") -> str:
    """Each token as a tinted span (with its hover card); ``first_class`` marks the first."""
    out = []
    for i, r in enumerate(records):
        classes = f"tk b{band(r.prob)}"
        if r.source in SOURCES:
            classes += f" s-{r.source}"
        if i == 0 and first_class:
            classes += f" {first_class}"
        if getattr(r, "special", False):  # a marker drawn by the stylesheet, never its text
            classes += " sp"
        card = _card(r) if cards else ""
        out.append(f'<span class="{classes}">{escape(r.text)}{card}</span>')
    return "".join(out)
