"""``map``: one prompt template over many rows, generated together in the engine's batch."""

from .mapper import MapRun, as_prompts, fill_rows, map, rows_of
from .result import MapResult, MapRow

__all__ = ["MapResult", "MapRow", "MapRun", "as_prompts", "fill_rows", "map", "rows_of"]
