"""The demo notebooks execute headlessly (README's demo command runs quickstart)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def run(name):
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3").execute(cwd=str(ROOT / "notebooks"))
    # What was printed, and the plain text of every display (views, the chat's transcript).
    return "".join(
        o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )


def test_quickstart():
    out = run("quickstart.ipynb")
    assert "cancelled" in out and "characters kept" in out
    assert "stop 5" in out  # the stop string ended generation
    assert "device:" in out and "BLAS acceleration" in out
    assert "4 rows: 4 done" in out  # --over: every place described, batched
    assert "[user]\nName a famous lighthouse." in out  # the chat window's saved transcript


def test_speculative_vs_normal():
    out = run("speculative_vs_normal.ipynb")
    # Greedy speculative text equals normal; the verdict is whatever the rule decided
    # (a speed verdict is no test: bench_compare.py measures it).
    assert "identical text in all" in out
    verdicts = ("faster: ", "slower: ", "no difference beyond", "undecided after")
    assert any(v in out for v in verdicts), out[:500]
    assert "acceptance " in out  # drafts were accepted and counted
    assert "by position:" in out
    assert "best k = " in out or "no k beat normal decoding" in out
    assert out.count("lookup") >= 8 and out.count("normal") >= 4  # the sweep's history rows
