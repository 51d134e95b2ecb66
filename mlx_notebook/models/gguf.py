"""GGUF -> MLX model directory (llama, qwen2, qwen3, phi3, gemma 1-3), cached, written atomically.

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
from .gguf_blocks import NEEDS_BLOCKS, read_blocks
from .gguf_blocks import TYPES as BLOCK_TYPES
from .gguf_rope import llama3_scaling
from .gguf_tokenizer import _scalar, write_tokenizer

CACHE_ENV = "MLX_NOTEBOOK_CACHE"
VERSION = "3"  # bump when the output format changes (3: Q4_K at 4 bits, Q5 at 8)
TMP_TAG = "pid"
_TMP_OWNER = re.compile(rf"^\..+-[0-9a-f]{{16}}\.{TMP_TAG}(\d+)\.")
_TMP_LEGACY = re.compile(r"^\..+-[0-9a-f]{16}\.")

_NAMES = [
    (r"^token_embd\.", "model.embed_tokens."),
    (r"^output_norm\.", "model.norm."),
    (r"^output\.", "lm_head."),
    (r"^blk\.(\d+)\.attn_norm\.", r"model.layers.\1.input_layernorm."),
    (r"^blk\.(\d+)\.ffn_norm\.", r"model.layers.\1.post_attention_layernorm."),
    (r"^blk\.(\d+)\.attn_q\.", r"model.layers.\1.self_attn.q_proj."),
    (r"^blk\.(\d+)\.attn_k\.", r"model.layers.\1.self_attn.k_proj."),
    (r"^blk\.(\d+)\.attn_v\.", r"model.layers.\1.self_attn.v_proj."),
    (r"^blk\.(\d+)\.attn_output\.", r"model.layers.\1.self_attn.o_proj."),
    (r"^blk\.(\d+)\.attn_q_norm\.", r"model.layers.\1.self_attn.q_norm."),
    (r"^blk\.(\d+)\.attn_k_norm\.", r"model.layers.\1.self_attn.k_norm."),
    (r"^blk\.(\d+)\.ffn_gate\.", r"model.layers.\1.mlp.gate_proj."),
    (r"^blk\.(\d+)\.ffn_up\.", r"model.layers.\1.mlp.up_proj."),
    (r"^blk\.(\d+)\.ffn_down\.", r"model.layers.\1.mlp.down_proj."),
]


# The architectures converted, and whether llama.cpp's converter permuted their Q/K
# rows for interleaved RoPE (its LlamaModel does; Qwen2Model, Qwen3Model and
# Phi3MiniModel and the Gemma models do not). Each is the mlx-lm model type of the
# same name; the tensors are named as llama's, plus Qwen3's per-head Q/K norms (Qwen2's
# Q/K/V biases follow their weights' names), Phi-3's fused projections and Gemma 2/3's
# extra norms (`_ARCH_NAMES`).
ARCHS = {
    "llama": True, "qwen2": False, "qwen3": False, "qwen3moe": False, "phi3": False,
    "gemma": False, "gemma2": False, "gemma3": False,
}  # fmt: skip
# mlx-lm's model type, where it is not the GGUF architecture's name.
_MODEL_TYPES = {"gemma3": "gemma3_text", "qwen3moe": "qwen3_moe"}
# Gemma's norms scale by 1 + weight; llama.cpp's converter stores weight + 1.
_NORM_SHIFT = {"gemma": 1.0, "gemma2": 1.0, "gemma3": 1.0}
# Gemma 2 and 3 normalize before and after both attention and the MLP.
_GEMMA_NORMS = [
    (r"^blk\.(\d+)\.post_attention_norm\.", r"model.layers.\1.post_attention_layernorm."),
    (r"^blk\.(\d+)\.ffn_norm\.", r"model.layers.\1.pre_feedforward_layernorm."),
    (r"^blk\.(\d+)\.post_ffw_norm\.", r"model.layers.\1.post_feedforward_layernorm."),
]
# Phi-3 keeps Q, K and V in one matrix and the gate and up projections in another,
# as mlx-lm's phi3 does: llama.cpp names the second ffn_up.
_ARCH_NAMES = {
    "phi3": [
        (r"^blk\.(\d+)\.attn_qkv\.", r"model.layers.\1.self_attn.qkv_proj."),
        (r"^blk\.(\d+)\.ffn_up\.", r"model.layers.\1.mlp.gate_up_proj."),
    ],
    # Qwen3's mixture of experts: the router, and each projection of every expert in
    # one 3-D tensor, as mlx-lm's SwitchGLU stacks them.
    "qwen3moe": [
        (r"^blk\.(\d+)\.ffn_gate_inp\.", r"model.layers.\1.mlp.gate."),
        (r"^blk\.(\d+)\.ffn_(gate|up|down)_exps\.", r"model.layers.\1.mlp.switch_mlp.\2_proj."),
    ],
    "gemma2": _GEMMA_NORMS,
    "gemma3": _GEMMA_NORMS,
}


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
            and Q4_K at 4 bits, Q5 and Q8_0 at 8; Q2_K, Q3_K, Q6_K re-quantized to 8
            bits: `gguf_blocks`);
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
    weights = {_rename(k, arch): v for k, v in weights.items()}
    if arch in _NORM_SHIFT:
        for k in [k for k in weights if k.endswith("norm.weight")]:
            weights[k] = weights[k].astype(mx.float32) - _NORM_SHIFT[arch]
    config = _config(md, weights, arch)
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


def _rename(name: str, arch: str = "llama") -> str:
    for pat, rep in _ARCH_NAMES.get(arch, []) + _NAMES:
        new, n = re.subn(pat, rep, name)
        if n:
            return new
    raise ValueError(f"unexpected GGUF tensor {name!r} for the {arch} architecture")


def _config(md: dict, weights: dict, arch: str = "llama") -> dict:
    def g(key, default=None):
        v = md.get(f"{arch}.{key}", default)
        return _scalar(v) if v is not None else None

    hidden = int(g("embedding_length"))
    heads = int(g("attention.head_count"))
    head_dim = int(g("attention.key_length", hidden // heads))
    extra = {}
    if arch == "gemma3":  # what llama.cpp's loader fixes for Gemma 3 where the file is silent
        extra["sliding_window"] = int(g("attention.sliding_window", 512))
        extra["sliding_window_pattern"] = 6  # every sixth layer global, as llama.cpp has it
        extra["rope_local_base_freq"] = float(g("rope.freq_base_swa", 10000.0))
        # Queries scaled by 1/sqrt(head_dim), but by 1/sqrt(hidden/heads) for the 27B
        # (62 layers), as in llama.cpp and the models' own configs.
        wide = int(g("block_count")) == 62
        extra["query_pre_attn_scalar"] = hidden // heads if wide else head_dim
        if g("rope.scaling.type") == "linear":  # the 4B and larger: global layers
            extra["rope_scaling"] = {"type": "linear", "factor": float(g("rope.scaling.factor"))}
    if arch == "gemma2":  # as llama.cpp's loader reads it (its defaults where silent)
        extra["attn_logit_softcapping"] = float(g("attn_logit_softcapping", 50.0))
        extra["final_logit_softcapping"] = float(g("final_logit_softcapping", 30.0))
        # 1/sqrt(head_dim), but 1/sqrt(hidden/heads) for the 27B (46 layers).
        wide = int(g("block_count")) == 46
        extra["query_pre_attn_scalar"] = hidden // heads if wide else head_dim
    if arch == "qwen3moe":  # every layer sparse; top-k weights renormalized, as llama.cpp
        extra["num_experts"] = int(g("expert_count"))
        extra["num_experts_per_tok"] = int(g("expert_used_count"))
        extra["moe_intermediate_size"] = int(g("expert_feed_forward_length"))
        extra.update(decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True)
    if arch == "phi3":  # rotary dimensions and the context LongRoPE scales from
        extra["partial_rotary_factor"] = int(g("rope.dimension_count", head_dim)) / head_dim
        ctx = g("rope.scaling.original_context_length", g("context_length", 4096))
        extra["original_max_position_embeddings"] = int(ctx)
    return {
        **extra,
        "model_type": _MODEL_TYPES.get(arch, arch),
        "hidden_size": hidden,
        "num_hidden_layers": int(g("block_count")),
        "intermediate_size": int(g("feed_forward_length", extra.get("moe_intermediate_size"))),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": float(g("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(g("rope.freq_base", 10000.0)),
        "rope_traditional": ARCHS[arch],
        "vocab_size": int(g("vocab_size", len(md.get("tokenizer.ggml.tokens", [])))),
        "max_position_embeddings": int(g("context_length", 2048)),
        "tie_word_embeddings": "lm_head.weight" not in weights,
    }


def _in_features(module: str, config: dict) -> int:
    if module.endswith("switch_mlp.down_proj"):
        return config["moe_intermediate_size"]
    if module.endswith("down_proj"):
        return config["intermediate_size"]
    if module.endswith("o_proj"):
        return config["num_attention_heads"] * config["head_dim"]
    return config["hidden_size"]


def _quantization(weights: dict, config: dict) -> dict:
    """Per-module ``{"group_size", "bits"}`` read off the packed shapes."""
    quant: dict = {}
    for key in weights:
        if not key.endswith(".scales"):
            continue
        module = key[: -len(".scales")]
        packed = weights[f"{module}.weight"].shape[-1]
        n_in = _in_features(module, config)
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
