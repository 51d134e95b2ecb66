"""The token inspector: shaded tokens, a hover card each, static and inert."""

import math
import re

from mlx_notebook.engine.token_records import TokenRecord, TokenTable
from mlx_notebook.notebook.views.inspect import band, inspect_html

EVIL = '<img src=x onerror="alert(1)">'


def rec(i, text, p, source="text", top=None):
    top = top if top is not None else ((text, i, math.log(p)), ("other", 999, math.log(0.01)))
    return TokenRecord(i, i, text, math.log(p), 1, 0.5, tuple(top), source)


def test_bands_split_probabilities_from_certain_to_surprising():
    assert [band(p) for p in (1.0, 0.9, 0.89, 0.5, 0.2, 0.05, 0.049, 0.0)] == [
        0,
        0,
        1,
        1,
        2,
        3,
        4,
        4,
    ]


def test_tokens_are_shaded_carded_underlined_and_escaped():
    records = [
        rec(0, "Hello", 0.95),
        rec(1, " " + EVIL, 0.3, top=[("<b>x</b>", 7, math.log(0.6)), ("y", 8, math.log(0.1))]),
        rec(2, "\n", 0.01, source="prompt-lookup"),
    ]
    html = inspect_html(records, title="t")
    assert "<img" not in html and "&lt;img src=x onerror=" in html and "<b>x</b>" not in html
    spans = re.findall(r'<span class="(tk b\d[^"]*)">', html)
    assert spans[-3:] == ["tk b0", "tk b2", "tk b4 s-prompt-lookup"]
    assert "underlined:" in html and "<script" not in html.lower()
    # The card lists the alternatives, most likely first, and the token itself.
    card = html.split('<span class="card" style="display:none">')[2].split("</span>")[0]
    assert card.index("&lt;b&gt;x&lt;/b&gt;") < card.index("<td>y</td>")
    assert "0.600" in card and "0.300" in card and "rank 1" in card
    assert "\\n" in html.split('<span class="card" style="display:none">')[3]  # shown


def test_two_thousand_tokens_render_one_span_and_card_each():
    # Its speed is measured by benchmarks/bench_inspect.py, not asserted here.
    records = [rec(i, f" w{i}", (i % 100 + 1) / 101) for i in range(2000)]
    html = inspect_html(records)
    assert html.count('class="card"') == 2000 and html.count('<span class="tk b') == 2005


def test_a_scored_table_displays_as_the_inspector(ipshell, engine, tiny_dir, monkeypatch):
    # A kernel formats HTML; the terminal test shell has it off.
    monkeypatch.setattr(ipshell.display_formatter.formatters["text/html"], "enabled", True)
    ipshell.run_line_magic("load_ext", "mlx_notebook")
    table = engine.score("the quick brown fox", model=tiny_dir)
    data, _ = ipshell.display_formatter.format(table)
    assert 'class="insp"' in data["text/html"] and "perplexity" in data["text/html"]
    assert data["text/plain"].startswith("<TokenTable: ")
    assert isinstance(table, TokenTable)
    html = data["text/html"]
    ipshell.run_line_magic("unload_ext", "mlx_notebook")
    data, _ = ipshell.display_formatter.format(table)
    assert data["text/html"] == html  # without the extension too: its own _repr_html_


def test_an_inspecting_view_tints_while_streaming_and_cards_at_the_end():
    from mlx_notebook.engine.events import Finished, Stats, Token
    from mlx_notebook.notebook.views.render import ViewState

    s = ViewState(fmt="text", inspect=True)
    for i, (text, p) in enumerate([("Hi", 0.9), (" <b>", 0.01)]):
        s.apply(Token(text, i, False, i, info=rec(i, text, p)))
    live = s.html()
    assert 'class="insp"' in live and 'class="card"' not in live and "<b>" not in live
    s.apply(Finished("Hi <b>", "length", stats=Stats()))
    done = s.html()
    assert done.count('class="card"') == 2 and "&lt;b&gt;" in done


def test_no_special_token_shows_as_text_in_any_view(engine, scripted, tiny_tokenizer):
    # A scripted reply that ends on the end-of-turn token, with its probabilities
    # recorded (the end-of-turn token also stands among each token's alternatives).
    from mlx_notebook.engine import Request
    from mlx_notebook.engine.token_records import special_ids
    from mlx_notebook.notebook.magics.handle import GenerationHandle
    from mlx_notebook.notebook.views.render import ViewState

    end = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    words = tiny_tokenizer.encode(" the cat sat", add_special_tokens=False)
    scripted("ends", outputs=[*words, end])
    specials = [tiny_tokenizer.decode([t]) for t in special_ids(tiny_tokenizer)]
    assert "<|im_end|>" in specials

    def views(job):
        state = ViewState(model="ends", inspect=True)
        for ev in job.events():
            state.apply(ev)
        return [state.html(), state.plain()]

    parent = engine.submit(Request("Hello", model="ends", chat=False, logprobs=5, max_tokens=9))
    res = parent.result()
    assert res.finish_reason == "stop" and res.tokens[-1].special and res.tokens[-1].text == ""
    assert any(t == "" for r in res.tokens for t, tid, _ in r.top if tid == end)
    shown = views(parent)
    shown.append(inspect_html(res.tokens, "inspected"))
    h = GenerationHandle(parent, "ends", engine)
    branch = h.branch(1, logprobs=5)
    fork = branch.side_by_side()
    shown += [fork._repr_html_(), repr(fork)]
    for text in shown:
        for s in specials:
            assert s not in text, (s, text[:200])
    assert "tk b" in shown[2] and " sp" in shown[2]  # the end-of-turn mark is drawn
