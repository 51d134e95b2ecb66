"""What a model family's mlx-lm layers need that this machine may lack, and the remedy.

- **Metal, for bitnet's ternary layers: made portable.** mlx-lm's ``BitLinear``
  multiplies by its packed ternary weights in a Metal kernel and nothing else
  (``mx.fast.metal_kernel``). Every weight of such a layer is -1, 0 or 1 times one
  scale: that is MLX's affine 2-bit quantization exactly, with ``q = t + 1``, scale
  ``s`` and bias ``-s``. Each layer becomes an ``nn.QuantizedLinear`` holding the same
  values in the same 2 bits a weight (plus a scale and a bias per group), which every
  back-end runs natively (`portable`). Where Metal runs the kernel, nothing changes.
- **Metal, for mlx-lm's fused kernels (``mlx_lm.kernels``, no other back-end), or a
  Python package that is not installed: refused at submit**, from the model's files
  (`refusal`): its config's ``model_type`` and its mlx-lm module's source.
"""

from __future__ import annotations

import ast
import json
import sys
from functools import lru_cache
from pathlib import Path

# The kernel's packing: byte [r, i] holds the weights of rows r + k * out/4, k = 0..3,
# two bits each, lowest first; a field's value minus one is the weight.
_FIELDS = 4
_GROUPS = (128, 64, 32)  # MLX's affine group sizes, largest first (fewest scales)


def metal_runs_kernels() -> bool:
    """Whether MLX computes on a Metal GPU, where mlx-lm's Metal kernels run."""
    import mlx.core as mx

    return mx.metal.is_available() and mx.default_device().type == mx.DeviceType.gpu


def portable(model) -> int:
    """Replace every ``BitLinear`` of ``model`` where Metal is absent. Worker thread only.

    Args:
        model: A loaded mlx-lm model.

    Returns:
        How many layers were replaced (0 on Metal, and for every model without them).
    """
    # No bitnet model was built unless mlx-lm imported its layer (a dict lookup, no import).
    layers = sys.modules.get("mlx_lm.models.bitlinear_layers")
    if layers is None or metal_runs_kernels():
        return 0
    import mlx.core as mx
    from mlx.utils import tree_unflatten

    # The CPU computes in float32 (`loader._fit_dtype`): scales too, not the model's dtype.
    dtype = mx.float32 if mx.default_device().type == mx.DeviceType.cpu else None
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, layers.BitLinear)]
    count = len(found)
    while found:  # one layer's unpacking at a time, its packed weights freed: a low peak
        name, layer = found.pop()
        new = ternary_layer(layer, dtype)
        mx.eval(new.parameters())
        model.update_modules(tree_unflatten([(name, new)]))
        del layer, new
    return count


def unpacked(layer):
    """The layer's ternary weights, ``(out_features, in_features)`` int8 in -1..2."""
    import mlx.core as mx

    rows = layer.out_features // _FIELDS  # the kernel's own stride (out_features / 4)
    packed = layer.weight[:rows].astype(mx.uint8)
    fields = [(packed >> (2 * k)) & 3 for k in range(_FIELDS)]
    return mx.concatenate(fields, axis=0).astype(mx.int8) - 1


def scale(layer):
    """The layer's one scale as float32: the kernel divides by it unless told to multiply."""
    import mlx.core as mx

    s = layer.weight_scale.reshape(-1)[:1].astype(mx.float32)
    return 1.0 / s if layer.invert_weight_scales else s


