"""Rows to a pandas DataFrame; pandas stays optional."""

from __future__ import annotations


def to_frame(rows: list[dict]):
    """A DataFrame of ``rows``.

    Raises:
        ImportError: pandas is not installed (the message says how to get it).
    """
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(
            "to_frame() needs pandas, an optional dependency: pip install pandas "
            "(the rows are also available as .rows)"
        ) from None
    return pd.DataFrame(rows)
