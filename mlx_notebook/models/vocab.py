"""Vocabulary fingerprints, for draft/main compatibility. Pure Python, any thread."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path


def fingerprint(vocab: dict[str, int]) -> str:
    """A stable digest of a token -> id mapping."""
    digest = hashlib.sha1()
    for tok, i in sorted(vocab.items(), key=lambda kv: kv[1]):
        digest.update(f"{i}\t{tok}\n".encode())
    return digest.hexdigest()


def spec_fingerprint(spec: str) -> str | None:
    """The vocabulary fingerprint of a local model without loading it, or None.

    Directories are read directly; ``.gguf`` files and ``default`` only once
    converted (their cache holds a ``tokenizer.json``). Hub ids give None.
    """
    from .spec import resolve

    try:
        s = resolve(spec)
    except (OSError, ValueError):
        return None
    if s.kind == "dir":
        path = s.path / "tokenizer.json"
    elif s.kind in ("gguf", "default"):
        path = _converted_tokenizer(s)
    else:
        return None
    if path is None or not path.is_file():
        return None
    st = path.stat()
    return _file_fingerprint(str(path), st.st_size, st.st_mtime_ns)


def spec_has_chat_template(spec: str) -> bool | None:
    """Whether a local model has a chat template, from its files; None when unknown."""
    from .spec import resolve

    try:
        s = resolve(spec)
    except (OSError, ValueError):
        return None
    if s.kind == "dir":
        folder = s.path
    elif s.kind in ("gguf", "default"):
        tok = _converted_tokenizer(s)
        if tok is None:
            return None
        folder = tok.parent
    else:
        return None
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    try:
        cfg = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return None
    return bool(cfg.get("chat_template"))


def _converted_tokenizer(s) -> Path | None:
    from .default import default_gguf
    from .gguf import cache_path

    try:
        src = default_gguf() if s.kind == "default" else s.path
    except FileNotFoundError:
        return None
    for variant in ("f32", "q"):  # both variants share one tokenizer
        p = cache_path(src, variant) / "tokenizer.json"
        if p.is_file():
            return p
    return None


@lru_cache(maxsize=32)
def _file_fingerprint(path: str, _size: int, _mtime: int) -> str | None:
    from tokenizers import Tokenizer

    try:
        return fingerprint(Tokenizer.from_file(path).get_vocab(with_added_tokens=True))
    except Exception:
        return None
