"""Magics in a real InteractiveShell with the extension loaded."""

import pytest
from IPython.core.error import UsageError

import mlx_notebook
import mlx_notebook.notebook.magics.options
from mlx_notebook.notebook.magics.generate import MLXNotebook, parse


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
    assert magics.fill("Tell me about {topic} and {unknown} {0} {}")[0] == (
        "Tell me about rivers and {unknown} {0} {}"
    )


def test_options_reach_the_request(ip, magics, tiny_dir):
    args = parse(
        magics.generate,
        f'-m {tiny_dir} --lookup -k 5 -n 9 -t 0.5 --top-p 0.9 --seed 3 -s "Be brief" '
        '--stop "END" --stop "\\n\\n" --raw -f text',
    )
    r = magics.build_request(args, "Hi")
    assert (r.model, r.draft_kind, r.num_draft_tokens, r.max_tokens, r.temperature) == (
        tiny_dir,
        "lookup",
        5,
        9,
        0.5,
    )
    assert (r.top_p, r.seed, r.system, r.chat) == (0.9, 3, "Be brief", False)
    assert r.stop == ["END", "\n\n"]


def test_suffix_flag_caps_at_sixteen_unless_k_given(magics, tiny_dir):
    r = magics.build_request(parse(magics.generate, f"-m {tiny_dir} --suffix"), "Hi")
    assert (r.draft_kind, r.draft, r.num_draft_tokens, r.mode) == ("suffix", None, 16, "suffix")
    r = magics.build_request(parse(magics.generate, f"-m {tiny_dir} --suffix -k 6"), "Hi")
    assert r.num_draft_tokens == 6


