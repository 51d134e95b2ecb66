"""The Backend seam: the notebook layer reaches engines only through it, and importing
the package stays light."""

import ast
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "mlx_notebook"


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def top_level_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` is imported (function-level imports excluded)."""
    tree = ast.parse(path.read_text())
    me = module_name(path)
    pkg = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out = set()
    for node in tree.body:  # module level only: lazy imports inside functions are allowed
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def graph() -> dict[str, set[str]]:
    return {module_name(p): top_level_imports(p) for p in PKG.rglob("*.py")}


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


def test_import_time_is_small():
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    times = []
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import mlx_notebook"],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
        last = [ln for ln in out.stderr.splitlines() if ln.rstrip().endswith("| mlx_notebook")]
        times.append(int(last[-1].split("|")[1]) / 1e6)
    # Usually 0.04 s: 1 s is 25x that, so only a real regression (importing MLX or
    # the widget libraries at import, which the import-graph test pins down) fails.
    assert statistics.median(times) < 1.0, times
