"""``%%evaluate`` in JupyterLab: the matrix streams, Stop (all or one column) works, and
the final matrix, summary and chart read in light and dark themes."""

import pytest

from .lab import contrasts, run_cell, run_done, step, themed
from .test_lab import scripted_cell

SETUP = (
    "import tempfile, pandas as pd\n"
    "from mlx_notebook.testing import build_tiny_model\n"
    "SMALL = str(build_tiny_model(tempfile.mkdtemp(), seed=1, num_hidden_layers=1))\n"
    "df = pd.DataFrame({'q': [f'What is {i} plus {i}?' for i in range(6)], "
    "'answer': [str(2 * i) for i in range(6)]})"
)
CELLS = [
    SETUP,  # 1
    scripted_cell("slow", "Counting slowly: one two three four five. " * 40, delay=0.03),  # 2
    # 3: the tiny model's cells end at once; the slow model's stream until stopped
    "%%evaluate --over df -m {TINY},slow --score includes:answer -n 400 -t 0 -o live\n"
    "--- plain\n{q}\n--- terse\nAnswer briefly: {q}",
    # 4: a whole run: 2 models x 2 prompts x 6 rows, its summary and chart
    "%%evaluate --over df -m {TINY},{SMALL} --score includes:answer -n 8 -t 0 -o ev\n"
    "--- plain\n{q}\n--- terse\nAnswer briefly: {q}",
]


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_evaluate_streams_stops_and_summarizes(lab, artifacts, theme):
    page, slug, out = themed(lab, CELLS, theme)
    run_done(page, 0, 90)
    run_done(page, 1, 90)
    run_done(page, 2, 60)
    live = run_cell(page, 3)
    view = out(3)
    step("the slow model streams", lambda: "running slow" in view.inner_text(), 120)
    step("text arrives in its cells", lambda: "Counting slowly" in view.inner_text(), 60)
    assert view.locator(".mlxnb-row-label").inner_text() == "Stop one column:"
    labels = [t.removeprefix("■ ") for t in view.locator(".mlxnb-row button").all_inner_texts()]
    assert labels == ["tiny0 · plain", "tiny0 · terse", "slow · plain", "slow · terse"]
    view.locator("button", has_text="slow · terse").click()  # one column
    page.screenshot(path=str(artifacts / f"evaluate-{slug}-streaming.png"))
    column = view.locator("button", has_text="slow · terse")
    step("its button is used", column.is_disabled)
    view.locator('button[title^="Stop generating"]').click()  # everything
    step("stopped", lambda: "stopped" in view.locator(".state").first.inner_text(), 60)
    text = view.inner_text()
    assert "score 1" in text or "score 0" in text  # the tiny model's cells kept their scores
    step("cell 3 is done", lambda: live.locator(".jp-InputPrompt").inner_text() != "[*]:", 30)
    run_cell(page, 4)
    final = out(4)
    step("the summary", lambda: final.locator("svg.mlxnb-chart").count() == 1, 180)
    verdicts = final.locator(".neutral, .ok").all_inner_texts()
    assert len(verdicts) == 6 and all("noise" in v for v in verdicts), verdicts
    assert final.locator("table.grid").count() == 2  # the matrix and the summary
    assert min(contrasts(page, ".jp-Notebook .mlxnb table.grid td")) >= 4.5
    final.screenshot(path=str(artifacts / f"evaluate-{slug}.png"))
