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
