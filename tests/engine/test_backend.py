"""The Backend seam: the notebook layer reaches engines only through it, and importing
the package stays light."""

import json
import subprocess
import sys

from tests.test_architecture import modules


def graph() -> dict[str, set[str]]:
    """Each module's module-level imports (lazy imports inside functions are allowed)."""
    return {me: {m for m, _, nested in found if not nested} for me, found in modules().items()}


def reachable(g, start):
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        for dep in g.get(m, ()):
            for cand in (dep, dep.rsplit(".", 1)[0]):
                if cand not in seen:
                    seen.add(cand)
                    todo.append(cand)
    return seen


def test_notebook_layer_never_imports_the_worker_mlx_or_mlx_lm():
    g = graph()
    notebook = [m for m in g if m.startswith("mlx_notebook.notebook")]
    assert len(notebook) >= 8
    for m in notebook:
        bad = {
            d
            for d in reachable(g, m)
            if d == "mlx_notebook.engine.local.engine"
            or d.split(".")[0] in ("mlx_lm",)
            or d == "mlx.core"
            or d.startswith("mlx.")
        }
        assert not bad, (m, sorted(bad))


def test_importing_the_package_and_the_magics_loads_no_mlx():
    code = (
        "import sys, json, mlx_notebook, mlx_notebook.notebook.magics.generate; "
        "import mlx_notebook.engine.local.engine; "
        "import mlx_notebook.measure; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('mlx', 'mlx_lm'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
