"""Build and execute (nbclient) a notebook of %%generate cells, then save it."""

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def cells(tiny_dir):
    return [
        "%load_ext mlx_notebook",
        f"%%generate -m {tiny_dir} -n 40 --raw -f text -o finished\nHello",
        f"%%generate -m {tiny_dir} -n 100000 --raw -f text -o stopped\nHello",
        (
            "import time\n"
            "while len(stopped.partial_text) < 200:\n    time.sleep(0.05)\n"
            "stopped.cancel()\nstopped.job.wait(30)\nfinished.job.wait(30)\n"
            "print(stopped.finish_reason)"
        ),
        (
            f"%%generate -m {tiny_dir} --compare --repeats 1 --lookup -n 30 --raw -o cmp\n"
            "Hello world. The quick brown fox. Hello world. The quick brown fox. Hello"
        ),
        "res = cmp.wait(60)\nprint('compared', res.identical)",
        f"%%generate --wait -m {Path(tiny_dir).parent}\nHi",  # a directory with no model
        (
            "import json\nprint(json.dumps({'finished': finished.text, 'stopped': stopped.text,"
            " 'normal': res.normal[0].text, 'speculative': res.speculative[0].text}))"
        ),
        (  # 8: a Panel, displayed, then used
            "import mlx_notebook\n"
            f"panel = mlx_notebook.Panel(model={tiny_dir!r}, prompt='Tell me <b>more</b>', "
            "chat=False, max_tokens=12, temperature=0)\npanel"
        ),
        "panel.generate()\nprint(panel.wait(60).finish_reason)\nprint(panel.last_result.text)",
        # 10: a scored text, shown as the token inspector
        f"mlx_notebook.score('Hello world. The quick brown fox.', model={tiny_dir!r})",
    ]


def execute(tiny_dir, path: Path):
    """Run the notebook headlessly, save it to ``path``; return (nb, texts by name)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells(tiny_dir)]
    nb.cells[6].metadata["tags"] = ["raises-exception"]  # Run All would stop here
    NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(path.parent))
    nbformat.write(nb, path)
    last = "".join(o.get("text", "") for o in nb.cells[7].outputs if o.output_type == "stream")
    return nb, json.loads(last)


def generation_outputs(cell):
    """The display outputs of a cell that came from a generation view."""
    return [o for o in cell.outputs if o.output_type == "display_data" and "mlxnb" in str(o.data)]
