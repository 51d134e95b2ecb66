"""A model's own sampling defaults, from its ``generation_config.json``.

Model authors ship the sampling they tuned for (Qwen3: temperature 0.6, top_p
0.95, top_k 20; Llama 3: 0.6 and 0.9). Transformers applies them when nothing
else is given, and so do we: a `Request` field left at None takes the model's
value, and an explicit value wins. As in transformers, ``do_sample`` false (or
absent) means greedy decoding, whatever temperature the file lists; a
repetition penalty applies either way.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

FILE = "generation_config.json"
# What a field means when neither the request nor the model sets it.
FALLBACK = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": None}
SAMPLED = ("temperature", "top_p", "top_k", "min_p")


def _valid(name: str, v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    if name == "top_k":
        return isinstance(v, int) and v >= 0
    if name == "top_p":
        return 0 < v <= 1
    if name == "min_p":
        return 0 <= v < 1
    return v > 0 if name == "repetition_penalty" else v >= 0


def read_defaults(path: str | Path | None) -> dict:
    """The sampling fields ``generation_config.json`` in ``path`` sets (empty if none).

    Values a `Request` would refuse are left out, so a bad file cannot fail a job.
    """
    if path is None:
        return {}
    try:
        cfg = json.loads((Path(path) / FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(cfg, dict):
        return {}
    names = list(FALLBACK) if cfg.get("do_sample") is True else ["repetition_penalty"]
    out = {n: cfg[n] for n in names if n in cfg and _valid(n, cfg[n])}
    if out.get("repetition_penalty") == 1:
        del out["repetition_penalty"]  # 1 is no penalty
    if cfg.get("do_sample") is True and "temperature" not in out:
        out["temperature"] = 1.0  # transformers' default when sampling
    return out


def defaults_for(spec: str) -> dict:
    """The sampling defaults ``spec`` will get, found without loading it.

    The bundled model has its authors' values (`default.SAMPLING`); a local
    directory or a cached hub snapshot has its ``generation_config.json``;
    anything else (a hub id not cached yet, a ``.gguf`` file) has none known.
    """
    from .spec import resolve

    try:
        s = resolve(spec)
    except (OSError, ValueError):
        return {}
    if s.kind == "default":
        from .default import SAMPLING

        return dict(SAMPLING)
    if s.kind == "dir":
        return read_defaults(s.path)
    if s.kind == "hub":
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(s.key, FILE)
        except Exception:  # noqa: BLE001 - a malformed id: nothing known
            return {}
        return read_defaults(Path(found).parent) if isinstance(found, str) else {}
    return {}
