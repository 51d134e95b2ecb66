"""Execute a notebook headlessly (nbclient), print the text it produced, say how to open it.

Usage: python scripts/run_demo.py notebooks/quickstart.ipynb
"""

import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main(path: str) -> int:
    src = Path(path)
    nb = nbformat.read(src, as_version=4)
    print(f"Executing {src} headlessly (first run converts the bundled model once)...")
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3").execute(cwd=str(src.parent))
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
    # Each finished generation is saved as a document: its text/plain is the whole view.
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            data = o.get("data", {}) if o.output_type == "display_data" else {}
            if "mlxnb" in data.get("text/html", ""):
                out.append(re.sub(r"\s+", " ", data.get("text/plain", "")).strip())
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "notebooks/quickstart.ipynb"))
