"""What determines a result: the model's files, the prompt's token ids, every sampling field.

A result is replayed only under a key made of everything that determines its text and
nothing else. In it: the model's identity (a hash of its config, tokenizer and weight
files, `model_identity`), the precision actually loaded, the prompt's token ids after
the template, the sampling values in force and the seed, the token budget, stop
strings, the schema, the thinking switch, the recorded probabilities and this format's
version. Not in it: speculation, batching and the CPU fast path, which do not change
the text (tests prove it for every path); but the fast path's 8-bit prefill inputs do
(`mlx_notebook.cpu.quant.prefill_pass`), so a quantized model's precision says them.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

FORMAT_VERSION = 1  # bump when what a replay holds changes
# Files whose bytes make a model what it is (weights, config, tokenizer, templates).
MODEL_FILES = (
    "*.safetensors", "*.gguf", "*.npz", "config.json", "generation_config.json",
    "tokenizer*.json", "tokenizer.model", "special_tokens_map.json", "*.jinja",
    "chat_template*",
)  # fmt: skip
_digests: dict[tuple, str] = {}
_lock = threading.Lock()
hashed = [0]  # files actually read and hashed in this process (tests count them)


def _memo_file() -> Path:
    from ... import config

    return config.cache_root() / "digests.json"


def _load_memo() -> None:
    """The digests computed by earlier processes (a restart hashes no weights again)."""
    if _digests.get(("loaded",)):
        return
    _digests[("loaded",)] = "1"
    try:
        saved = json.loads(_memo_file().read_text())
    except (OSError, ValueError):
        return
    for row in saved if isinstance(saved, list) else []:
        if isinstance(row, list) and len(row) == 4:
            _digests[tuple(row[:3])] = row[3]


def _save_memo() -> None:
    rows = [[*k, v] for k, v in _digests.items() if len(k) == 3]
    try:
        path = _memo_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".digests.{os.getpid()}.json")
        tmp.write_text(json.dumps(rows[-2000:]))
        os.replace(tmp, path)
    except OSError:  # not remembered across restarts: computed again next time
        pass


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, remembered per path, size and modification time.

    Remembered across processes too (``$MLX_NOTEBOOK_CACHE/digests.json``), so a kernel
    restart does not read a model's weights again to know them.
    """
    st = path.stat()
    memo = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _lock:
        _load_memo()
        found = _digests.get(memo)
    if found is not None:
        return found
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    digest = h.hexdigest()
    with _lock:
        hashed[0] += 1
        _digests[memo] = digest
        _save_memo()
    return digest


def model_identity(folder: str | os.PathLike | None) -> str | None:
    """A hash of the model files in ``folder`` (None: no folder, nothing to key on)."""
    if folder is None or not Path(folder).is_dir():
        return None
    root = Path(folder)
    files = sorted({p for pattern in MODEL_FILES for p in root.glob(pattern) if p.is_file()})
    if not files:
        return None
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.name}\0{file_digest(p)}\0".encode())
    return h.hexdigest()


def greedy(sampling: dict) -> bool:
    """Whether these values in force decode greedily (as `Request.greedy` reads them)."""
    from ..request import MIN_TEMPERATURE

    return (sampling.get("temperature") or 0.0) < MIN_TEMPERATURE


def deterministic(sampling: dict, seed: int | None) -> bool:
    """Whether the text is determined: greedy decoding, or sampling with a seed."""
    return greedy(sampling) or seed is not None


def _sampling(sampling: dict) -> dict:
    values = {k: v for k, v in sorted(sampling.items()) if k != "from_model"}
    if greedy(sampling):  # the filters and the temperature change nothing then
        values = {"greedy": True, "repetition_penalty": values.get("repetition_penalty")}
    return values


# A server request's fields that do not change the text (speculation, transport).
NOT_DETERMINING = {"stream", "stream_options", "draft_model", "num_draft_tokens"}


def server_key(base_url: str, body: dict) -> str:
    """The key of a server's result: its URL (no credentials) and the request's body."""
    from ...origin import clean_url

    fields = {
        "format": FORMAT_VERSION,
        "server": clean_url(base_url),
        "body": {k: v for k, v in body.items() if k not in NOT_DETERMINING},
    }
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def result_key(identity: str, precision: str, prompt: list[int], request, sampling: dict,
               max_tokens: int) -> str:  # fmt: skip
    """The key of a local result (a hex digest).

    Greedy decoding ignores the sampling filters and the seed: they are left out of a
    greedy key, so a greedy request hits whatever its filters say.

    Args:
        identity: `model_identity` of the loaded model.
        precision: What was loaded (``"float32"``, ``"4/8-bit, float32"``...).
        prompt: The prompt's token ids after the template (a branch's prefix included).
        request: The `Request` (its stop strings, seed, schema, think and logprobs).
        sampling: The sampling values in force (`defaults.in_force`).
        max_tokens: The budget after fitting the context window.
    """
    schema = request.constraint
    branch = request.branch_from
    fields = {
        "format": FORMAT_VERSION,
        "model": identity,
        "precision": precision,
        "prompt": list(prompt),
        "sampling": _sampling(sampling),
        "seed": None if greedy(sampling) else request.seed,
        "max_tokens": max_tokens,
        "stop": list(request.stop or []),
        "chat": bool(request.chat),  # the reasoning split follows it, beside the ids
        "schema": None
        if schema is None
        else [schema.kind, schema.grammar, list(schema.choices or []), bool(schema.fast)],
        "think": request.think,
        "logprobs": request.logprobs,
        "branch": None if branch is None else [branch.token, branch.avoid],
    }
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def about_model(main, identify: bool = False) -> dict:
    """What a loaded model is, for a result's key and provenance.

    Remembered on the loaded model itself (a model loaded again is described again).

    Args:
        main: The loaded model.
        identify: Hash its files too (`model_identity`; seconds for a large model the
            first time, then remembered): only where the result cache needs it.
    """
    from ..decoding.device import prefill_8_bit

    found = main.__dict__.get("_mlxnb_about")
    if found is None:
        found = {
            "name": main.name,
            "hash": None,
            "precision": getattr(main, "dtype", None),
            "device": _device(),
            "versions": _versions(),
        }
        main.__dict__["_mlxnb_about"] = found
    if identify and found["hash"] is None and not found.get("hashed"):
        try:
            found["hash"] = model_identity(getattr(main, "path", None))
        except OSError:
            found["hash"] = None
        found["hashed"] = True
    about = {k: v for k, v in found.items() if k != "hashed"}
    precision = about["precision"]
    if precision and "-bit" in precision and prefill_8_bit(getattr(main, "model", None)):
        about["precision"] = f"{precision}, prefill on 8-bit inputs"  # another text
    return about


def _device() -> str:
    import mlx.core as mx

    return str(mx.default_device())


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("mlx", "mlx-lm", "mlx_notebook"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out
