"""Which real-world JSON Schemas the project accepts, enforces in full, or validates at the end.

Usage: python benchmarks/survey_schemas.py [--show] [--write DIR [--count 32]]

The sample is every JSON Schema shipped in packages of the development environment
(`make setup`), all public and under open licenses: JupyterLab's settings schemas
(BSD-3-Clause), nbformat's notebook schemas (BSD-3-Clause), jupyter-lsp's language
server settings (BSD-3-Clause, each from its server's project), jupyter-server's event
schemas (BSD-3-Clause, YAML) and the JSON Schema metaschemas of
jsonschema-specifications (MIT). Each is compiled as `Schema.of` would at submit:

- enforced: accepted, every key enforced while generating;
- annotated: accepted, with an unknown ``format``/``oneOf`` noted (validated at the end);
- with --no-strict: refused by default, accepted with ``strict=False``;
- refused: refused either way (the one-line reason is printed with --show).

``--write DIR`` copies ``--count`` of the accepted schemas that have properties of
their own, spread evenly over the sorted list, into DIR with a SOURCES.md of where
each came from and its license: the committed sample `bench_structured.py --sample`
times (benchmarks/schemas/).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections import Counter
from pathlib import Path

from mlx_notebook.schema import Schema, SchemaError

SOURCES = {  # package: glob of its schema files
    "jupyterlab": "schemas/**/*.json",
    "nbformat": "v4/nbformat.v4*.schema.json",
    "jupyter_lsp": "**/*.schema.json",
    "jupyter_server": "event_schemas/**/*.yaml",
    "jsonschema_specifications": "schemas/*/metaschema.json",
}


def sample() -> list[tuple[str, dict]]:
    """``(name, schema)`` of every schema found in the installed packages."""
    found = []
    for pkg, pattern in SOURCES.items():
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            print(f"({pkg} is not installed: its schemas are left out)")
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.glob(pattern)):
            text = path.read_text()
            if path.suffix == ".yaml":
                import yaml

                doc = yaml.safe_load(text)
            else:
                doc = json.loads(text)
            if isinstance(doc, dict):
                found.append((f"{pkg}/{path.relative_to(root)}", doc))
    return found


LICENSES = {
    "jupyterlab": "BSD-3-Clause",
    "nbformat": "BSD-3-Clause",
    "jupyter_lsp": "BSD-3-Clause",
    "jupyter_server": "BSD-3-Clause",
    "jsonschema_specifications": "MIT",
}


def write_sample(docs: list[tuple[str, dict]], out: Path, count: int) -> None:
    """Copy ``count`` accepted schemas, spread evenly, into ``out`` with their sources."""
    from importlib.metadata import version

    # Accepted, and with room for a value: a settings schema with no properties of its
    # own (JupyterLab's menus-only plugins) admits only "{}", which times nothing.
    ok = sorted(
        (n, d)
        for n, d in docs
        if verdict(d)[0] in ("enforced", "annotated")
        and (d.get("properties") or d.get("type") not in ("object", None))
    )
    step = max(1, len(ok) / count)
    chosen = [ok[int(i * step)] for i in range(min(count, len(ok)))]
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, doc in chosen:
        pkg, rest = name.split("/", 1)
        file = f"{pkg}__{rest.replace('/', '__').replace('@', '').rsplit('.', 1)[0]}.json"
        (out / file).write_text(json.dumps(doc, indent=1) + "\n")
        rows.append(f"| `{file}` | {pkg} {version(pkg.replace('_', '-'))} | `{rest}` | "
                    f"{LICENSES[pkg]} |")  # fmt: skip
    (out / "SOURCES.md").write_text(
        "# Real-world JSON Schemas: the sample `bench_structured.py --sample` times\n\n"
        "Written by `python benchmarks/survey_schemas.py --write benchmarks/schemas "
        f"--count {count}`: {len(chosen)} of the {len(ok)} schemas the project accepts "
        "by default that have properties of their own (a schema of none admits only "
        "`{}`), of the public schemas shipped in the development environment's "
        "packages, spread evenly over their sorted names. Each is unchanged, "
        "under its package's license (jupyter-lsp's server settings are taken from "
        "each language server's own project by jupyter-lsp).\n\n"
        "| file | package | path in the package | license |\n| --- | --- | --- | --- |\n"
        + "\n".join(rows)
        + "\n"
    )


def verdict(doc: dict) -> tuple[str, str]:
    try:
        s = Schema.of(doc)
        return ("annotated", "; ".join(s.notes)) if s.notes else ("enforced", "")
    except SchemaError as strict_error:
        try:
            Schema.of(doc, strict=False)
            return "with --no-strict", str(strict_error)
        except SchemaError as exc:
            return "refused", str(exc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--show", action="store_true", help="print each schema's verdict")
    ap.add_argument("--write", type=Path, help="copy an evenly spread sample here")
    ap.add_argument("--count", type=int, default=32, help="schemas in the sample")
    args = ap.parse_args()
    docs = sample()
    if args.write:
        write_sample(docs, args.write, args.count)
    counts: Counter = Counter()
    reasons: Counter = Counter()
    for name, doc in docs:
        kind, why = verdict(doc)
        counts[kind] += 1
        if kind != "enforced":
            reasons[why.split(":")[1].strip() if kind == "refused" else why[:70]] += 1
        if args.show:
            print(f"{kind:17s} {name}  {why[:110]}")
    n = len(docs)
    print(f"{n} schemas from {len(SOURCES)} packages")
    for kind in ("enforced", "annotated", "with --no-strict", "refused"):
        print(f"  {kind:17s} {counts[kind]:4d}  ({100 * counts[kind] / max(n, 1):.0f}%)")
    accepted = counts["enforced"] + counts["annotated"]
    print(f"accepted by default: {accepted}/{n}; with --no-strict: {n - counts['refused']}/{n}")
    for why, k in reasons.most_common(8):
        print(f"  {k:3d} x {why}")


if __name__ == "__main__":
    main()