def ternary_layer(layer, dtype=None):
    """An ``nn.QuantizedLinear`` (2 bits) with ``layer``'s values, or a dense one.

    A layer whose inputs no group size divides gets dense weights ``t * s``.

    Args:
        layer: A ``BitLinear``.
        dtype: The new layer's scales and biases (or dense weights); None: the layer's
            own scale's dtype (an inverted scale's ``1 / s`` is then rounded to it,
            where the Metal kernel keeps float32).
    """
    import mlx.core as mx
    import mlx.nn as nn

    if layer.out_features % _FIELDS:
        raise ValueError(f"BitLinear of {layer.out_features} rows: not a multiple of 4")
    dtype = dtype or layer.weight_scale.dtype
    t, s = unpacked(layer), scale(layer)
    out, inp = t.shape
    bias = "bias" in layer and layer.bias is not None
    group = next((g for g in _GROUPS if inp % g == 0), None)
    if group is None:
        new = nn.Linear(inp, out, bias=bias)
        new.weight = (t.astype(mx.float32) * s).astype(dtype)
    else:
        new = nn.QuantizedLinear(inp, out, bias=bias, group_size=group, bits=2)
        q = (t + 1).astype(mx.uint32).reshape(out, inp // 16, 16)
        new.weight = (q << (2 * mx.arange(16, dtype=mx.uint32))).sum(axis=-1).astype(mx.uint32)
        new.scales = mx.full((out, inp // group), s.astype(dtype))
        new.biases = -new.scales
    if bias:
        new.bias = layer.bias
    return new


def refusal(key: str) -> str | None:
    """Why the model loaded as ``key`` cannot run here, known from its files; else None.

    Its mlx-lm module (or a module of mlx-lm's models it imports) either takes functions
    from ``mlx_lm.kernels``, which run in every layer and are Metal kernels only, or
    imports a package that is not installed, unguarded or with a guard that exits
    (olmo's). Read from the config's ``model_type`` and the module's source: no import
    of mlx-lm, no MLX work (any thread). Everything else is measured when the model
    loads (one token through it, `loader._probe`).

    Args:
        key: A canonical model name (`Spec.key`): a directory's absolute path or a hub id.

    Returns:
        One line naming the model and what it lacks; None when nothing is known to be
        missing, or when its files do not say (a hub id not yet fetched, a GGUF file).
    """
    cfg = _config(key)
    kind = cfg.get("model_type") if isinstance(cfg, dict) else None
    if not isinstance(kind, str):
        return None
    kernels, imports = _needs(kind)
    packages = [(name, hint) for name, hint in imports if not _installed(name)]
    if packages:
        names, hints = zip(*packages)
        hint = next((h for h in hints if h), "")
        return (
            f"{key}: mlx-lm's {kind!r} layers import {', '.join(names)}, which is not "
            f"installed" + (f" (mlx-lm says: {hint})" if hint else "")
        )
    if kernels and not metal_runs_kernels():
        import mlx.core as mx

        return (
            f"{key}: cannot run on {mx.default_device()}: its {kind!r} layers run "
            f"mlx-lm's Metal kernels ({', '.join(kernels)}), which have no other back-end"
        )
    return None


def _config(key: str) -> dict | None:
    """The config.json of a model directory, or of a hub id in the local cache."""
    path = Path(key)
    if path.is_absolute():
        path = path / "config.json"  # a GGUF file's key: no such file
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(key, "config.json")
        except Exception:  # noqa: BLE001 - not a hub id (default:q4): its files say nothing
            return None
        path = Path(found) if isinstance(found, str) else None
    try:
        return json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None


def _models_dir() -> Path:
    """mlx-lm's ``models`` folder, found without importing mlx-lm."""
    import importlib.util

    found = importlib.util.find_spec("mlx_lm")
    places = found.submodule_search_locations if found is not None else None
    return Path(next(iter(places))) / "models" if places else Path("/nonexistent")


_KERNELS = "mlx_lm.kernels"


def _absolute(level: int, module: str | None) -> str:
    """The module an import in ``mlx_lm/models/<name>.py`` names, spelled in full."""
    base = {0: "", 1: "mlx_lm.models", 2: "mlx_lm"}.get(level)
    if base is None:
        return ""
    return ".".join(p for p in (base, module) if p)


def _is_kernels(name: str) -> bool:
    return name == _KERNELS or name.startswith(_KERNELS + ".")


def fused_kernels(model_type: str) -> tuple[str, ...]:
    """The names from ``mlx_lm.kernels`` that mlx-lm's ``model_type`` module imports, sorted."""
    return _needs(model_type)[0]


@lru_cache(maxsize=64)
def _needs(model_type: str, seen: frozenset = frozenset()) -> tuple[tuple, tuple]:
    """``model_type``'s fused kernels, and the packages it cannot load without.

    Returns:
        The kernels' names, and ``(package, mlx-lm's hint or "")`` for each package
        its module (or another model module it needs) imports at its top level, with
        no guard or a guard that exits or raises. Whether those are installed is
        asked at each check (`_installed`), so an install is seen without a restart.

    Imports of other model modules are followed (``from .x import ...``,
    ``from . import x``): anywhere for the kernels, at the top level for packages.
    """
    try:
        tree = ast.parse((_models_dir() / f"{model_type}.py").read_text())
    except (OSError, SyntaxError, ValueError):
        return (), ()  # a remapped name (mlx-lm's MODEL_REMAPPING): measured at load
    names: set[str] = set()
    follow: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):  # import mlx_lm.kernels[.x]
            names.update(a.name for a in node.names if _is_kernels(a.name))
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        where = _absolute(node.level, node.module)
        if _is_kernels(where):  # from ..kernels[.x] import f
            names.update(a.name for a in node.names)
        elif where == "mlx_lm":  # from .. import kernels
            names.update(a.name for a in node.names if a.name == "kernels")
        elif where == "mlx_lm.models":  # from . import other
            follow.update(a.name for a in node.names)
        elif where.startswith("mlx_lm.models."):  # from .other import X
            follow.add(where.split(".")[2])
    required, others = _required(tree.body)
    for other in sorted(follow - seen - {model_type}):
        more = _needs(other, seen | {model_type})
        names.update(more[0])
        if other in others:
            required.update(more[1])
    return tuple(sorted(names)), tuple(sorted(required))


def _required(body: list) -> tuple[set[tuple[str, str]], set[str]]:
    """What a module's top level cannot import without: packages and model modules.

    An import inside ``try`` counts only when a handler's own statements exit or raise
    (the module cannot load without it); the hint is a string such a handler prints.

    Returns:
        ``{(package, hint)}`` of absolute imports, and the names of mlx-lm's other
        model modules imported (``from .x import``, ``from . import x``).
    """
    packages, models = set(), set()
    for node in body:
        stmts, hint = [node], ""
        if isinstance(node, ast.Try):
            fatal = [h for h in node.handlers if any(_fatal(st) for st in h.body)]
            if not fatal:
                continue  # optional: the module loads without it
            hint = next((p for h in fatal for st in h.body if (p := _printed(st))), "")
            stmts = node.body
        for st in stmts:
            if isinstance(st, ast.ImportFrom) and st.level == 1:  # another model module
                models.update([st.module] if st.module else [a.name for a in st.names])
            elif isinstance(st, ast.Import) or isinstance(st, ast.ImportFrom) and not st.level:
                packages.update((top, hint) for top in _tops(st))
    return packages, {m.split(".")[0] for m in models}


def _installed(package: str) -> bool:
    """Whether ``package`` can be imported now (an install since the last check counts)."""
    import importlib
    import importlib.util

    if package in sys.modules:
        return True
    importlib.invalidate_caches()
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a finder that fails: let the load say what is wrong
        return True


def _tops(st) -> list[str]:
    """The top-level packages an absolute import statement names."""
    if isinstance(st, ast.Import):
        return [a.name.split(".")[0] for a in st.names]
    return [st.module.split(".")[0]] if st.module else []


def _fatal(st) -> bool:
    """Whether a handler's statement ends the import: ``raise``, ``sys.exit(...)``."""
    if isinstance(st, ast.Raise):
        return True
    call = st.value if isinstance(st, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return False
    f = call.func
    return (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) in (
        "exit",
        "quit",
        "_exit",
    )


def _printed(st) -> str:
    """The constant string a ``print(...)`` statement prints, or ""."""
    call = st.value if isinstance(st, ast.Expr) else None
    if (
        isinstance(call, ast.Call)
        and getattr(call.func, "id", "") == "print"
        and call.args
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
    ):
        return call.args[0].value.strip().splitlines()[0][:120]
    return ""
