"""MapResult on its own rows: order, summaries, records, values and the frame."""

import pytest

from mlx_notebook.engine.events import Stats
from mlx_notebook.engine.token_records import TokenRecord
from mlx_notebook.mapping.result import MapResult, MapRow, aggregate
from mlx_notebook.schema import Schema


def stats(n, batch=0):
    s = Stats()
    s.generation_tokens, s.batch_rows = n, batch
    return s


def rows():
    rec = TokenRecord(0, 5, "4", -0.2, 1, 0.3, (("4", 5, -0.2),), "model", -0.2)
    return [
        MapRow(0, "a", "4", "stop", stats=stats(1, 2), records=[rec]),
        MapRow(1, "b", "x", "stop", stats=stats(3, 2)),
        MapRow(2, "c", "", "error", "boom", stats(0)),
        MapRow(3, "d", "12", "cancelled", stats=stats(2)),
    ]


def test_rows_in_order_with_counts_and_a_summary():
    res = MapResult(rows(), elapsed_s=2.0)
    assert len(res) == 4 and [r.index for r in res] == [0, 1, 2, 3] and res[1].text == "x"
    assert res.texts == ["4", "x", "", "12"] and res.completed == 2
    assert res.generated_tokens == 6 and res.tps == 3.0  # 6 tokens / the injected 2.0 s
    assert (
        res.summary()
        == "4 rows: 2 done, 1 error, 1 stopped · 6 tokens in 2.0 s · 3.0 tok/s aggregate"
    )
    assert res.done and res.snapshot().rows == res.rows


def timed(n, ended_at, total_s, replayed=None):
    s = stats(n)
    s.ended_at, s.total_s, s.replayed = ended_at, total_s, replayed
    return s


def test_the_aggregate_spans_the_rows_generated_now_from_their_own_stats():
    old = {"made": 1.0, "seconds": 9.0}
    # Two fresh rows overlapping in time (a batch): 100..104 and 101..105 -> 5 s.
    fresh = [timed(10, 104.0, 4.0), timed(20, 105.0, 4.0), timed(7, 50.0, 9.0, old)]
    assert aggregate(fresh) == (30, 5.0)  # the replayed row counts for nothing
    # All replayed: the run that made them, so a replayed view says the same.
    again = [timed(10, 104.0, 4.0, old), timed(20, 105.0, 4.0, old)]
    assert aggregate(again) == (30, 5.0)
    assert aggregate([stats(0), stats(0)]) is None  # no token, no times
    res = MapResult([MapRow(i, "p", "t", "stop", stats=s) for i, s in enumerate(fresh)])
    assert res.tps == 6.0
    assert res.summary() == (
        "3 rows: 3 done (1 replayed) · 30 tokens in 5.0 s · 6.0 tok/s aggregate"
    )


def test_tokens_of_a_row_and_the_refusal_without_records():
    res = MapResult(rows())
    assert [r.text for r in res.tokens(0)] == ["4"]
    with pytest.raises(ValueError, match="logprobs=K"):
        res.tokens(1)
    assert res.tokens(2) == []  # nothing generated: nothing to ask for


def test_values_parse_per_row_and_go_to_typed_columns():
    pytest.importorskip("pandas")
    res = MapResult(rows(), schema=Schema.of(int))
    assert res.valid == [True, False, False, False] and res.values == [4, None, None, None]
    df = res.to_frame()
    assert list(df.columns[:5]) == ["prompt", "value", "valid", "problem", "text"]
    assert res.problems[0] is None and "ended (error)" in df["problem"].tolist()[2]
    assert str(df["value"].dtype) == "Int64" and df["value"].tolist()[0] == 4
    assert df["valid"].tolist() == [True, False, False, False]
    assert df["batch_rows"].tolist() == [2, 2, 0, 0] and df["prompt"].tolist() == list("abcd")
    with pytest.raises(ValueError, match="no schema"):
        _ = MapResult(rows()).values


def test_a_dataframe_source_keeps_its_columns_and_index():
    pd = pytest.importorskip("pandas")
    src = pd.DataFrame({"text": list("abcd"), "k": range(4)}, index=list("wxyz"))
    df = MapResult(rows(), source=src).to_frame()
    assert list(df.index) == list("wxyz") and df["k"].tolist() == [0, 1, 2, 3]
    assert df["text"].tolist() == list("abcd") and df["gen_text"].tolist() == ["4", "x", "", "12"]
