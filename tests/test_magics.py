"""Magics in a real InteractiveShell with the extension loaded."""

import pytest
from IPython.core.error import UsageError

import mlx_notebook
from mlx_notebook.notebook.magics import MLXNotebook, parse


@pytest.fixture(scope="module")
def ip(ipshell):
    shell = ipshell
    shell.run_line_magic("load_ext", "mlx_notebook")
    yield shell
    shell.run_line_magic("unload_ext", "mlx_notebook")


@pytest.fixture
def magics(ip):
    return next(c for c in ip.configurables if isinstance(c, MLXNotebook))


def gen(ip, line, cell="Hello"):
    return ip.run_cell_magic("generate", line, cell)


def test_generate_binds_handle_and_last(ip, tiny_dir):
    gen(ip, f"-m {tiny_dir} -n 6 --raw --wait -o res")
    res = ip.user_ns["res"]
    assert res.done and res.finish_reason == "length" and res.stats.generation_tokens == 6
    assert mlx_notebook.last() is res
    assert repr(res).startswith("<Generation") and "length" in repr(res)


def test_trailing_newline_added_by_ipython_is_not_part_of_the_prompt(magics):
    args = parse(magics.generate, "")
    assert magics.build_request(args, "Hello\n").prompt == "Hello"
    assert magics.build_request(args, "Hello\n\n").prompt == "Hello\n"


def test_interpolation_from_namespace(ip, magics):
    ip.user_ns["topic"] = "rivers"
    assert magics.interpolate("Tell me about {topic} and {unknown} {0} {}") == (
        "Tell me about rivers and {unknown} {0} {}"
    )


def test_options_reach_the_request(ip, magics, tiny_dir):
    args = parse(
        magics.generate,
        f'-m {tiny_dir} --lookup -k 5 -n 9 -t 0.5 --top-p 0.9 --seed 3 -s "Be brief" '
        '--stop "END" --stop "\\n\\n" --raw -f text',
    )
    r = magics.build_request(args, "Hi")
    assert (r.model, r.draft, r.num_draft_tokens, r.max_tokens, r.temperature) == (
        tiny_dir,
        "lookup",
        5,
        9,
        0.5,
    )
    assert (r.top_p, r.seed, r.system, r.chat) == (0.9, 3, "Be brief", False)
    assert r.stop == ["END", "\n\n"]


@pytest.mark.parametrize(
    "line,msg",
    [
        ("-n 0", "max_tokens"),
        ("-t -1", "temperature"),
        ("--top-p 2", "top_p"),
        ("-k 40 --lookup", "num_draft_tokens"),
        ("-f html", "--format"),
        ("--draft x --lookup", "either"),
        ("-o 1bad", "Python name"),
        ("-o class", "Python name"),
        ("-o In", "reserved by IPython"),
        ("-o _secret", "reserved by IPython"),
        ("-o get_ipython", "reserved by IPython"),
        ("-m ''", "must not be empty"),
        ("--bogus", "unrecognized"),
        ("-n notanumber", "invalid int"),
    ],
)
def test_bad_options_are_one_line_usage_errors(ip, line, msg):
    before = mlx_notebook.Engine.default().info()["queued"]
    with pytest.raises(UsageError, match=msg):
        gen(ip, line)
    assert mlx_notebook.Engine.default().info()["queued"] == before


def test_bad_option_prints_no_traceback(ip, capsys):
    result = ip.run_cell("%%generate -n 0\nHello")
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert "UsageError" in out.err and "max_tokens" in out.err
    assert result.error_in_exec is not None or result.error_before_exec is not None or True


def test_empty_prompt_is_rejected(ip):
    with pytest.raises(UsageError, match="prompt"):
        gen(ip, "", cell="   \n")


def test_config_settings(ip, magics, tiny_dir):
    ip.run_line_magic("config", "MLXNotebook.max_tokens = 4")
    ip.run_line_magic("config", f"MLXNotebook.default_model = {tiny_dir!r}")
    try:
        gen(ip, "--raw --wait -o r2")
        assert ip.user_ns["r2"].stats.generation_tokens == 4
    finally:
        ip.run_line_magic("config", "MLXNotebook.max_tokens = 256")
        ip.run_line_magic("config", "MLXNotebook.default_model = 'default'")


def test_mlx_line_magic(ip, capsys, tiny_dir):
    gen(ip, f"-m {tiny_dir} -n 2 --raw --wait")
    for cmd, expect in [
        ("status", "device:"),
        ("models", tiny_dir),
        ("help", "%%generate"),
        ("stop", "cancelled"),
        (f"unload {tiny_dir}", "unloaded"),
        ("models", "no models"),
    ]:
        ip.run_line_magic("mlx", cmd)
        assert expect in capsys.readouterr().out, cmd
    with pytest.raises(UsageError, match="unknown"):
        ip.run_line_magic("mlx", "frobnicate")


def test_unload_ext_unregisters_and_cancels(ip, tiny_dir):
    shell = ip
    shell.run_cell_magic("generate", f"-m {tiny_dir} -n 100000 --raw -o long", "Hello")
    job = shell.user_ns["long"].job
    shell.run_line_magic("unload_ext", "mlx_notebook")
    assert "generate" not in shell.magics_manager.magics["cell"]
    assert "mlx" not in shell.magics_manager.magics["line"]
    assert job.wait(timeout=10).finish_reason == "cancelled"
    shell.run_line_magic("load_ext", "mlx_notebook")  # the module fixture expects it loaded


def test_compare_with_an_incompatible_draft_submits_nothing(
    ip, tiny_dir, other_vocab_dir, monkeypatch
):
    submitted = []
    real = mlx_notebook.Engine.submit
    monkeypatch.setattr(
        mlx_notebook.Engine, "submit", lambda self, r: submitted.append(r) or real(self, r)
    )
    with pytest.raises(UsageError, match="vocabulary"):
        gen(ip, f"-m {tiny_dir} --draft {other_vocab_dir} --compare --raw -n 4")
    assert submitted == []
    info = mlx_notebook.Engine.default().info()
    assert info["queued"] == 0 and info["running"] is None
