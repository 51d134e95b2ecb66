"""The sampling a request gets: its own fields, else its model's defaults, else fallbacks.

Model authors ship the sampling they tuned for (`mlx_notebook.models.generation`
reads it); a `Request` field left at None takes the model's value, and an explicit
value wins. Part of the seam: views say which sampling ran, and where it came from.
"""

from __future__ import annotations

from ..models.generation import FALLBACK, SAMPLED

__all__ = ["FALLBACK", "describe", "in_force"]


def in_force(request, defaults: dict) -> dict:
    """Each sampling field's value for ``request`` on a model with ``defaults``.

    Returns:
        ``{field: value}`` for every field in `FALLBACK`, and ``"from_model"``:
        the fields whose value came from the model.
    """
    values, from_model = {}, []
    for name, fallback in FALLBACK.items():
        v = getattr(request, name)
        if v is None and name in defaults:
            v = defaults[name]
            from_model.append(name)
        values[name] = fallback if v is None else v
    values["from_model"] = from_model
    return values


def describe(values: dict) -> str:
    """``greedy`` or ``temperature 0.6 · top_p 0.95 · top_k 20``, and what the model set."""
    bits, shown = [], ["temperature"]
    if values["temperature"] < 1e-5:  # `request.MIN_TEMPERATURE`: filters do not matter
        bits.append("greedy")
    else:
        bits.append(f"temperature {values['temperature']:g}")
        for name in SAMPLED[1:]:
            if values[name] != FALLBACK[name]:
                bits.append(f"{name} {values[name]:g}")
                shown.append(name)
    if values["repetition_penalty"] not in (None, 1):
        bits.append(f"repetition_penalty {values['repetition_penalty']:g}")
        shown.append("repetition_penalty")
    by_model = set(values.get("from_model", ())) & set(shown)
    return " · ".join(bits) + (" (model defaults)" if by_model else "")
