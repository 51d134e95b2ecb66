"""The documentation against the code: the configuration table, the README's size."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "mlx_notebook"


def table_names(page: str) -> set[str]:
    """The backticked first cell of every table row of a docs page."""
    text = (ROOT / "docs" / page).read_text()
    return set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.M))


def config_traits() -> dict[str, object]:
    from mlx_notebook.notebook.magics.generate import MLXNotebook

    return {
        f"MLXNotebook.{name}": t.default_value
        for name, t in MLXNotebook.class_traits(config=True).items()
    }


def test_the_configuration_table_has_every_variable_and_trait_and_nothing_else():
    from mlx_notebook import config

    want = {v.name for v in config.VARIABLES} | set(config.FOREIGN) | set(config_traits())
    assert table_names("configuration.md") == want


def test_the_table_gives_each_default_as_the_code_has_it():
    from mlx_notebook import config

    text = (ROOT / "docs" / "configuration.md").read_text()
    rows = {m[0]: m[1] for m in re.findall(r"^\| `([^`]+)` \| ([^|]+) \|", text, flags=re.M)}
    for v in config.VARIABLES:
        shown = rows[v.name].strip()
        assert shown == (f"`{v.default}`" if v.default else "*empty*"), v.name
    for name, default in config_traits().items():
        shown = rows[name].strip().strip("`")
        assert shown == (f'"{default}"' if isinstance(default, str) else repr(default)), name


def test_no_module_reads_a_variable_the_table_does_not_declare():
    from mlx_notebook import config

    declared = {v.name for v in config.VARIABLES}
    found, reads = set(), []
    for p in PKG.rglob("*.py"):
        text = p.read_text()
        found |= set(re.findall(r"MLX_NOTEBOOK_[A-Z0-9_]+", text))
        if p.name == "config.py":
            continue
        for line in text.splitlines():
            if re.search(r"os\.(environ|getenv)", line) and not any(
                f'"{name}"' in line for name in config.FOREIGN
            ):
                reads.append((p.relative_to(PKG).as_posix(), line.strip()))
    assert found <= declared, found - declared
    # Outside config.py only other tools' variables are read (by name, where they act).
    assert reads == []


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 250
    assert "make demo" in "\n".join(lines) and "make test" in "\n".join(lines)


def test_the_families_table_names_every_architecture_of_the_installed_mlx_lm():
    from mlx_notebook.testing.families import architectures

    page = (ROOT / "docs" / "guide" / "families.md").read_text()
    named = set(re.findall(r"^\| `([^`]+)` \|", page, re.M))
    assert named == set(architectures()), set(architectures()) ^ named
