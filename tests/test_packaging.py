"""What a bare `pip install` gets: every module the package imports is declared."""

import ast
import re
import sys
from importlib.metadata import packages_distributions, requires
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
# Imported only behind an ImportError that degrades gracefully (said where it is used).
OPTIONAL = {"jsonschema"}


def _name(req: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0].lower().replace("_", "-")


def closure(names: set[str]) -> set[str]:
    """``names`` and everything they require (base requirements only), as installed here."""
    seen, todo = set(), list(names)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        try:
            reqs = requires(n) or []
        except Exception:  # noqa: BLE001 - not installed here: nothing more to follow
            reqs = []
        todo += [_name(r) for r in reqs if "extra ==" not in r]
    return seen


def third_party_imports() -> set[str]:
    out = set()
    for p in (ROOT / "mlx_notebook").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module.split(".")[0])
    return {m for m in out if m not in sys.stdlib_module_names and m != "mlx_notebook"}


def test_every_import_is_a_dependency_or_a_named_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = closure({_name(r) for r in project["dependencies"]})
    extras = {_name(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    dists = {
        k: {d.lower().replace("_", "-") for d in v} for k, v in packages_distributions().items()
    }
    missing = {
        m: sorted(dists.get(m, {m}))
        for m in third_party_imports() - OPTIONAL
        if not dists.get(m, {m}) & (base | extras)
    }
    assert missing == {}


def test_server_models_and_frames_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "httpx" in {_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    assert "pandas" in {_name(r) for r in extras["demo"]}  # the quickstart shows a DataFrame
    assert "pandas" in {_name(r) for r in extras["pandas"]}


def test_a_missing_pandas_says_the_exact_command(monkeypatch):
    import pytest

    from mlx_notebook.frames import to_frame

    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        to_frame([{"a": 1}])
