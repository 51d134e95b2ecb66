import pytest
from IPython.core.error import UsageError

from mlx_notebook.notebook.over import fill_rows, row_values

ITEMS = ["rivers", "mountains", "lakes", "forests", "deserts", "islands"]


def test_row_values_from_lists_series_and_frames():
    pd = pytest.importorskip("pandas")
    assert row_values("xs", {"xs": ["a", "b"]}) == [{"item": "a"}, {"item": "b"}]
    assert row_values("s", {"s": pd.Series(["a"])}) == [{"item": "a"}]
    df = pd.DataFrame({"city": ["Paris", "Oslo"], "n": [1, 2]})
    assert row_values("df", {"df": df}) == [{"city": "Paris", "n": 1}, {"city": "Oslo", "n": 2}]


@pytest.mark.parametrize(
    ("ns", "message"),
    [
        ({}, "no variable named 'xs'"),
        ({"xs": 3}, "'xs' is a int; it must be a list"),
        ({"xs": "abc"}, "'xs' is a str"),
        ({"xs": []}, "'xs' is empty"),
    ],
)
def test_bad_over_values_are_one_line(ns, message):
    with pytest.raises(UsageError, match=message):
        row_values("xs", ns)


def test_rows_fill_item_columns_and_user_variables():
    prompts, notices = fill_rows(
        "{style}: {item} {{x}} {nope}", [{"item": "a"}, {"item": "b"}], {"style": "S"}
    )
    assert prompts == ["S: a {x} {nope}", "S: b {x} {nope}"]
    assert len(notices) == 1 and "{nope}" in notices[0]


def _ip_with(ipshell, engine, **ns):
    from mlx_notebook.notebook import magics

    ip = ipshell
    ip.run_line_magic("load_ext", "mlx_notebook")
    m = magics.MLXNotebook(shell=ip, engine=engine)
    ip.register_magics(m)
    ip.user_ns.update(ns)
    return ip


@pytest.mark.parametrize(
    ("line", "ns", "message"),
    [
        ("--over missing", {}, "no variable named 'missing'"),
        ("--over n", {"n": 5}, "'n' is a int"),
        ("--over empty", {"empty": []}, "'empty' is empty"),
    ],
)
def test_over_bad_input_starts_no_job(ipshell, engine, tiny_dir, line, ns, message):
    ip = _ip_with(ipshell, engine, **ns)
    before = engine.info()
    with pytest.raises(UsageError, match=message):
        ip.run_cell_magic("generate", f"-m {tiny_dir} --raw {line}", "About {item}")
    after = engine.info()
    assert after.running is None and after.queued == before.queued == 0 and not after.batched


def test_over_binds_the_map_result_and_keeps_rows_in_order(ipshell, engine, tiny_dir):
    ip = _ip_with(ipshell, engine, topics=ITEMS)
    ip.run_cell_magic(
        "generate", f"-m {tiny_dir} --raw -n 6 --over topics -o res --wait", "Tell me about {item}"
    )
    res = ip.user_ns["res"]
    assert [r.prompt for r in res] == [f"Tell me about {t}" for t in ITEMS]
    assert res.completed == len(ITEMS) and all(r.stats.generation_tokens for r in res)
    # Each row equals the same prompt generated alone.
    for r in res:
        alone = engine.generate(r.prompt, model=tiny_dir, chat=False, max_tokens=6, batch=False)
        assert alone.text == r.text
    assert "6 rows: 6 done" in res.summary()
