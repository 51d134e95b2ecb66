"""``%%generate --from NAME:I`` in a cell: the body is the token, options change the branch."""

import pytest
from IPython.core.error import UsageError


@pytest.fixture
def shell(ipshell, engine):
    from mlx_notebook.notebook.magics import generate as magics

    ipshell.run_line_magic("load_ext", "mlx_notebook")
    ipshell.register_magics(magics.MLXNotebook(shell=ipshell, engine=engine))
    return ipshell


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
