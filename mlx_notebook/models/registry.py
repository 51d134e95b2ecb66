"""Loaded models, cached by resolved spec, with an LRU limit. Loads on the worker."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .spec import ModelCannotRun
from .vocab import fingerprint


@dataclass
class LoadedModel:
    """A model ready to generate.

    Attributes:
        name: Canonical spec (absolute path, ``default`` or hub id).
        model: The mlx-lm model.
        tokenizer: mlx-lm's `TokenizerWrapper`.
        path: Where it was loaded from, if local.
        nbytes: Bytes of its parameters and of the CPU fast path's tables.
        dtype: Dtype of its first floating parameter, e.g. ``float32``.
        vocab_key: Fingerprint of the vocabulary, for draft compatibility.
        vocab_size: Tokens in the vocabulary.
        context_length: The context window from the model's config, or None.
        logits_size: Width of the model's output (may exceed ``vocab_size``).
        fast_path: Modules the CPU fast path swapped, e.g. ``["61 RMSNorm"]``.
        defaults: Sampling fields its ``generation_config.json`` sets
            (`generation.read_defaults`), for requests that leave them unset.
    """

    name: str
    model: Any
    tokenizer: Any
    path: str | None
    nbytes: int
    dtype: str
    vocab_key: str
    vocab_size: int
    context_length: int | None = None
    logits_size: int | None = None
    fast_path: list[str] = field(default_factory=list)
    defaults: dict = field(default_factory=dict)


class Registry:
    """Keeps up to ``max_loaded`` models; the least recently used goes first.

    `get` must run on the engine's worker thread (it loads with MLX); `peek`
    and `snapshot` are safe from any thread.

    Args:
        max_loaded: Most models kept at once (at least 2: a main and a draft).
        loader: ``spec -> (key, model, tokenizer, path)``; mlx-lm loading by default.
        on_evict: Called with each evicted or unloaded model's name (on the thread
            that evicts), so owners of per-model state can drop it.
    """

    def __init__(
        self,
        max_loaded: int = 2,
        loader: Callable | None = None,
        on_evict: Callable[[str], None] | None = None,
    ) -> None:
        if max_loaded < 1:
            raise ValueError("max_loaded: must be >= 1")
        self.max_loaded = max_loaded
        self.on_evict = on_evict
        self._loader = loader
        self._lock = threading.Lock()
        self._models: OrderedDict[str, LoadedModel] = OrderedDict()
        self._aliases: dict[str, str] = {}
        self._refused: dict[str, str] = {}  # key -> why it cannot run on this device

    def get(self, spec: str, pin: str | None = None, canonical: bool = False) -> LoadedModel:
        """Return the loaded model for ``spec``, loading it if needed.

        Args:
            spec: Model spec.
            pin: Name of a model that must not be evicted to make room.
            canonical: ``spec`` is a canonical name already (the engine resolved it at
                submit): do not resolve it again to look for another spelling.
        """
        found = self.peek(spec)
        if found is None and not canonical:
            found = self.peek(_canonical(spec))  # another spelling of a loaded model
        if found is not None:
            with self._lock:
                self._models.move_to_end(found.name)
                self._aliases[spec] = found.name
            return found
        loader = self._loader
        if loader is None:
            from .loader import load_spec as loader
        try:
            key, model, tok, path = loader(spec)
        except ModelCannotRun as exc:
            with self._lock:
                self._refused[exc.key] = str(exc)
            raise
        lm = describe(key, model, tok, path)
        with self._lock:
            self._models[key] = lm
            self._aliases[spec] = key
            gone = self._evict(keep={key, pin})
        self._forgotten(gone)
        return lm

    def register(self, name: str, model, tokenizer) -> LoadedModel:
        """Add an already built model under ``name``."""
        lm = describe(name, model, tokenizer, None)
        with self._lock:
            self._models[name] = lm
            self._aliases[name] = name
            gone = self._evict(keep={name})
        self._forgotten(gone)
        return lm

    def refused(self, key: str) -> str | None:
        """Why the model loaded as ``key`` cannot run on this device, if its load said so."""
        with self._lock:
            return self._refused.get(key)

    def loaded(self, spec: str) -> bool:
        """Whether ``spec``, in any spelling, names a loaded model."""
        return self.peek(spec) is not None or self.peek(_canonical(spec)) is not None

    def key_for(self, spec: str) -> str:
        """The name ``spec`` is (or would be) loaded under, without loading."""
        lm = self.peek(spec)
        return lm.name if lm is not None else _canonical(spec)

    def peek(self, spec: str | None) -> LoadedModel | None:
        """The loaded model for ``spec`` without loading, or None."""
        if spec is None:
            return None
        with self._lock:
            key = self._aliases.get(spec, spec)
            return self._models.get(key)

    def unload(self, spec: str | None = None) -> list[str]:
        """Forget one model (or all); return the names unloaded.

        A model refused at load (`refused`) may be tried again after this.
        """
        with self._lock:
            if spec is None:
                names = list(self._models)
                self._refused.clear()
            else:
                key = self._aliases.get(spec, spec)
                names = [key] if key in self._models else []
                self._refused.pop(key, None)
                self._refused.pop(_canonical(spec), None)
            for n in names:
                del self._models[n]
            self._aliases = {a: k for a, k in self._aliases.items() if k in self._models}
        self._forgotten(names)
        return names

    def clear(self) -> None:
        """Forget every model."""
        self.unload(None)

    def snapshot(self) -> list[dict[str, Any]]:
        """One dict per loaded model, most recently used last."""
        with self._lock:
            return [
                {
                    "name": m.name,
                    "path": m.path,
                    "memory_mb": round(m.nbytes / 2**20, 1),
                    "dtype": m.dtype,
                    "vocab_size": m.vocab_size,
                    "fast_path": m.fast_path,
                    "defaults": dict(m.defaults),
                }
                for m in self._models.values()
            ]

    def _evict(self, keep: set) -> list[str]:
        gone = []
        while len(self._models) > self.max_loaded:
            victim = next((n for n in self._models if n not in keep), None)
            if victim is None:
                break
            del self._models[victim]
            self._aliases = {a: k for a, k in self._aliases.items() if k != victim}
            gone.append(victim)
        return gone

    def _forgotten(self, names: list[str]) -> None:
        # Outside our lock: the hook may take its owner's locks.
        if not names:
            return
        if self.on_evict is not None:
            for n in names:
                self.on_evict(n)
        import gc

        import mlx.core as mx

        gc.collect()  # models sit in reference cycles (modules, closures)
        mx.clear_cache()


def _canonical(spec: str) -> str:
    from .spec import resolve

    try:
        return resolve(spec).key
    except (OSError, ValueError):
        return spec  # the loader reports the problem


_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


def _config_context(path) -> int | None:
    # Model classes keep only the config fields they use; the file has them all.
    if path is None:
        return None
    import json
    from pathlib import Path

    try:
        cfg = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    cfg = {**cfg.get("text_config", {}), **cfg}
    return next((cfg[k] for k in _CONTEXT_KEYS if isinstance(cfg.get(k), int)), None)


def describe(name: str, model, tokenizer, path) -> LoadedModel:
    """Measure a model for the registry."""
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    params = tree_flatten(model.parameters())
    nbytes = sum(v.nbytes for _, v in params)
    if getattr(model, "_mlxnb_fast", None):
        from ..cpu.fast import buffer_bytes

        nbytes += buffer_bytes(model)
    # the dtype it computes in: the CPU's quantized scales may be narrower (`cpu.quant`)
    floats = [(k, v) for k, v in params if "float" in str(v.dtype)]
    narrow = (".scales", ".biases") if hasattr(model, "_mlxnb_fast") else ()
    kept = [v for k, v in floats if not (narrow and k.endswith(narrow))]
    kept = kept or [v for _, v in floats]
    dtype = str(kept[0].dtype).split(".")[-1] if kept else "?"
    if hasattr(model, "named_modules"):  # quantized layers: their widths first ("4/8-bit")
        quantized = (nn.QuantizedLinear, nn.QuantizedEmbedding)
        bits = sorted({m.bits for _, m in model.named_modules() if isinstance(m, quantized)})
        if bits:
            dtype = f"{'/'.join(map(str, bits))}-bit, {dtype}"
    vocab = tokenizer.get_vocab()
    args = getattr(model, "args", None)
    context = getattr(args, "max_position_embeddings", None) or _config_context(path)
    return LoadedModel(
        name,
        model,
        tokenizer,
        None if path is None else str(path),
        nbytes,
        dtype,
        fingerprint(vocab),
        len(vocab),
        context_length=int(context) if isinstance(context, int) and context > 0 else None,
        logits_size=getattr(model, "_mlxnb_logits", None)  # measured at load (`loader`)
        or getattr(args, "vocab_size", None)
        or getattr(model, "vocab_size", None),
        fast_path=list(getattr(model, "_mlxnb_fast", None) or []),
        defaults=_defaults(name, path),
    )


def _defaults(name: str, path) -> dict:
    # The bundled GGUF carries no generation_config.json: it gets its authors' values.
    from .generation import read_defaults
    from .spec import DEFAULT

    if name == DEFAULT or name.startswith(DEFAULT + ":"):  # default:q4, default:f32
        from .default import SAMPLING

        return dict(SAMPLING)
    return read_defaults(path)
