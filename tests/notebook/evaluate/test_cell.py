"""``%%evaluate`` in a shell: variants, scorers by name, the view's texts, bad input."""

import pytest
from IPython.core.error import UsageError

from mlx_notebook.notebook.evaluate.cell import EvaluateMagics, scorer_of, variants_of_cell
from mlx_notebook.notebook.evaluate.matrix import MatrixRenderer


def test_variants_from_dash_lines():
    assert variants_of_cell("Just {q}\n") == "Just {q}\n"
    assert variants_of_cell("--- a\nOne {q}\n\n--- b\nTwo\n{q}\n") == {
        "a": "One {q}",
        "b": "Two\n{q}",
    }
    with pytest.raises(UsageError, match="text before the first"):
        variants_of_cell("hi\n--- a\nx")
    with pytest.raises(UsageError, match="empty or repeated"):
        variants_of_cell("--- a\nx\n--- a\ny")


def test_scorers_by_name():
    assert scorer_of("exact:gold", {}).columns == ("gold",)
    assert scorer_of("includes", {}).columns == ("answer",)
    assert scorer_of("choice:opts,right", {}).options == "opts"
    assert scorer_of("judge:m", {}).judge_model == "m"

    def mine(row, out):
        return 1

    assert scorer_of("mine", {"mine": mine}) is mine
    with pytest.raises(UsageError, match="neither a built-in"):
        scorer_of("nope", {})
    with pytest.raises(UsageError, match="needs --schema"):
        scorer_of("schema", {})


def _ip(ipshell, engine, **ns):
    from mlx_notebook.notebook.magics import generate as magics

    ip = ipshell
    ip.run_line_magic("load_ext", "mlx_notebook")
    m = magics.MLXNotebook(shell=ip, engine=engine)
    ip.register_magics(m)
    ip.register_magics(EvaluateMagics(ip, m))
    ip.user_ns.update(ns)
    return ip


def test_evaluate_cell_streams_a_matrix_and_binds_the_run(ipshell, engine, tiny_dir, draft_dir):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"q": ["<b>bold</b>?", "two?", "three?"], "answer": ["x", "y", "z"]})
    ip = _ip(ipshell, engine, df=df)
    ip.run_cell_magic(
        "evaluate",
        f"--over df -m {tiny_dir},{draft_dir} --score includes:answer -n 5 -t 0 -o ev --wait",
        "--- plain\n{q}\n--- ask\nPlease: {q}\n",
    )
    run = ip.user_ns["ev"]
    assert run.done and len(run.cells) == 3 * 4
    assert all(c.finish_reason in ("stop", "length") for c in run.cells)
    assert len(run.to_frame()) == 12 and len(run.summary().pairs) == 6
    run.cells[0].text = "<script>alert(1)</script><img src=x>"  # output is untrusted
    html = MatrixRenderer(run).html()
    assert "<script>" not in html and "<img" not in html and "&lt;script&gt;" in html
    assert "95% interval" in html and "<svg" in html and "within noise" in html
    text = MatrixRenderer(run).plain()
    assert text.startswith("[evaluate · 3 rows × 2 models × 2 prompts · includes · done]")
    assert "--- row 2 · cdraft0 · ask" in text


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--over df --score exact:gold", "reads the column 'gold'"),
        ("--over nothing", "no variable named 'nothing'"),
        ("--over df -m no/such-model", "no/such-model"),
    ],
)
def test_bad_input_starts_nothing(ipshell, engine, tiny_dir, line, message):
    pd = pytest.importorskip("pandas")
    ip = _ip(ipshell, engine, df=pd.DataFrame({"q": ["a"], "answer": ["b"]}))
    if "-m" not in line:
        line += f" -m {tiny_dir}"
    with pytest.raises(UsageError, match=message):
        ip.run_cell_magic("evaluate", line, "{q}")
    info = engine.info()
    assert info.running is None and info.queued == 0


def test_a_raising_scorer_is_a_usage_error_after_one_row(ipshell, engine, tiny_dir):
    def bad(row, out):
        return row["missing"]

    ip = _ip(ipshell, engine, rows=["a", "b", "c"], bad=bad)
    with pytest.raises(UsageError, match="KeyError: 'missing' \\(on row 0; nothing else ran\\)"):
        ip.run_cell_magic("evaluate", f"--over rows -m {tiny_dir} --score bad -n 3", "{item}")


def test_an_evaluation_made_in_python_shows_its_matrix(ipshell, engine, tiny_dir):
    from mlx_notebook.engine.backend import Route
    from mlx_notebook.evaluation import EvalRun, includes
    from mlx_notebook.evaluation.plan import build

    ip = _ip(ipshell, engine)
    plan = build(["a", "b"], "Say {item}", [tiny_dir], includes("item"), 1,
                 lambda s: Route(engine, s), max_tokens=3)  # fmt: skip
    run = EvalRun(plan).start()
    res = run.wait()
    formatter = ip.display_formatter.formatters["text/html"]  # (a test shell: not enabled)
    for value in (res, run):
        html = formatter.lookup(value)(value)
        assert "95% interval" in html and "<svg" in html and 'state">done<' in html
    ip.run_line_magic("unload_ext", "mlx_notebook")
    with pytest.raises(KeyError):
        formatter.lookup(res)  # gone with the extension
    ip.run_line_magic("load_ext", "mlx_notebook")


def test_a_columns_stop_button_stops_that_column_only(ipshell, engine, scripted, monkeypatch):
    scripted("slow", delay_s=0.05)  # 200 tokens: 10 s a cell, stopped long before
    scripted("quick")
    views = []
    make = EvaluateMagics._view
    monkeypatch.setattr(
        EvaluateMagics, "_view", lambda self, run: views.append(make(self, run)) or views[-1]
    )
    ip = _ip(ipshell, engine, rows=["a", "b", "c"])
    ip.run_cell_magic(
        "evaluate", "--over rows -m quick,slow --score json_valid -n 200 -o ev", "{item}"
    )
    (view,) = views
    live = view.live
    label, buttons = live.row["label"], live.row["buttons"]
    assert label == "Stop one column:" and [b[0] for b in buttons] == ["column 0", "column 1"]
    assert "slow" in buttons[1][1] and "the others go on" in buttons[1][2]
    live._on_msg(live, {"event": "click", "button": "column 1"}, [])  # as the browser sends
    assert live.pressed == ["column 1"]
    run = ip.user_ns["ev"]
    run.wait()
    assert view.wait_rendered(30) and live.ended  # the row goes with the run
    quick = [c for c in run.cells if c.column == 0]  # (its first cell ran before the view)
    slow = [c for c in run.cells if c.column == 1]
    assert all(c.finish_reason != "length" for c in slow)  # stopped or skipped
    assert all(c.finish_reason == "length" for c in quick)
