import pytest
from IPython.core.error import UsageError

from mlx_notebook.mapping.mapper import fill_rows, rows_of

ITEMS = ["rivers", "mountains", "lakes", "forests", "deserts", "islands"]


def test_rows_from_lists_series_and_frames():
    pd = pytest.importorskip("pandas")
    assert rows_of(["a", "b"]) == ([{"item": "a"}, {"item": "b"}], ["item"])
    assert rows_of(pd.Series(["a"])) == ([{"item": "a"}], ["item"])
    df = pd.DataFrame({"city": ["Paris", "Oslo"], "n": [1, 2]})
    rows, names = rows_of(df)
    assert rows == [{"city": "Paris", "n": 1}, {"city": "Oslo", "n": 2}] and names == ["city", "n"]


@pytest.mark.parametrize(
    ("value", "message"),
    [(3, "a int; it must be a list"), ("abc", "a str"), ([], "empty; nothing to generate")],
)
def test_bad_row_values_are_one_line(value, message):
    with pytest.raises(ValueError, match=message):
        rows_of(value)


def test_rows_fill_item_columns_and_user_variables():
    prompts = fill_rows(
        "{style}: {item} {{x}}", [{"item": "a"}, {"item": "b"}], ["item"], {"style": "S"}
    )
    assert prompts == ["S: a {x}", "S: b {x}"]


def test_a_name_that_is_no_column_nor_variable_lists_the_columns():
    with pytest.raises(ValueError) as info:
        fill_rows("About {topc}", [{"topic": "a", "n": 1}], ["topic", "n"], {"style": "S"})
    assert str(info.value) == (
        "{topc} is not a column; the columns are topic, n "
        "(nothing was started; use {{ }} for literal braces)"
    )


def _ip_with(ipshell, engine, **ns):
    from mlx_notebook.notebook.magics import generate as magics

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


def test_a_typo_in_a_column_name_starts_nothing_and_lists_the_columns(ipshell, engine, tiny_dir):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"topic": ITEMS[:2], "level": ["easy", "hard"]})
    ip = _ip_with(ipshell, engine, df=df, style="brief")
    with pytest.raises(UsageError) as info:
        ip.run_cell_magic("generate", f"-m {tiny_dir} --raw --over df", "{style} on {topc}")
    assert str(info.value) == (
        "--over: {topc} is not a column; the columns are topic, level "
        "(nothing was started; use {{ }} for literal braces)"
    )
    info = engine.info()
    assert info.running is None and info.queued == 0 and not info.batched


def test_reading_a_running_result_waits_for_every_row(ipshell, engine, tiny_dir):
    """What Run All does: bind the result in one cell, read it in the next."""
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"topic": ITEMS, "n": range(6)}, index=[f"r{i}" for i in range(6)])
    ip = _ip_with(ipshell, engine, df=df)
    ip.run_cell_magic("generate", f"-m {tiny_dir} --raw -n 40 --over df -o res", "About {topic}")
    res = ip.user_ns["res"]
    early = res.snapshot()  # the live, partial view: does not wait
    assert len(early.rows) == 6
    frame = res.to_frame()  # a final value: waits
    assert list(frame["finish_reason"]) == ["length"] * 6 and res.done
    assert list(frame.index) == list(df.index)  # joins back onto the input
    assert list(frame.columns[:2]) == ["topic", "n"] and "text" in frame.columns
    assert frame["generation_tokens"].tolist() == [40] * 6
    assert df.join(frame[["text"]])["text"].tolist() == res.texts


def test_map_takes_a_frame_and_a_template(engine, tiny_dir):
    pd = pytest.importorskip("pandas")
    import mlx_notebook

    df = pd.DataFrame({"text": ["Rivers", "Lakes"]}, index=[10, 20])
    res = mlx_notebook.map(
        df, "About {text}", backend=engine, model=tiny_dir, chat=False, max_tokens=4
    )
    assert [r.prompt for r in res] == ["About Rivers", "About Lakes"]
    frame = res.to_frame()
    assert list(frame.index) == [10, 20] and frame["text"].tolist() == ["Rivers", "Lakes"]
    assert frame["gen_text"].tolist() == res.texts  # a taken name gets gen_ in front
    with pytest.raises(ValueError, match="is not a column; the columns are text"):
        mlx_notebook.map(df, "About {txt}", backend=engine, model=tiny_dir)
