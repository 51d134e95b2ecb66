"""Branching from a handle and in a cell; the two continuations side by side."""

import math

import pytest

HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture
def shell(ipshell, engine):
    from mlx_notebook.notebook.magics import generate as magics

    ipshell.run_line_magic("load_ext", "mlx_notebook")
    ipshell.register_magics(magics.MLXNotebook(shell=ipshell, engine=engine))
    return ipshell


def test_branch_from_a_handle_and_side_by_side(shell, tiny_dir):
    shell.run_cell_magic(
        "generate", f"-m {tiny_dir} --raw -t 0 -n 16 --logprobs 3 -o h --wait", "Once upon"
    )
    h = shell.user_ns["h"]
    alt = h.tokens[5].top[1]
    b = h.branch(5, alt[1])
    assert b.parent == (h, 5) and b.job.request.logprobs == 3  # the parent's settings
    assert b.wait().job.result().token_ids[0] == alt[1]
    fork = b.side_by_side()
    html, text = fork._repr_html_(), repr(fork)
    assert html.count('class="forks"') == 1 and html.count("fork") >= 3
    assert "original:" in html and "branch:" in html
    assert f"branch: {alt[0]!r} · p {math.exp(alt[2]):.3f}" in html.replace("&#x27;", "'")
    assert fork.shared == "".join(r.text for r in h.tokens[:5])  # token-aligned
    assert fork.left.pieces == h.pieces()[5:] and fork.right.pieces == b.pieces()
    assert "[original:" in text and "[branch:" in text
    with pytest.raises(ValueError, match="not a branch"):
        h.side_by_side()


@pytest.mark.slow
def test_the_shared_text_keeps_every_word(ipshell, default_engine):
    # The shared text is the first i tokens' own text (their records), not the streamed
    # pieces, which a detokenizer may release late, and the first without its space.
    from mlx_notebook.notebook.magics import generate as magics

    ipshell.register_magics(magics.MLXNotebook(shell=ipshell, engine=default_engine))
    ipshell.run_cell_magic(
        "generate", "--raw -t 0 -n 8 --logprobs 2 -o w --wait", "Once upon a time, a"
    )
    w = ipshell.user_ns["w"]
    fork = w.branch(3).side_by_side()
    words = "".join(r.text for r in w.tokens[:3])
    assert fork.shared == words and w.text.startswith(words.lstrip())
    rest = "".join(r.text for _, r in fork.left.pieces)
    assert (fork.shared + rest).lstrip() == w.text


def test_hostile_text_stays_inert_side_by_side():
    from mlx_notebook.notebook.views.branch_view import Fork, Side

    fork = Fork(HOSTILE, HOSTILE, Side("original", [(HOSTILE, None)]), Side("branch", []))
    html = fork._repr_html_()
    assert "<img" not in html and "&lt;img" in html and "(no tokens)" in html
