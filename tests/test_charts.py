from mlx_notebook.notebook.charts import history_table, sweep_chart


def test_history_table_escapes():
    html = history_table(
        [
            {
                "mode": "<b>x</b>",
                "k": 3,
                "tps": 12.34,
                "acceptance": 0.5,
                "ttft": 0.2,
                "finish": "length",
            }
        ]
    )
    assert "&lt;b&gt;" in html and "<b>x" not in html and "12.3" in html and "50%" in html


def test_sweep_chart_has_both_series():
    svg = sweep_chart([(1, 10.0, 0.5), (2, 14.0, 0.6), (3, 12.0, 0.4)], baseline=9.0)
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and "normal 9.0 tok/s" in svg
    assert sweep_chart([], None) == ""
