"""Long prompts' KV state on disk: after a kernel restart, only what is new is prefilled.

A long prompt (a system prompt, a document a chat is about, a template's shared
prefix) is saved once with mlx-lm's ``save_prompt_cache`` into a folder of its model
(keyed by the hash of the model's files and the precision loaded), and a size-bounded
LRU keeps the folder small. `best` finds the saved state sharing the longest prefix
with a new prompt; the engine loads it when its memory holds nothing as long. Only
caches that rewind to any prefix (plain KV caches) are saved: a sliding window or a
recurrent state could not be trimmed back exactly, so it is never saved. Worker
thread only. A folder it cannot write means nothing is saved (said once).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("mlx_notebook")

MIN_TOKENS = 256  # shorter prompts prefill faster than their state loads
BUDGET_BYTES = 2 * 2**30  # the folder's size, per model, before the least used go


class DiskPrompts:
    """One model's saved prompt states: an index of their tokens, and their files.

    Args:
        folder: This model's folder (created when the first state is saved, owner-only:
            the states and their token ids are the conversations).
        budget: Most bytes kept.
        enabled: Asked at each save: whether saving is on now (the result cache's
            setting, which may change).
    """

    def __init__(
        self, folder: str | os.PathLike, budget: int = BUDGET_BYTES, enabled=lambda: True
    ) -> None:
        self.folder = Path(folder)
        self.budget = budget
        self.enabled = enabled
        self._index: dict[str, dict] | None = None
        self.off: str | None = None

    @property
    def index(self) -> dict[str, dict]:
        """File name to ``{"tokens": [...], "bytes": n, "used": epoch}``."""
        if self._index is None:
            try:
                self._index = json.loads((self.folder / "index.json").read_text())
            except (OSError, ValueError):
                self._index = {}
        return self._index

    def best(self, tokens: list[int], limit: int) -> tuple[str | None, int]:
        """The saved state sharing the longest prefix with ``tokens`` (at most ``limit``)."""
        best, best_len = None, 0
        for name, entry in self.index.items():
            saved = entry.get("tokens") if isinstance(entry, dict) else None
            if not isinstance(saved, list):
                continue  # a damaged index entry: as if it were not there
            n = 0
            for a, b in zip(saved, tokens[:limit]):
                if a != b:
                    break
                n += 1
            if n >= MIN_TOKENS and n > best_len and (self.folder / name).is_file():
                best, best_len = name, n
        return best, best_len

    def load(self, name: str, model):
        """The saved state ``name`` as a `CachedSequence` of ``model`` (None if unreadable)."""
        from mlx_lm.models.cache import load_prompt_cache

        from .sequence import CachedSequence

        try:
            cache = load_prompt_cache(str(self.folder / name))
            entry = self.index[name]
            seq = CachedSequence(model, cache, entry["tokens"])
            if not seq.consistent() or not seq.rewinds_anywhere:
                raise ValueError("its caches do not hold its tokens")
        except Exception as exc:  # noqa: BLE001 - a damaged file: prefill as usual
            log.warning("mlx_notebook: a saved prompt state could not be read (%s)", exc)
            return None
        entry["used"] = time.time()
        self._write_index()
        return seq

    def save(self, seq) -> bool:
        """Save ``seq``'s state if its prompt is long and its caches rewind anywhere."""
        tokens = list(seq.tokens)
        if self.off or not self.enabled() or len(tokens) < MIN_TOKENS:
            return False
        if not seq.rewinds_anywhere:
            return False
        name = hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:32] + ".safetensors"
        if name in self.index and (self.folder / name).is_file():
            return False
        if any(e["tokens"][: len(tokens)] == tokens for e in self.index.values()):
            return False  # a longer saved state holds it already (it trims back)
        from mlx_lm.models.cache import save_prompt_cache

        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = self.folder / f".{name}.{os.getpid()}.safetensors"
            save_prompt_cache(str(tmp), roomy(seq.cache), {"tokens": json.dumps(tokens)})
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.folder / name)
        except Exception as exc:  # noqa: BLE001 - a full disk, a read-only folder
            self.off = f"cannot save prompt states in {self.folder} ({exc})"
            log.warning("mlx_notebook: %s", self.off)
            return False
        size = (self.folder / name).stat().st_size
        self._index = None  # another kernel may have saved states meanwhile: merge them
        self.index[name] = {"tokens": tokens, "bytes": size, "used": time.time()}
        self._evict()
        self._write_index()
        return True

    def _evict(self) -> None:
        for name in [n for n, e in self.index.items() if not isinstance(e, dict)]:
            del self.index[name]
        total = sum(e.get("bytes", 0) for e in self.index.values())
        for name in sorted(self.index, key=lambda n: self.index[n].get("used", 0)):
            if total <= self.budget:
                break
            total -= self.index.pop(name)["bytes"]
            (self.folder / name).unlink(missing_ok=True)

    def _write_index(self) -> None:
        try:
            tmp = self.folder / f".index.{os.getpid()}.json"
            tmp.write_text(json.dumps(self.index))
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.folder / "index.json")
        except OSError as exc:
            log.warning("mlx_notebook: the prompt states' index was not written (%s)", exc)


def roomy(cache: list) -> list:
    """``cache`` with room after its tokens in every plain KV layer, for saving.

    mlx-lm's `KVCache` saves its whole buffer and its offset. A buffer that ends at its
    last token (a prefill sized exactly) would, once loaded, grow at the first new token:
    a copy of the whole state in a fresh process, on the first turn's critical path. A
    step of room is saved instead (zeros), so the loaded state takes new tokens in place.
    """
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    out = []
    for c in cache:
        if type(c) is not KVCache or c.keys is None or c.keys.shape[2] - c.offset >= c.step:
            out.append(c)
            continue
        padded = KVCache()
        k, v = c.keys[..., : c.offset, :], c.values[..., : c.offset, :]
        room = [(0, 0), (0, 0), (0, c.step), (0, 0)]
        padded.keys, padded.values = mx.pad(k, room), mx.pad(v, room)
        padded.offset = c.offset
        out.append(padded)
    return out
