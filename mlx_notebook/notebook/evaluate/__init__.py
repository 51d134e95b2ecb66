"""``%%evaluate``: models and prompt variants over a DataFrame, as a live scored matrix."""
