"""marimo as a home: the example notebook runs and exports, its live view saved at its end."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("marimo")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def test_the_marimo_quickstart_exports_with_the_generation_in_its_view(tmp_path):
    out = tmp_path / "quickstart.html"
    subprocess.run(
        [sys.executable, "-m", "marimo", "export", "html", "--no-sandbox",
         str(ROOT / "notebooks" / "quickstart_marimo.py"), "-o", str(out)],
        check=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    page = out.read_text()  # cells' outputs and widget states, as JSON in the page
    done = re.search(r"\\u003Cstrong\\u003E(\w+)\\u003C/strong\\u003E after (\d+) tokens", page)
    assert done and done.group(1) in ("stop", "length"), "the cell reading .text did not end"
    # The live view's widget state holds the finished view, not its first render: an
    # export (or a reloaded page) shows the end.
    states = re.findall(r'"initial": (\[.*?\]), "', page)  # (the next key: "initial_seq")
    assert len(states) == 1, "one live view expected in the export"
    final = "".join(json.loads(states[0]))
    assert f"{done.group(2)} tokens" in final and "generating" not in final
    # generate()'s Result shows as its document (its _repr_html_), not a dataclass repr.
    assert re.search(r'"text/html": "\\u003Cstyle\\u003E.{0,20000}?class=\\"stats\\"', page)
    assert "Result(text=" not in page
