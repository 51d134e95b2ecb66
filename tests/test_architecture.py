"""The package's shape: who may import whom, counting imports inside functions too.

- The engine, models and the CPU fast path never import a notebook library.
- The layers above the engine (notebook, measure, chat, mapping, evaluation) reach it
  only through its seam, and never import ``models``, ``cpu``, MLX or mlx-lm.
- ``cpu/`` is imported only from its few entry points.
- Module-level imports form no cycle.
"""

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "mlx_notebook"
UI = ("IPython", "ipywidgets", "anywidget", "traitlets", "ipykernel", "marimo")
SEAM = {
    "mlx_notebook.engine",
    *(
        f"mlx_notebook.engine.{m}"
        for m in ("backend", "request", "job", "events", "errors", "info", "token_records")
    ),
    "mlx_notebook.engine.defaults",
    "mlx_notebook.engine.branch",
}
CLIENTS = ("notebook", "measure", "chat", "mapping", "evaluation")
# Outside cpu/, the modules that may import it: each only on the CPU (or, for the
# package's __init__, to load OpenBLAS before MLX on Linux).
CPU_ENTRIES = {
    "mlx_notebook",
    "mlx_notebook.models.loader",
    "mlx_notebook.models.registry",
    "mlx_notebook.engine.decoding.device",
    "mlx_notebook.engine.decoding.sampling",
    "mlx_notebook.engine.local.diagnostics",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(source: str, me: str, is_pkg: bool) -> list[tuple[str, int, bool]]:
    """``(module, line, inside a function)`` for every import, at any depth."""
    tree = ast.parse(source)
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside |= {id(n) for n in ast.walk(node) if n is not node}
    pkg = me if is_pkg else me.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        nested = id(node) in inside
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, nested) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            out.append((mod, node.lineno, nested))
            # ``from pkg import module``: the module itself is imported too
            out += [(f"{mod}.{a.name}", node.lineno, nested) for a in node.names]
    return out


def modules() -> dict[str, list[tuple[str, int, bool]]]:
    return {
        module_name(p): imports(p.read_text(), module_name(p), p.name == "__init__.py")
        for p in PKG.rglob("*.py")
    }


def violations(mods: dict) -> list[str]:
    """Every import that breaks one of the rules above, as ``module:line imports X``."""
    known = set(mods)
    bad = []
    for me, found in mods.items():
        layer = me.split(".")[1] if "." in me else ""
        for mod, line, nested in found:
            where = f"{me}:{line}{' (in a function)' if nested else ''} imports {mod}"
            top = mod.split(".")[0]
            if layer in ("engine", "models", "cpu") and top in UI:
                bad.append(where)
            if layer in CLIENTS:
                if mod.startswith("mlx_notebook.engine") and mod in known and mod not in SEAM:
                    bad.append(where)
                if mod.startswith(("mlx_notebook.models", "mlx_notebook.cpu")):
                    bad.append(where)
                if top in ("mlx", "mlx_lm"):
                    bad.append(where)
            if (
                mod.startswith("mlx_notebook.cpu")
                and layer != "cpu"
                and me not in CPU_ENTRIES
                and mod in known
            ):
                bad.append(where)
    return bad


def test_every_layer_imports_only_what_it_may():
    assert violations(modules()) == []


def test_a_function_level_import_of_models_in_the_notebook_layer_is_caught():
    mods = modules()
    planted = "def show():\n    from ...models.registry import Registry\n    return Registry\n"
    me = "mlx_notebook.notebook.views.view"
    mods[me] = mods[me] + imports(planted, me, False)
    assert violations(mods) == [
        f"{me}:2 (in a function) imports mlx_notebook.models.registry",
        f"{me}:2 (in a function) imports mlx_notebook.models.registry.Registry",
    ]


@pytest.mark.parametrize(
    "me,source",
    [
        ("mlx_notebook.engine.job", "def f():\n    import ipywidgets\n"),
        ("mlx_notebook.measure.runs", "def f():\n    from ..engine.local.engine import Engine\n"),
        ("mlx_notebook.chat.conversation", "import mlx.core as mx\n"),
        ("mlx_notebook.engine.local.batch", "def f():\n    from ...cpu import fast\n"),
    ],
)
def test_each_rule_catches_its_own_leak(me, source):
    mods = modules()
    mods[me] = mods[me] + imports(source, me, False)
    assert violations(mods), (me, source)


def test_module_level_imports_form_no_cycle():
    mods = modules()
    graph = {
        me: {m for m, _, nested in found if not nested and m in mods and m != me}
        for me, found in mods.items()
    }
    # A package's __init__ re-exporting its modules is not a cycle with them.
    for me in graph:
        graph[me] = {m for m in graph[me] if not me.startswith(m + ".")}
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    assert cycles == []


def test_no_module_is_over_about_400_lines_and_no_folder_over_about_12_modules():
    long = {
        module_name(p): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 420
    }
    assert long == {}
    crowded = {
        str(d.relative_to(PKG.parent)): n
        for d in [PKG, *(p for p in PKG.rglob("*") if p.is_dir())]
        if (n := len([f for f in d.glob("*.py") if f.name != "__init__.py"])) > 13
    }
    assert crowded == {}
