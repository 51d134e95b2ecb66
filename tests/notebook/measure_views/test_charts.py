from mlx_notebook.notebook.measure_views.charts import (
    history_table,
    nice_ticks,
    position_chart,
    sweep_chart,
)


def test_history_table_escapes_and_has_a_prompt_column():
    html = history_table(
        [
            {
                "prompt": "<i>why</i>",
                "mode": "<b>x</b>",
                "k": 3,
                "tps": 12.34,
                "e2e_s": 1.5,
                "acceptance": 0.5,
                "ttft": 0.2,
                "finish": "length",
            }
        ]
    )
    assert "&lt;b&gt;" in html and "<b>x" not in html and "12.3" in html and "50%" in html
    assert "<th>prompt</th>" in html and "&lt;i&gt;why" in html


def test_ticks_are_round():
    assert nice_ticks(23.0) == [0, 5, 10, 15, 20, 25]
    assert nice_ticks(0.8) == [0, 0.2, 0.4, 0.6000000000000001, 0.8]
    assert nice_ticks(130)[-1] >= 130


def test_sweep_chart_speedups_intervals_baseline_and_best():
    rows = [
        {"k": 1, "speedup": 1.2, "low": 0.8, "high": 1.6, "clears": False},
        {"k": 2, "speedup": 1.6, "low": 1.3, "high": 1.9, "clears": True},
        {"k": 3, "speedup": None, "low": None, "high": None, "clears": False},
        {"k": 4, "speedup": 1.4, "low": 1.1, "high": 40.0, "clears": True},  # two runs: wide
    ]
    svg = sweep_chart(rows, baseline=[8.0, 9.0, 8.5], best_k=2, unit="tok/s")
    assert svg.startswith("<svg") and 'fill="currentColor"' in svg
    assert svg.count("<circle") == 4  # three medians and the best-k ring
    assert svg.count('r="9"') == 1 and "best k = 2" in svg and "best k = 1" not in svg
    assert "normal decoding = 1× (8.5 tok/s)" in svg
    assert "k=1: 1.20× (95% CI 0.80–1.60×)" in svg  # each point's figures on hover
    assert svg.count("fill:none;") == 1  # k=1's interval reaches below 1: a hollow dot
    assert ">4×</text>" in svg and ">40×</text>" not in svg  # a wide interval is cut
    assert "#000" not in svg and "black" not in svg  # text follows the theme
    assert sweep_chart([], []) == ""
    assert 'r="9"' not in sweep_chart(rows, [8.0], best_k=None)


def test_position_chart():
    svg = position_chart([0.9, 0.5, 0.25])
    assert svg.count("<rect") == 3 and "position 2: 50%" in svg
    assert position_chart([]) == ""
