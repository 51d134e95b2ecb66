"""Where each saved generation came from: recorded in its output, read back from the file.

Every generation view's final output carries, in its metadata under ``mlx_notebook``,
what made it: the model and the hash of its files, the precision, the sampling in
force and the seed, the prompt's size, the library versions, the device, the timings
and whether it was replayed from the result cache. `provenance` reads them back from
a saved notebook with the standard library alone: no MLX, no kernel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

KEY = "mlx_notebook"
_SECRET_PARAMS = re.compile(r"key|token|secret|pass|auth|sig", re.IGNORECASE)


def clean_url(spec: str) -> str:
    """``spec`` with any credentials of a URL left out (they never reach a saved file).

    The user and password (``http://user:p@ss@host``: up to the last ``@``) go, and so
    do query parameters named like a key, token, secret, password or signature.
    """
    if not isinstance(spec, str) or "://" not in spec:
        return spec
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(spec)
    host = parts.netloc.rpartition("@")[2]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if not _SECRET_PARAMS.search(k)])
    return urlunsplit((parts.scheme, host, parts.path, query, parts.fragment))


def record(job) -> dict | None:
    """One generation's provenance, from its request and terminal event (None: unfinished)."""
    fin = job.finished
    if fin is None:
        return None
    r, s = job.request, fin.stats
    about = s.model or {}
    schema = r.constraint
    return {
        "model": clean_url(r.model),
        "model_hash": about.get("hash"),
        "precision": about.get("precision"),
        "device": about.get("device"),
        "versions": about.get("versions", {}),
        "mode": r.mode,
        "sampling": {k: v for k, v in s.sampling.items() if k != "from_model"},
        "seed": r.seed,
        "max_tokens": r.max_tokens,
        "stop": list(r.stop or []),
        "schema": None if schema is None else schema.kind,
        "think": r.think,
        "logprobs": r.logprobs,
        "prompt_tokens": s.prompt_tokens,
        "generated_tokens": s.generation_tokens,
        "finish_reason": fin.finish_reason,
        "ttft_s": s.ttft_s,
        "total_s": s.total_s,
        "replayed": s.replayed,
    }


def provenance(path: str | Path):
    """Every generation saved in a notebook, one row each (a DataFrame with pandas).

    Args:
        path: An ``.ipynb`` file.

    Returns:
        A pandas DataFrame (columns: ``cell``, then `record`'s fields) when pandas is
        installed, else a list of dicts.
    """
    nb = json.loads(Path(path).read_text())
    rows = []
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []) or []:
            found = (out.get("metadata") or {}).get(KEY)
            for rec in found.get("generations", []) if isinstance(found, dict) else []:
                rows.append({"cell": i, **rec})
    try:
        import pandas as pd
    except ImportError:
        return rows
    return pd.DataFrame(rows)
