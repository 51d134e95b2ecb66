"""Generations saved with the notebook: nbclient run, saved file, nbconvert."""

import html
import json
import re
import subprocess
import sys

import nbformat
import pytest

from tests.saved_notebook import WIDGET_MIME, execute, generation_outputs

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def saved(tiny_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("saved") / "saved.ipynb"
    nb, texts = execute(tiny_dir, path)
    return path, nbformat.read(path, as_version=4), texts


def test_every_generation_is_saved_as_html_and_plain_text(saved):
    _, nb, texts = saved
    finished, stopped, compare, failed = (generation_outputs(nb.cells[i]) for i in (1, 2, 4, 6))
    for outs in (finished, stopped, compare, failed):
        assert len(outs) == 1
        assert WIDGET_MIME not in outs[0].data
        assert set(outs[0].data) == {"text/html", "text/plain"}
    assert texts["finished"] and texts["finished"] in finished[0].data["text/plain"]
    assert len(texts["stopped"]) >= 200 and texts["stopped"] in stopped[0].data["text/plain"]
    assert "stopped" in stopped[0].data["text/html"]
    assert texts["normal"] in compare[0].data["text/plain"]
    assert texts["speculative"] in compare[0].data["text/plain"]
    assert "identical text" in compare[0].data["text/html"]


def test_a_panel_is_saved_with_a_snapshot_of_its_last_state(saved):
    _, nb, _ = saved
    live, snap = [o for o in nb.cells[8].outputs if o.output_type == "display_data"]
    assert WIDGET_MIME in live.data  # the live controls, while the kernel runs
    assert live.data["text/plain"].startswith("mlx_notebook Panel")  # not a widget repr
    assert "children=" not in live.data["text/plain"]
    assert WIDGET_MIME not in snap.data and set(snap.data) == {"text/html", "text/plain"}
    page = snap.data["text/html"]
    # The snapshot was brought up to date after the run in the next cell.
    text = "".join(o.get("text", "") for o in nb.cells[9].outputs if o.output_type == "stream")
    reason, generated = text.split("\n", 1)
    assert reason == "length" and generated.strip()
    assert 'class="mlxnb-snapshot"' in page and "mlxnb-history" in page
    assert html.escape(generated.strip()[:20]) in page or generated.strip()[:20] in page
    assert "Tell me &lt;b&gt;more&lt;/b&gt;" in page and "<b>more</b>" not in page
    assert "generate 1" in page and "1 runs" not in page
    # Which output shows is decided by the page: the snapshot hides beside a live widget.
    assert ".mlxnb-live" in page and "Error displaying" not in page


def test_a_failed_wait_fails_the_cell_with_one_line(saved):
    _, nb, _ = saved
    errors = [o for o in nb.cells[6].outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == "GenerationError"
    (line,) = errors[0].traceback
    assert line.startswith("GenerationError: FileNotFoundError: [Errno 2] No such file")
    assert line.endswith("/config.json'")
    (view,) = generation_outputs(nb.cells[6])
    assert "config.json" in view.data["text/html"] and "tok/s" not in view.data["text/html"]


def test_nbconvert_html_shows_every_text(saved, tmp_path):
    path, _, texts = saved
    out = tmp_path / "saved.html"
    subprocess.run(
        [sys.executable, "-m", "nbconvert", "--to", "html", str(path), "--output", str(out)],
        check=True,
        capture_output=True,
    )
    # newline="": a text's carriage returns stay as they are (read_text turns them into \n).
    with open(out, encoding="utf-8", newline="") as f:
        page = re.sub(r"<script.*?</script>", "", f.read(), flags=re.S)  # widget state
    page = html.unescape(page)  # nbconvert re-serializes entities its own way
    for name, text in texts.items():
        assert text in page, name


def test_a_scored_text_is_saved_as_the_inspector(saved):
    _, nb, _ = saved
    (out,) = [o for o in nb.cells[10].outputs if o.output_type == "execute_result"]
    assert set(out.data) == {"text/html", "text/plain"}
    page = out.data["text/html"]
    assert 'class="insp"' in page and "<script" not in page
    tokens = page.count('class="tk b') - 5  # less the legend's five bands
    assert tokens > 5 and page.count('class="card" style="display:none"') == tokens
    assert out.data["text/plain"].startswith("<TokenTable: ")


PROVENANCE = """
import json, sys
from mlx_notebook.origin import provenance
rows = provenance(sys.argv[1])
rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
print(json.dumps({"rows": rows, "mlx": sorted(m for m in sys.modules if m.startswith("mlx."))},
                 default=str))
"""


def test_every_saved_generation_says_what_made_it_readable_without_mlx(saved, tiny_dir):
    path, nb, _ = saved
    meta = generation_outputs(nb.cells[1])[0].metadata["mlx_notebook"]["generations"]
    assert len(meta) == 1 and meta[0]["model"] == tiny_dir
    out = subprocess.run(
        [sys.executable, "-c", PROVENANCE, str(path)], capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout)
    assert got["mlx"] == []  # read with the standard library (and pandas) alone
    rows = got["rows"]
    finished = [r for r in rows if r["cell"] == 1][0]
    assert len(finished["model_hash"]) == 64 and finished["precision"] == "float32"
    assert finished["versions"]["mlx"] and finished["prompt_tokens"] > 0
    assert finished["finish_reason"] in ("stop", "length") and finished["replayed"] is None
    assert {r["cell"] for r in rows} >= {1, 2, 4}  # the stopped one and the Compare's runs too
