"""Execute a notebook headlessly (nbclient), print the text it produced, say how to open it.

Usage: python scripts/run_demo.py notebooks/quickstart.ipynb
"""

import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

TAG = re.compile(r"<[^>]+>")
STYLE = re.compile(r"<style>.*?</style>", re.S)


def main(path: str) -> int:
    src = Path(path)
    nb = nbformat.read(src, as_version=4)
    print(f"Executing {src} headlessly (first run converts the bundled model once)...")
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3", store_widget_state=True).execute(
        cwd=str(src.parent)
    )
    out_dir = Path("build")
    out_dir.mkdir(exist_ok=True)
    out = out_dir / src.name.replace(".ipynb", ".executed.ipynb")
    nbformat.write(nb, out)
    print(f"Done in {time.perf_counter() - t0:.1f} s. Cell outputs:\n")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        texts = [o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream"]
        if texts:
            print(f"--- cell {i}: {cell.source.splitlines()[0][:70]}")
            print("".join(texts).rstrip())
    views = _final_views(nb)
    if views:
        print("\n--- streamed views (final state):")
        for v in views:
            print("*", v[:400])
    print(f"\nExecuted notebook saved to {out}")
    print(f"Open it in JupyterLab:  .venv/bin/jupyter lab {src}")
    return 0


def _final_views(nb) -> list[str]:
    state = (
        nb.metadata.get("widgets", {})
        .get("application/vnd.jupyter.widget-state+json", {})
        .get("state", {})
    )
    out = []
    for model in state.values():
        value = model.get("state", {}).get("value", "")
        if model.get("model_name") == "HTMLModel" and "mlxnb" in value:
            text = TAG.sub(" ", STYLE.sub("", value))
            out.append(re.sub(r"\s+", " ", _unescape(text)).strip())
    return out


def _unescape(s: str) -> str:
    import html

    return html.unescape(s)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "notebooks/quickstart.ipynb"))
