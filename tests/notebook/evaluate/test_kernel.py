"""``%%evaluate`` in a real kernel: the saved notebook holds the final matrix and summary."""

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.kernel

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def test_the_saved_output_is_the_final_matrix_and_summary(tiny_dir, draft_dir, tmp_path):
    cells = [
        "%load_ext mlx_notebook",
        "import pandas as pd\n"
        "df = pd.DataFrame({'q': [f'What is {i} and {i}?' for i in range(6)], "
        "'answer': [str(2 * i) for i in range(6)]})",
        f"%%evaluate --over df -m {tiny_dir},{draft_dir} --score includes:answer -n 6 -t 0 "
        "-o ev --wait\n--- plain\n{q}\n--- terse\nAnswer briefly: {q}",
        "print(len(ev.cells), ev.done, len(ev.summary().pairs))",
    ]
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(tmp_path))
    printed = "".join(o.get("text", "") for o in nb.cells[3].outputs)
    assert printed.strip() == "24 True 6"
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, path)
    # Read back as a viewer would, without a kernel: the last display of the cell.
    saved = nbformat.read(path, as_version=4).cells[2].outputs
    data = [o["data"] for o in saved if "data" in o][-1]
    html, plain = data["text/html"], data["text/plain"]
    assert "· done" in plain and "24/24 cells" in plain
    assert plain.count("--- row ") == 24 and "better on" in plain
    assert "95% interval" in html and "<svg" in html and html.count("<tr>") >= 6 + 1 + 4
    assert "application/vnd.jupyter.widget-view+json" not in data  # a document, not a widget
