"""Turn a resolved spec into ``(model, tokenizer)`` with mlx-lm. Worker thread only."""

from __future__ import annotations

from .. import config
from .gguf_tokenizer import bytes_as_sentencepiece
from .needs import portable, refusal
from .spec import ModelCannotRun, ModelNotFound, Spec, resolve

VARIANT_ENV = "MLX_NOTEBOOK_DEFAULT_VARIANT"


def on_cpu() -> bool:
    """Whether MLX computes on the CPU (no Metal GPU)."""
    import mlx.core as mx

    return mx.default_device().type == mx.DeviceType.cpu


def default_variant() -> str:
    """Precision of the default model: its own 4-bit weights (``"q"``) or float32.

    On Metal the quantized kernels are the fastest. On CPU, the GGUF's 4-bit weights
    when the fast path's quantized kernels are available (built on first use): they
    compute the same weights as the float32 copy, decode about 1.5x as fast in a
    fifth of the memory (see docs/performance.md); else float32, since MLX's own CPU kernel for
    4-bit is a scalar loop. ``MLX_NOTEBOOK_DEFAULT_VARIANT`` (``q4``/``q`` or
    ``f32``) overrides the choice. Worker thread only (it may build the extension).
    """
    v = config.get(VARIANT_ENV)
    if v in ("f32", "q", "q4"):
        return "q" if v == "q4" else v
    if not on_cpu():
        return "q"
    from ..cpu import ext as _ext

    return "q" if _ext.load() is not None else "f32"


def load_spec(spec: str):
    """Load ``spec``; return ``(key, model, tokenizer, path)``.

    Raises:
        ModelNotFound: A hub id that could not be fetched (one clear line).
        ModelCannotRun: A model whose layers fail on this device (one clear line).
    """
    from mlx_lm import load

    s = resolve(spec)
    if s.kind in ("default", "gguf"):
        from .default import default_gguf
        from .gguf import convert_gguf

        src = default_gguf() if s.kind == "default" else s.path
        path = convert_gguf(src, variant=s.variant or default_variant())
    elif s.kind == "dir":
        path = s.path
    else:
        path = None
    try:
        if path is not None:
            model, tok = load(str(path))
        else:
            model, tok = _load_hub(s)
            path = _hub_dir(s.key)
    except SystemExit as exc:  # a model module that exits at import (olmo without its package)
        code = (str(exc.code).strip().splitlines() or ["none"])[0][:80]
        why = refusal(s.key) or f"mlx-lm exited while importing its model (exit code {code})"
        raise ModelCannotRun(s.key, why.removeprefix(f"{s.key}: ")) from None
    bytes_as_sentencepiece(tok)  # stray bytes streamed as they decode
    portable(model)  # bitnet's Metal-only layers, where there is no Metal
    _fit_dtype(model)
    _probe(s.key, model)
    return s.key, model, tok, path


def _probe(key: str, model) -> None:
    """One token through the model, so a model that cannot run here fails at load.

    The pass also measures the logits' width (`registry.describe` reads it).

    Some layers exist for one back-end only (bitnet's and muse_spark's Metal kernels):
    such a model is refused in one line, before any job prefills, and the registry
    refuses it at submit from then on.
    """
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    try:
        logits = model(mx.array([[0]]), cache=make_prompt_cache(model))
        mx.eval(logits)
    except Exception as exc:  # noqa: BLE001 - whatever it is, this model cannot run here
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ModelCannotRun(key, f"cannot run on {mx.default_device()}: {line}") from None
    # The logits' width, measured: configs name it differently (phixtral's num_vocab).
    object.__setattr__(model, "_mlxnb_logits", int(logits.shape[-1]))


def _hub_dir(repo: str):
    """The local snapshot `mlx_lm.load` just used (for its generation_config.json)."""
    try:
        from mlx_lm.utils import _download

        return _download(repo, allow_patterns=["*.json"])
    except Exception:  # noqa: BLE001 - only the model's sampling defaults are lost
        return None


def _load_hub(s: Spec):
    from mlx_lm import load

    try:
        return load(s.key)
    except Exception as exc:  # hub errors are long chains; say it in one line
        reason = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise ModelNotFound(s.key, reason) from None


def _fit_dtype(model) -> None:
    """On the CPU: float32 weights, and the fast path (`mlx_notebook.cpu`, imported only here)."""
    if not on_cpu():
        return  # GPUs have native kernels for every dtype; nothing of cpu/ is imported
    import mlx.core as mx
    import mlx.nn as nn

    from .. import cpu
    from ..cpu.quant import keeps_scales

    # float16/bfloat16 compute is 10-40x slower on x86 CPUs: run in float32 there. The
    # quantized layers' scales are left for `cpu.install`: float16 where exact.
    model.apply(
        lambda a: a.astype(mx.float32) if mx.issubdtype(a.dtype, mx.floating) else a,
        lambda m, k, v: nn.Module.valid_parameter_filter(m, k, v) and not keeps_scales(m, k),
    )
    mx.eval(model.parameters())
    changes = cpu.install(model)
    object.__setattr__(model, "_mlxnb_fast", changes)  # not a parameter: kept off the tree
