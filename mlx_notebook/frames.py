"""Results as pandas DataFrames; pandas stays an optional dependency.

Every ``to_frame()`` imports pandas through `pandas`, so a missing install fails
the same way everywhere: one line with the exact command.
"""

from __future__ import annotations

INSTALL = "pip install pandas"


def pandas():
    """The pandas module.

    Raises:
        ImportError: pandas is not installed (the message gives the command).
    """
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(
            f"to_frame() needs pandas, an optional dependency: {INSTALL} "
            "(or install mlx_notebook with its [pandas] extra); the rows are also "
            "available as plain Python values"
        ) from None
    return pd


def to_frame(rows: list[dict]):
    """A DataFrame of ``rows`` (dicts of column values).

    Raises:
        ImportError: pandas is not installed (the message gives the command).
    """
    return pandas().DataFrame(rows)


def _resolve(prop: dict, root: dict) -> dict:
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return (root.get("$defs") or {}).get(ref.split("/")[-1], prop)
    return prop


def _dtype(prop: dict, root: dict):
    """The pandas dtype for one JSON Schema property (None: plain objects)."""
    prop = _resolve(prop, root)
    if isinstance(prop.get("enum"), list) and all(isinstance(v, str) for v in prop["enum"]):
        return pandas().CategoricalDtype(prop["enum"])
    return {"integer": "Int64", "number": "Float64", "boolean": "boolean", "string": "string"}.get(
        prop.get("type")
    )


def typed_columns(schema, values: list, valid: list[bool], sep: str | None = None):
    """Columns for a table of structured results: ``{name: pandas Series}``.

    An object schema gives one column per field, typed as declared (integers are
    ``Int64``, enums are categoricals, strings ``string``; nested objects stay
    dicts, or are flattened into ``a.b`` columns with ``sep``); anything else
    gives one ``value`` column (a choice is a categorical). Rows that are not
    valid hold missing values.
    """
    from .schema import Schema

    pd = pandas()

    dumped = [_plain(v) if ok else None for v, ok in zip(values, valid)]
    if schema.kind == "choice":
        return {"value": pd.Series(dumped, dtype=pd.CategoricalDtype(list(schema.choices)))}
    root = schema.json_schema or {}
    fields = schema.fields() if schema.kind == "json" else []
    if not fields:
        dtype = _dtype(root, root) if schema.kind == "json" else "string"
        return {"value": pd.Series(dumped, dtype=dtype or object)}
    cols = {}
    for name in fields:
        prop = root["properties"][name]
        cells = [d.get(name) if isinstance(d, dict) else None for d in dumped]
        sub = _resolve(prop, root)
        if (
            sep is not None
            and sub.get("type") == "object"
            and isinstance(sub.get("properties"), dict)
        ):
            inner = Schema("json", "", json_schema={**sub, "$defs": root.get("$defs", {})})
            ok = [isinstance(c, dict) for c in cells]
            for k, s in typed_columns(inner, cells, ok, sep).items():
                cols[f"{name}{sep}{k}"] = s
            continue
        cols[name] = pd.Series(cells, dtype=_dtype(prop, root) or object)
    return cols


def _plain(v):
    """A pydantic instance or dataclass as a dict (values of other forms as they are)."""
    import dataclasses

    dump = getattr(v, "model_dump", None)
    if callable(dump):
        return dump()
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.asdict(v)
    return v