@pytest.mark.parametrize(
    "line,msg",
    [
        ("-n 0", "-n/--max-tokens"),
        ("-t -1", "-t/--temperature"),
        ("--top-p 2", "--top-p"),
        ("-k 40 --lookup", "-k/--num-draft"),
        ("-f html", "--format"),
        ("--draft x --lookup", "one of"),
        ("--suffix --lookup", "one of"),
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
    before = mlx_notebook.Engine.default().info().queued
    with pytest.raises(UsageError, match=msg):
        gen(ip, line)
    assert mlx_notebook.Engine.default().info().queued == before


def test_bad_option_prints_no_traceback(ip, capsys):
    result = ip.run_cell("%%generate -n 0\nHello")
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert "UsageError" in out.err and "-n/--max-tokens" in out.err
    assert isinstance(result.error_in_exec, UsageError)  # the cell failed


def test_empty_prompt_is_rejected(ip):
    with pytest.raises(UsageError, match="the cell body: must not be empty"):
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
    assert info.queued == 0 and info.running is None and not info.batched


# -- outputs that last (issue 11) -------------------------------------------------------


def test_wait_on_a_failing_job_fails_the_cell_with_one_line(ip, capsys, tmp_path):
    result = ip.run_cell(f"%%generate --wait -m {tmp_path}\nHi")  # a directory, no model
    assert isinstance(result.error_in_exec, mlx_notebook.engine.GenerationError)
    err = capsys.readouterr()
    shown = err.out + err.err
    assert "GenerationError: FileNotFoundError: [Errno 2] No such file" in shown
    assert "Traceback" not in shown


def test_handle_wait_raises_generation_error_with_the_partial_text(ip, tmp_path):
    gen(ip, f"-m {tmp_path} -o broken")
    with pytest.raises(mlx_notebook.engine.GenerationError, match="config.json") as err:
        ip.user_ns["broken"].wait(30)
    assert err.value.text == "" and err.value.finished.finish_reason == "error"


@pytest.mark.parametrize(
    "line,expect",
    [
        ("-m /no/such/model", "-m/--model: no such file or directory: '/no/such/model'"),
        ("-m someone/absent", "-m/--model: 'someone/absent' is not a local path, not in the"),
        ("--draft /no/such/draft", "--draft: no such file or directory: '/no/such/draft'"),
        ("--draft someone/absent-draft", "pass a local path (--draft /path/to/mlx-model-dir"),
        ("-k 100", "-k/--num-draft: must be in 1..16 (got 100)"),
        ("-n 0", "-n/--max-tokens: must be a positive integer (got 0)"),
        ("-t -1", "-t/--temperature: must be >= 0 (got -1.0)"),
        ("--top-p 2", "--top-p: must be in (0, 1] (got 2.0)"),
        ("--ngram 9 --lookup", "--ngram: must be in 1..8 (got 9)"),
    ],
)
def test_a_refused_cell_fails_in_one_line_naming_the_flag(ip, tiny_dir, line, expect, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = "" if "-m " in line else f"-m {tiny_dir} "
    result = ip.run_cell(f"%%generate {model}{line} --raw -o refused\nHi")
    assert isinstance(result.error_in_exec, UsageError)
    msg = str(result.error_in_exec)
    assert msg.startswith(expect) or expect in msg, msg
    assert "\n" not in msg and "num_draft_tokens" not in msg
    if "--draft" in line:
        assert "-m /path" not in msg


@pytest.mark.parametrize("cell", ["%%generate --help\n", "%%generate -h\n", "%%chat --help\n"])
def test_help_prints_the_options_even_with_an_empty_body(ip, capsys, cell):
    result = ip.run_cell(cell)
    assert result.success
    out = capsys.readouterr().out
    assert "-k/--num-draft N" in out and "--think | --no-think" in out


def test_the_output_is_a_widget_then_a_document(ip, tiny_dir):
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        gen(ip, f"-m {tiny_dir} -n 12 --raw --wait -f text -o doc")
    # Other tests' views may finish meanwhile: follow this cell's display id.
    first = next(o for o in cap.outputs if "application/vnd.jupyter.widget-view+json" in o.data)
    assert "text/html" in first.data and "text/plain" in first.data
    did = first.transient["display_id"]
    final = [o for o in cap.outputs if o.update and o.transient["display_id"] == did][-1].data
    assert set(final) == {"text/html", "text/plain"}  # no widget left to fail later
    text = ip.user_ns["doc"].text
    assert text in final["text/plain"]
    assert "done (max tokens)" in final["text/html"] and "tok/s" in final["text/html"]


def test_final_outputs_are_sent_again_when_the_next_cell_starts(ip, tiny_dir):
    from IPython.utils.capture import capture_output

    with capture_output():
        gen(ip, f"-m {tiny_dir} -n 5 --raw --wait")
    with capture_output() as cap:
        ip.run_cell("1 + 1")
    assert any(set(o.data) == {"text/html", "text/plain"} for o in cap.outputs)
    with capture_output() as cap:
        ip.run_cell("2 + 2")
    assert not cap.outputs  # once is enough


def test_unknown_names_warn_in_the_view_and_braces_escape(ip, magics, tiny_dir):
    from IPython.utils.capture import capture_output

    ip.user_ns["topic"] = "rivers"
    with capture_output() as cap:
        gen(ip, f"-m {tiny_dir} -n 3 --raw --wait -o w", cell="{topic} {{json}} {paragraph}")
    assert ip.user_ns["w"].job.request.prompt == "rivers {json} {paragraph}"
    did = next(o for o in cap.outputs if not o.update).transient["display_id"]
    final = [o for o in cap.outputs if o.update and o.transient["display_id"] == did][-1].data
    assert "{paragraph} is not defined" in final["text/plain"]
    assert "{paragraph} is not defined" in final["text/html"]


def test_a_variable_whose_str_raises_is_one_line(ip):
    ip.run_cell("class _Bad:\n    def __str__(self): raise ValueError('nope')\nbad = _Bad()")
    with pytest.raises(UsageError, match=r"\{bad\}: str\(\) of the variable 'bad' raised"):
        gen(ip, "-n 2", cell="about {bad}")


def test_input_history_is_not_interpolated(ip, magics):
    assert magics.fill("{_ih} {In} {Out} {get_ipython}")[0] == "{_ih} {In} {Out} {get_ipython}"


def test_think_switch_reaches_the_request(magics, tiny_dir):
    think = [
        magics.build_request(parse(magics.generate, f"-m {tiny_dir} {flag}"), "Hi").think
        for flag in ("", "--think", "--no-think")
    ]
    assert think == [None, True, False]
    assert "--think | --no-think" in mlx_notebook.notebook.magics.options.HELP


def test_a_handle_is_a_future_and_its_partial_values_say_so(ip, tiny_dir):
    gen(ip, f"-m {tiny_dir} -n 300 --raw -o fut")
    h = ip.user_ns["fut"]
    assert "Generation" in repr(h)  # repr never waits
    partial = h.partial_text  # whatever is there now, without waiting
    assert h.text.startswith(partial) and h.done  # .text waited for the end
    assert h.finish_reason == "length" and h.stats.generation_tokens == 300
    assert h.partial_text == h.text and h.error is None


SHAPE = {
    "type": "object",
    "properties": {"word": {"type": "string", "maxLength": 5}, "n": {"type": "integer"}},
    "required": ["word", "n"],
    "additionalProperties": False,
}


def test_schema_choice_and_regex_options(ip, tiny_dir):
    import json

    ip.user_ns["shape"] = SHAPE
    gen(ip, f"-m {tiny_dir} --raw -t 0 -n 60 --wait --schema shape -o res")
    res = ip.user_ns["res"]
    assert res.finish_reason == "stop" and set(json.loads(res.text)) == {"word", "n"}
    assert res.value == json.loads(res.text)
    gen(ip, f"-m {tiny_dir} --raw -t 0 --wait --choice 'yes, no ,maybe' -o res")
    assert ip.user_ns["res"].text in ("yes", "no", "maybe")
    gen(ip, f"-m {tiny_dir} --raw -t 0 --wait --regex '[a-c][a-c][0-9]' -o res")
    text = ip.user_ns["res"].text
    assert len(text) == 3 and text[:2] in {a + b for a in "abc" for b in "abc"}
    assert text[2].isdigit()


def test_no_strict_accepts_keys_checked_at_the_end_and_says_so(ip, magics, tiny_dir):
    ip.user_ns["tags"] = {
        "type": "array", "items": {"type": "integer"}, "uniqueItems": True, "maxItems": 4,
    }  # fmt: skip
    with pytest.raises(UsageError, match="^--schema: uniqueItems cannot be enforced"):
        gen(ip, f"-m {tiny_dir} --raw -t 0 --schema tags")
    args = parse(magics.generate, f"-m {tiny_dir} --raw -t 0 --schema tags --no-strict")
    magics.build_request(args, "Hello")
    assert magics._notices == [
        "uniqueItems not enforced while generating; the finished value is validated"
    ]
    gen(ip, f"-m {tiny_dir} --raw -t 0 -n 40 --wait --schema tags --no-strict -o res")
    res = ip.user_ns["res"]
    assert res.finish_reason == "stop"  # at most 4 integers: a short list
    values = __import__("json").loads(res.text)  # valid unless one repeats
    assert res.valid == (len(set(values)) == len(values))
    assert res.valid or "non-unique" in res.problem


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--schema nosuch", "--schema: no variable named 'nosuch'"),
        ("--schema bogus", "--schema: Invalid type: bogus"),
        ("--choice a,a", "--choice: duplicated option(s): 'a'"),
        ("--choice ,", "--choice: options must be non-empty strings"),
        ("--regex '[a-'", "--regex: unclosed character class"),
        ("--regex x --choice a,b", "use one of --schema NAME, --choice a,b,c or --regex PATTERN"),
    ],
)
def test_a_bad_schema_option_names_its_flag_and_starts_nothing(ip, magics, line, message):
    ip.user_ns["bogus"] = {"type": "bogus"}
    with pytest.raises(UsageError) as info:
        gen(ip, line)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_repetition_penalty_option(magics):
    args = parse(magics.generate, "--repetition-penalty 1 -t 0")
    req = magics.build_request(args, "Hello")
    assert (req.repetition_penalty, req.temperature) == (1.0, 0.0)
    with pytest.raises(UsageError, match="^--repetition-penalty: must be > 0"):
        magics.build_request(parse(magics.generate, "--repetition-penalty 0"), "Hello")


def test_help_lists_every_command_and_function(ip):
    from IPython.utils.capture import capture_output

    for run in (
        lambda: ip.run_cell("%%generate --help\n"),
        lambda: ip.run_line_magic("mlx", "help"),
        lambda: ip.run_cell("%%chat --help\n"),
    ):
        with capture_output() as out:
            run()
        text = out.stdout
        assert "| ui [NAME]" in text and "mn.score(" in text, text[-800:]
        for name in ("mn.generate(", "mn.map(", "mn.compare(", "mn.sweep(", "mn.ChatUI()"):
            assert name in text
    # one default for max tokens everywhere
    from mlx_notebook.engine.request import DEFAULT_MAX_TOKENS, Request
    from mlx_notebook.notebook.chat_ui.widget import ChatUI
    from mlx_notebook.notebook.panel.panel import Panel

    assert Request("x").max_tokens == DEFAULT_MAX_TOKENS
    assert MLXNotebook.max_tokens.default_value == DEFAULT_MAX_TOKENS
    assert ChatUI.max_tokens.default_value == DEFAULT_MAX_TOKENS
    assert Panel.max_tokens.default_value == DEFAULT_MAX_TOKENS


def test_cells_replay_and_the_flags_and_percent_mlx_cache(ip, tiny_dir, tmp_path):
    from IPython.utils.capture import capture_output

    from mlx_notebook.engine import Engine
    from mlx_notebook.engine.replay.results import Replays

    eng = Engine(results=Replays("deterministic", tmp_path / "cache.sqlite"))
    mine = MLXNotebook(shell=ip, engine=eng)
    ip.register_magics(mine)
    try:
        line = f"-m {tiny_dir} -t 0 -n 6 --raw --wait -o r"
        replayed = []
        for extra in ("", "", " --refresh", " --no-cache", ""):
            gen(ip, line + extra)
            replayed.append(ip.user_ns["r"].stats.replayed is not None)
        assert replayed == [False, True, False, False, True]
        with capture_output() as out:
            ip.run_line_magic("mlx", "cache")
        assert "1 entry," in out.stdout and "hits this session: 67% of 3 lookups" in out.stdout
        with capture_output() as out:
            ip.run_line_magic("mlx", "cache clear")
        assert "cleared 1 entry" in out.stdout
        mine.cache = "off"  # %config MLXNotebook.cache = "off"
        gen(ip, line)
        gen(ip, line)
        assert ip.user_ns["r"].stats.replayed is None
        assert eng.result_cache.store.stats()["entries"] == 0
    finally:
        ip.register_magics(next(c for c in ip.configurables if isinstance(c, MLXNotebook)))
        eng.close()


def test_the_cache_setting_starts_as_the_environment_says(magics):
    import os

    assert magics.cache == os.environ["MLX_NOTEBOOK_RESULT_CACHE"] == "off"  # the suite's


def test_a_map_and_a_compare_made_in_python_show_their_views(ip, tiny_dir):
    formatter = ip.display_formatter.formatters["text/html"]  # (a test shell: not enabled)
    res = mlx_notebook.map(["<img src=x onerror=alert(1)>", "Two"], "{item}", model=tiny_dir,
                           max_tokens=4, chat=False)  # fmt: skip
    html = formatter.lookup(res)(res)
    assert "map · 2 rows: 2 done" in html and "<table" in html
    assert "<img" not in html and "&lt;img" in html  # prompts and texts are never markup
    cmp = mlx_notebook.compare("Hello there", model=tiny_dir, repeats=2, max_tokens=8,
                               chat=False)  # fmt: skip
    html = formatter.lookup(cmp)(cmp)
    assert 'class="verdict"' in html and "<table" in html and html.count("<tr>") >= 5
    assert "Compare(" not in html  # a view, not the dataclass repr


def test_a_result_made_in_python_shows_as_its_document(ip, tiny_dir):
    res = mlx_notebook.generate("<b>Hi</b>", model=tiny_dir, max_tokens=6, chat=False)
    formatter = ip.display_formatter.formatters["text/html"]  # (a test shell: not enabled)
    html = formatter.lookup(res)(res)
    assert 'class="state">done' in html and "6 tokens" in html
    from mlx_notebook.engine.events import Stats
    from mlx_notebook.engine.job import Result

    evil = Result("<img src=x onerror=alert(1)> **bold**", "stop", None, None, Stats())
    html = formatter.lookup(evil)(evil)
    assert "<img" not in html and "&lt;img" in html  # model text is never markup
