"""Run All after a kernel restart replays every deterministic result: no forward pass."""

import json

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.kernel

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def cells(tiny):
    return [
        "%load_ext mlx_notebook",
        f"%%generate -m {tiny} -t 0 -n 12 --raw --logprobs 3 -o g --wait\nOnce upon a time",
        "rows = [f'item {i}' for i in range(20)]",
        f"%%generate -m {tiny} -t 0.8 --seed 3 -n 8 --raw --over rows -o m --wait\nSay {{item}}",
        f"%%generate -m {tiny} --choice yes,no -t 0 -o s --wait --over rows\nIs {{item}} one?",
        f"%%chat -m {tiny} -t 0 -n 8 --wait\nHello",  # 5
        "%%chat -t 0 -n 8 --wait\nAnd then?",  # 6
        "%%chat -t 0 -n 8 --wait\nWhy?",  # 7
        (  # 8
            "import json, mlx_notebook\n"
            "e = mlx_notebook.Engine.default()\n"
            "print(json.dumps({'passes': e.forward_passes, 'g': g.text, "
            "'g_records': [[r.token_id, r.logprob] for r in g.job.result().tokens], "
            "'m': [r.text for r in m], 's': [r.text for r in s], "
            "'replayed': [g.stats.replayed is not None, all(r.stats.replayed for r in s)]}))"
        ),
    ]


def run(tiny, path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells(tiny)]
    NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(path))
    out = "".join(o.get("text", "") for o in nb.cells[8].outputs if o.output_type == "stream")
    return nb, json.loads(out)


def plain(nb, i):
    return [o["data"]["text/plain"] for o in nb.cells[i].outputs if "data" in o]


def test_a_second_run_all_after_a_restart_makes_no_forward_pass(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_NOTEBOOK_RESULT_CACHE", "deterministic")  # the kernels inherit it
    first_nb, first = run(tiny_dir, tmp_path)
    assert first["passes"] > 0 and first["replayed"] == [False, False]
    assert (tmp_path / ".mlx_notebook" / "cache.sqlite").exists()  # beside the notebook
    again_nb, again = run(tiny_dir, tmp_path)  # a new kernel: the restart
    assert again["passes"] == 0 and again["replayed"] == [True, True]
    for key in ("g", "g_records", "m", "s"):
        assert again[key] == first[key], key
    # Every saved view's text, byte for byte: a generation, both tables (their
    # aggregate speed is the first run's, from the rows' stats) and each chat turn.
    for i in (1, 3, 4, 5, 6, 7):
        assert plain(again_nb, i) == plain(first_nb, i), i
