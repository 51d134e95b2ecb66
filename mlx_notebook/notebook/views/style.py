"""The views' stylesheet: JupyterLab's theme variables, readable without them too.

Words never break in the middle: text wraps at spaces (JupyterLab's own
``word-break: break-all`` for output ``pre`` is undone), and only a run longer
than its whole column (a URL, say) is broken (``overflow-wrap: break-word``);
tables have fixed column widths so that holds in their cells too. A view's Stop
button floats over its top right corner, out of the text's way, so the text
has the same width while it streams as in the document it ends as.

Text colours come from ``--jp-…`` variables, so light, dark and high-contrast
themes all work. Status colours (green, red, orange) mark icons only, never
text, since they fall under 4.5:1 on some theme backgrounds. Every ``var()``
has a fallback for nbconvert, nbviewer and classic pages. Highlights are
translucent tints over whatever background is there, under the theme's own
text colour. Where a sanitizer strips this stylesheet (an untrusted notebook),
the markup is plain text blocks in the page's own colours, still readable.
"""

_FG = "var(--jp-content-font-color1, inherit)"
_UI = "var(--jp-ui-font-color1, inherit)"

CSS = f"""
.mlxnb{{font-family:var(--jp-content-font-family,system-ui,sans-serif);font-size:13px;
color:{_FG};line-height:1.45}}
.mlxnb .hdr{{font-family:var(--jp-ui-font-family,sans-serif);font-size:12px;color:{_UI};
margin-bottom:4px}}
.mlxnb .state{{font-weight:600}}
.mlxnb .txt{{white-space:pre-wrap;font-family:var(--jp-code-font-family,monospace);
overflow-wrap:break-word;word-break:normal;margin:0;padding:0;background:none;color:{_FG};font-size:13px;
line-height:1.45;border:none}}
.mlxnb .md{{overflow-wrap:break-word}}
.mlxnb .md p{{margin:0 0 .5em 0}}
.mlxnb .md pre,.mlxnb pre.code{{background:var(--jp-cell-editor-background,rgba(127,127,127,.1));
color:{_FG};padding:6px 8px;border-radius:3px;overflow-x:auto;word-break:normal;
font-family:var(--jp-code-font-family,monospace);white-space:pre-wrap}}
.mlxnb .md code{{font-family:var(--jp-code-font-family,monospace)}}
.mlxnb .stats{{font-family:var(--jp-ui-font-family,sans-serif);font-size:12px;color:{_UI};
margin-top:6px}}
.mlxnb .note{{font-size:12px;color:{_UI};margin:2px 0}}
.mlxnb .note::before{{content:"⚠ ";color:var(--jp-warn-color1,#e65100)}}
.mlxnb .err{{color:{_FG};background:var(--jp-rendermime-error-background,rgba(244,67,54,.18));
padding:4px 6px;border-radius:3px;font-family:var(--jp-code-font-family,monospace);
white-space:pre-wrap}}
.mlxnb .bar{{background:color-mix(in srgb,{_UI} 15%,transparent);height:6px;
border-radius:3px;overflow:hidden;width:320px;max-width:60%;display:inline-block;
vertical-align:middle;margin-right:8px}}
.mlxnb .bar>div{{background:var(--jp-brand-color1,#1976d2);height:100%}}
.mlxnb .draft{{background:color-mix(in srgb,var(--jp-success-color1,#388e3c) 24%,transparent);
border-bottom:1px solid var(--jp-success-color1,#388e3c)}}
.mlxnb .legend{{font-size:12px;color:{_UI}}}
.mlxnb-chat .turn{{margin:6px 0;padding:4px 10px 2px 10px;border-radius:8px;max-width:85%;
border:1px solid var(--jp-border-color2,rgba(127,127,127,.3))}}
.mlxnb-chat .turn.user{{margin-left:auto;
background:color-mix(in srgb,var(--jp-brand-color1,#1976d2) 10%,transparent)}}
.mlxnb-chat .turn.assistant{{margin-right:auto;
background:color-mix(in srgb,{_UI} 5%,transparent)}}
.mlxnb-chat .turn.system{{max-width:100%;border-style:dashed}}
.mlxnb-chat .role{{font-family:var(--jp-ui-font-family,sans-serif);font-size:11px;
font-weight:600;color:{_UI};text-transform:uppercase;letter-spacing:.04em}}
.mlxnb-chat .role .lbl{{text-transform:none;letter-spacing:0}}
.mlxnb details.think{{border-left:3px solid var(--jp-border-color1,rgba(127,127,127,.5));
padding-left:8px;margin:2px 0 6px 0}}
.mlxnb details.think summary{{font-family:var(--jp-ui-font-family,sans-serif);font-size:12px;
color:{_UI};cursor:pointer}}
.mlxnb details.think .txt{{color:var(--jp-content-font-color2,inherit)}}
.mlxnb details.insp-fold{{margin-top:6px}}
.mlxnb details.insp-fold summary{{font-family:var(--jp-ui-font-family,sans-serif);font-size:12px;
color:{_UI};cursor:pointer}}
.mlxnb .mlxnb-link{{text-decoration:underline dotted}}
.mlxnb .mlxnb-href,.mlxnb .mlxnb-media{{color:{_UI};font-size:90%}}
.mlxnb .verdict{{font-weight:600;margin:2px 0 6px 0}}
.mlxnb .ok::before{{content:"✔ ";color:var(--jp-success-color1,#388e3c)}}
.mlxnb .neutral::before{{content:"○ ";color:var(--jp-ui-font-color2,#757575)}}
.mlxnb .bad::before{{content:"✘ ";color:var(--jp-error-color1,#c62828)}}
.mlxnb .cols{{display:flex;gap:16px;align-items:flex-start}}
.mlxnb .col{{flex:1 1 0;min-width:0}}
.mlxnb .cols.wraps{{flex-wrap:wrap}}.mlxnb .cols.wraps>.col{{flex:0 1 auto;min-width:auto}}
.mlxnb table.grid{{border-collapse:collapse;font-size:12px;table-layout:fixed;width:100%}}
.mlxnb table.grid td{{overflow-wrap:break-word;vertical-align:top}}
.mlxnb table.grid td.text{{white-space:pre-wrap;background:transparent;
font-family:var(--jp-content-font-family,system-ui,sans-serif)}}
.mlxnb table.grid.auto{{table-layout:auto;width:auto}}
.mlxnb table.grid.auto td,.mlxnb table.grid.auto th{{white-space:nowrap}}
.mlxnb table.grid.fields{{table-layout:auto}}
.mlxnb table.grid th,.mlxnb table.grid td{{padding:2px 8px;text-align:left;
border-bottom:1px solid var(--jp-border-color2,rgba(127,127,127,.3))}}
.mlxnb svg{{color:{_UI};max-width:100%}}
.mlxnb [class^="tok-k"],.mlxnb [class^="tok-nb"]{{
color:var(--jp-mirror-editor-keyword-color,#008000)}}
.mlxnb [class^="tok-s"]{{color:var(--jp-mirror-editor-string-color,#ba2121)}}
.mlxnb [class^="tok-c"]{{color:var(--jp-mirror-editor-comment-color,#408080);font-style:italic}}
.mlxnb [class^="tok-m"]{{color:var(--jp-mirror-editor-number-color,#080)}}
.mlxnb .tok-nf,.mlxnb .tok-nc{{color:var(--jp-mirror-editor-def-color,#00f)}}
.mlxnb .tok-nt{{color:var(--jp-mirror-editor-property-color,#05a)}}
.mlxnb [class^="tok-o"]{{color:var(--jp-mirror-editor-operator-color,#7800c2)}}
.mlxnb [class^="tok-p"]{{color:var(--jp-mirror-editor-punctuation-color,#05a)}}
"""

STYLE = "<style>" + " ".join(line.strip() for line in CSS.strip().splitlines()) + "</style>"
