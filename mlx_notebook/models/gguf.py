"""GGUF -> MLX model directory (the architectures in `gguf_archs`), cached, written atomically.

``mx.load`` already returns GGUF weights in MLX's quantized layout. For the llama
architecture (Llama 3, SmolLM) llama.cpp stores Q/K rows in
interleaved-RoPE order, so we set ``rope_traditional`` and keep them as they are
(measured: perplexity 7.9 this way, 398 un-permuted with the default RoPE); its
converter leaves Qwen's rows as they are, in mlx-lm's order.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path

from .. import config
from .gguf_archs import (
    ARCHS,
    NORM_SHIFT,
    config_of,
    in_features,
    kind_of,
    rename,
    stack_experts,
    unfuse_qkv,
)
from .gguf_blocks import NEEDS_BLOCKS, read_blocks
from .gguf_blocks import TYPES as BLOCK_TYPES
from .gguf_rope import llama3_scaling
from .gguf_tokenizer import write_tokenizer

CACHE_ENV = "MLX_NOTEBOOK_CACHE"
VERSION = "4"  # bump when the output format changes (3: Q4_K at 4 bits; 4: Q5 at 5, Q6_K at 6)
TMP_TAG = "pid"
_TMP_OWNER = re.compile(rf"^\..+-[0-9a-f]{{16}}\.{TMP_TAG}(\d+)\.")
_TMP_LEGACY = re.compile(r"^\..+-[0-9a-f]{16}\.")


def cache_root() -> Path:
    """``$MLX_NOTEBOOK_CACHE`` or ``~/.cache/mlx_notebook``."""
    return config.cache_root()


def cache_path(gguf: Path, variant: str, version: str = VERSION) -> Path:
    """Where the conversion of ``gguf`` lives: keyed by path, size and mtime."""
    gguf = Path(gguf).resolve()
    st = gguf.stat()
    ident = f"{gguf}|{st.st_size}|{st.st_mtime_ns}|{variant}|{version}"
    key = hashlib.sha1(ident.encode()).hexdigest()[:16]
    return cache_root() / "gguf" / f"{gguf.stem}-{variant}-{key}"


def convert_gguf(gguf: str | Path, variant: str = "q") -> Path:
    """Convert once and return the MLX model directory (a cache hit is free).

    Args:
        gguf: Path to a ``.gguf`` file of an architecture in `ARCHS`.
        variant: ``"q"`` keeps each tensor quantized in MLX's layout (Q4_0, Q4_1
            and Q4_K at 4 bits, Q5 at 5, Q8_0 at 8; Q6_K re-quantized to 6 bits, Q2_K
            and Q3_K to 8: `gguf_blocks`);
            ``"f32"`` dequantizes everything to float32 (fastest on x86 CPUs with
            OpenBLAS).

    Raises:
        ValueError: For other architectures (the message names it).
    """
    out = cache_path(Path(gguf), variant)
    if out.parent.is_dir():
        remove_stale(out.parent)  # on a cache hit too: leftovers can be hundreds of MB
        for old in range(1, int(VERSION)):  # this file's conversions by older versions
            shutil.rmtree(cache_path(Path(gguf), variant, str(old)), ignore_errors=True)
    if (out / "config.json").is_file():
        if not _broken(out):
            return out
        shutil.rmtree(out, ignore_errors=True)  # an older converter's: converted again
    out.parent.mkdir(parents=True, exist_ok=True)
    # The owner's pid in the name lets a later process tell a live conversion from
    # the leftovers of a killed one.
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{TMP_TAG}{os.getpid()}.", dir=out.parent))
    try:
        _convert_into(Path(gguf), tmp, variant)
        try:
            os.rename(tmp, out)  # atomic: readers see all or nothing
        except OSError:
            if not (out / "config.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process won the race
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def remove_stale(folder: Path, legacy_age_s: float = 3600) -> list[Path]:
    """Delete temporary conversion folders whose owner process is gone.

    Args:
        folder: The conversion cache folder.
        legacy_age_s: Folders without an owner pid (older versions) go once this old.

    Returns:
        The folders removed.
    """
    import time

    removed = []
    for d in folder.glob(".*"):
        if not d.is_dir():
            continue
        m = _TMP_OWNER.search(d.name)
        try:
            if m is not None:
                stale = not _alive(int(m.group(1)))
            elif _TMP_LEGACY.match(d.name):
                stale = time.time() - d.stat().st_mtime > legacy_age_s
            else:
                continue  # not ours
        except OSError:
            continue
        if stale:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _convert_into(gguf: Path, out: Path, variant: str) -> None:
    import mlx.core as mx

    try:
        types = _tensor_types(gguf)
    except (OSError, ValueError, KeyError, struct.error, UnicodeDecodeError):
        types = {}  # a header this reader does not know: MLX's reader says what it can
    _refuse_unreadable(types, gguf)
    if NEEDS_BLOCKS & set(types.values()):  # K-quants and Q5 kept quantized, or read at all
        weights, md = read_blocks(gguf)
    else:
        weights, md = mx.load(str(gguf), return_metadata=True)
    arch = str(md.get("general.architecture"))
    if arch not in ARCHS:
        raise ValueError(
            f"GGUF architecture {arch!r} is not supported: only "
            f"{', '.join(map(repr, ARCHS))} can be converted ({gguf.name})"
        )
    rope_freqs = weights.pop("rope_freqs.weight", None)
    long_short = [weights.pop(f"rope_factors_{k}.weight", None) for k in ("long", "short")]
    kind = kind_of(arch, md)
    weights = unfuse_qkv(stack_experts(weights), md, kind)
    weights = {rename(k, kind): v for k, v in weights.items()}
    if arch in NORM_SHIFT:
        for k in [k for k in weights if k.endswith("norm.weight")]:
            weights[k] = weights[k].astype(mx.float32) - NORM_SHIFT[arch]
    config = config_of(md, weights, arch, kind)
    if rope_freqs is not None:  # Llama 3.1/3.2: their RoPE scaling, kept only as this
        scaling = llama3_scaling(rope_freqs, config["head_dim"], config["rope_theta"], gguf.name)
        if scaling is not None:
            config["rope_scaling"] = scaling
    if all(f is not None for f in long_short):  # Phi-3's LongRoPE (its 128k variants)
        import numpy as np

        # The shortest decimals of the file's float32 values (as the model's config had them).
        long, short = ([float(str(v)) for v in np.array(f, dtype=np.float32)] for f in long_short)
        config["rope_scaling"] = {"type": "longrope", "long_factor": long, "short_factor": short}
    quant = _quantization(weights, config)
    if variant == "f32":
        weights = _dequantize_all(weights, quant)
    elif quant:  # a float GGUF has none: "quantization" would make mlx-lm quantize
        config["quantization"] = quant
    mx.save_safetensors(str(out / "model.safetensors"), weights, {"format": "mlx"})
    del weights
    mx.clear_cache()  # the file's weights, before the model is loaded from the copy
    write_tokenizer(md, out)
    # config.json last: its presence marks a complete directory.
    (out / "config.json").write_text(json.dumps(config, indent=1))


# The GGML types read: MLX's reader (F32, F16, Q4_0, Q4_1, Q8_0) or `gguf_blocks`
# (BF16, K-quants and Q5), and the names of the others, for the one line that refuses
# them.
_TYPE_NAMES = {
    9: "Q8_1", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
    20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
    27: "I64", 28: "F64", 29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}  # fmt: skip


def _refuse_unreadable(types: dict[str, int], gguf: Path) -> None:
    """Refuse a file with a tensor type MLX's reader cannot load, in one line.

    MLX says only ``gguf_tensor_to_f16 failed``; this names the type, a tensor,
    how many more have it, and the types that load.
    """
    bad = [(name, t) for name, t in types.items() if t not in BLOCK_TYPES]
    if bad:
        name, t = bad[0]
        kind = _TYPE_NAMES.get(t, f"type {t}")
        more = sum(1 for _, u in bad if u == t) - 1
        raise ValueError(
            f"GGUF tensor type {kind} is not supported ({name}"
            f"{f' and {more} more' if more else ''}, in {gguf.name}): F32, F16, BF16, "
            "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q2_K to Q6_K load"
        )


def _tensor_types(path: Path) -> dict[str, int]:
    """Each tensor's GGML type id, from the file's header (MLX's reader does not say)."""
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    with open(path, "rb") as f:

        def u32() -> int:
            return struct.unpack("<I", f.read(4))[0]

        def u64() -> int:
            return struct.unpack("<Q", f.read(8))[0]

        def skip(vtype: int) -> None:
            if vtype == 8:  # a string
                f.seek(u64(), 1)
            elif vtype == 9:  # an array: its item type, length, items
                item, n = u32(), u64()
                if item in scalar:
                    f.seek(scalar[item] * n, 1)
                else:
                    for _ in range(n):
                        skip(item)
            else:
                f.seek(scalar[vtype], 1)

        if f.read(4) != b"GGUF" or u32() not in (2, 3):  # v1: 32-bit lengths; big-endian
            raise ValueError(f"{path.name}: not a little-endian GGUF v2/v3 file")
        n_tensors, n_kv = u64(), u64()
        for _ in range(n_kv):
            f.seek(u64(), 1)  # the key
            skip(u32())
        types = {}
        for _ in range(n_tensors):
            name = f.read(u64()).decode()
            f.seek(8 * u32(), 1)  # dims
            types[name] = u32()
            u64()  # offset
        return types


def _broken(out: Path) -> bool:
    """Whether a cached conversion cannot load: a float GGUF once got ``"quantization": {}``."""
    try:
        return json.loads((out / "config.json").read_text()).get("quantization") == {}
    except (OSError, ValueError):
        return True


def _quantization(weights: dict, config: dict) -> dict:
    """Per-module ``{"group_size", "bits"}`` read off the packed shapes."""
    quant: dict = {}
    for key in weights:
        if not key.endswith(".scales"):
            continue
        module = key[: -len(".scales")]
        packed = weights[f"{module}.weight"].shape[-1]
        n_in = in_features(module, config)
        quant[module] = {"group_size": n_in // weights[key].shape[-1], "bits": packed * 32 // n_in}
    if quant:
        # A global default is required by mlx-lm; per-module entries override it.
        first = next(iter(quant.values()))
        quant = {**first, **quant}
    return quant


def _dequantize_all(weights: dict, quant: dict) -> dict:
    import mlx.core as mx

    out = {}
    for key, w in weights.items():
        if key.endswith((".scales", ".biases")) and key.rsplit(".", 1)[0] in quant:
            continue
        module = key.rsplit(".", 1)[0]
        if key.endswith(".weight") and module in quant:
            q = quant[module]
            w = mx.dequantize(
                w,
                weights[f"{module}.scales"].astype(mx.float32),
                weights[f"{module}.biases"].astype(mx.float32),
                group_size=q["group_size"],
                bits=q["bits"],
            )
        out[key] = w.astype(mx.float32)
    mx.eval(out)
    return out
