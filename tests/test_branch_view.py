"""Branching from a handle and in a cell; the two continuations side by side."""

import math

import pytest
from IPython.core.error import UsageError

HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture
def shell(ipshell, engine):
    from mlx_notebook.notebook import magics

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
    assert fork.shared == "".join(e for e, _ in h.pieces()[:5])
    assert fork.left.pieces == h.pieces()[5:] and fork.right.pieces == b.pieces()
    assert "[original:" in text and "[branch:" in text
    with pytest.raises(ValueError, match="not a branch"):
        h.side_by_side()


def test_the_cell_branches_with_its_body_as_the_token(shell, tiny_dir, tiny_tokenizer):
    shell.run_cell_magic("generate", f"-m {tiny_dir} --raw -t 0 -n 12 -o h --wait", "Once upon")
    h = shell.user_ns["h"]
    ids = h.job.result().token_ids
    text = tiny_tokenizer.decode([ids[3]])
    shell.run_line_magic("generate", "--from h:3 -n 4 --inspect -o b --wait")
    b = shell.user_ns["b"]
    got = b.job.result()
    assert got.token_ids[0] != ids[3] and len(got.token_ids) == 4  # drawn again, without it
    assert len(b.tokens) == 4 and got.stats.cached_tokens == got.stats.prompt_tokens - 1
    if len(tiny_tokenizer.encode(text, add_special_tokens=False)) == 1:
        shell.run_cell_magic("generate", "--from h:3 -o c --wait", text)
        assert shell.user_ns["c"].job.result().token_ids == ids[3:]
    for line, why in [
        ("--from h", "NAME:I"),
        ("--from nope:2", "not a %%generate handle"),
        ("--from h:40", "0..12"),
    ]:
        with pytest.raises(UsageError, match=why):
            shell.run_line_magic("generate", line)
    with pytest.raises(UsageError, match="needs a prompt"):
        shell.run_line_magic("generate", "-n 3")


def test_hostile_text_stays_inert_side_by_side():
    from mlx_notebook.notebook.branch_view import Fork, Side

    fork = Fork(HOSTILE, HOSTILE, Side("original", [(HOSTILE, None)]), Side("branch", []))
    html = fork._repr_html_()
    assert "<img" not in html and "&lt;img" in html and "(no tokens)" in html
