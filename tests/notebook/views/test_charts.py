from mlx_notebook.notebook.views.charts import (
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


def test_sweep_chart_medians_spread_baseline_and_best():
    rows = [
        {"k": 1, "tps": 10.0, "tps_min": 9.0, "tps_max": 11.0},
        {"k": 2, "tps": 14.0, "tps_min": 13.0, "tps_max": 15.0},
        {"k": 3, "tps": None, "tps_min": None, "tps_max": None},
    ]
    svg = sweep_chart(rows, baseline=[8.0, 9.0, 8.5], best_k=2)
    assert svg.startswith("<svg") and 'fill="currentColor"' in svg
    assert svg.count("<circle") == 3  # two medians and the best-k ring
    assert "best k = 2" in svg and "normal decoding 8.5" in svg
    assert "#000" not in svg and "black" not in svg  # text follows the theme
    assert sweep_chart([], []) == ""


def test_position_chart():
    svg = position_chart([0.9, 0.5, 0.25])
    assert svg.count("<rect") == 3 and "position 2: 50%" in svg
    assert position_chart([]) == ""
