"""Write tiny GGUFs of the other architectures the converter takes, as llama.cpp does."""

import re
from pathlib import Path

import numpy as np

from mlx_notebook.testing import tiny_config
from tests.gguf_fixture import (
    K_SCALES,
    _add_shape,
    _add_tokenizer,
    _tokens,
    k_blocks,
    permute,
    unpermute,
    write_out,
)


def gguf_name(name: str, arch: str = "llama", blocks: int = 64) -> str:
    """An mlx-lm (Hugging Face) tensor name as llama.cpp writes it: gguf-py's own map."""
    import gguf

    kind = {a.lower(): a for a in gguf.MODEL_ARCH.__members__}[arch]
    tmap = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, kind), blocks)
    out = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
    if out is None:
        raise KeyError(name)
    return out


def build_arch_gguf(
    path: Path,
    arch: str,
    qtype: str | None = None,
    seed: int = 0,
    longrope: dict | None = None,
    split_experts: bool = False,
    fused_qkv: bool = False,
):
    """A GGUF of a tiny random mlx-lm ``arch`` model (qwen2, qwen3, qwen3moe, mixtral,
    phi3, gemma, gemma2, gemma3), as llama.cpp writes one.

    Tensor names from gguf-py's own map, Q/K rows as they are (llama.cpp permutes only
    llama's: mixtral's), the tokenizer's pre-type ``qwen2``. ``qtype`` (``Q8_0``, ``Q4_1``,
    ``Q5_0``, ``F16``, ``BF16``; a K-quant: random blocks, 256 wide): every matrix in
    it, else float32. phi3: LongRoPE's ``longrope`` factors (mlx-lm's ``rope_scaling``) as
    llama.cpp keeps them, two tensors. mixtral: a ``llama`` file with experts, Q/K rows
    permuted as llama.cpp's LlamaModel does; ``split_experts``: each expert's projections
    apart, as files from before llama.cpp stacked them. phi2: ``fused_qkv`` writes q, k
    and v as one ``attn_qkv``, as files from Phi-2's first checkpoints. Worker thread
    (its model's arrays are lazy).

    Returns:
        ``(path, model)``: the mlx-lm model holding the weights the file stores (after
        the quantization round trip), the reference a correct loader must equal.
    """
    import importlib

    import gguf
    import mlx.core as mx
    from mlx.utils import tree_flatten

    tokens, merges = _tokens(path)
    shape = dict(head_dim=16)
    if qtype in K_SCALES:  # every matrix's rows whole blocks of 256
        shape = dict(hidden_size=256, intermediate_size=512, head_dim=64)
    if arch == "gemma3":  # a window shorter than the prompts; layer 6 of 6 global
        shape = dict(head_dim=16, num_hidden_layers=6, sliding_window=8,
                     sliding_window_pattern=6, query_pre_attn_scalar=16,
                     rope_local_base_freq=10000.0,
                     rope_scaling={"type": "linear", "factor": 8.0})  # fmt: skip
    if arch == "gemma2":  # soft caps other than llama.cpp's defaults: read from the file;
        # heads wider than hidden / heads: the queries' scale is the head's (32, not 16)
        shape = dict(head_dim=32, query_pre_attn_scalar=32, attn_logit_softcapping=20.0,
                     final_logit_softcapping=5.0)  # fmt: skip
    if arch == "mixtral":  # 4 experts, 3 a token (not mlx-lm's default), as wide as the MLP
        shape.update(num_local_experts=4, num_experts_per_tok=3)
    if arch == "qwen3moe":  # 4 experts, 2 a token: every layer sparse
        shape.update(num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
                     moe_intermediate_size=shape.get("intermediate_size", 64),
                     mlp_only_layers=[], norm_topk_prob=True)  # fmt: skip
    if arch == "phi2":  # LayerNorms and biases; RoPE over half of each head
        shape = dict(tie_word_embeddings=False, partial_rotary_factor=0.5, layer_norm_eps=1e-5)
    if arch == "phi3":  # its own lm_head; LongRoPE over half of each head's dimensions
        shape = dict(tie_word_embeddings=False, partial_rotary_factor=0.5,
                     max_position_embeddings=4096, original_max_position_embeddings=512,
                     rope_scaling=longrope)  # fmt: skip
    model_type = {"gemma3": "gemma3_text", "qwen3moe": "qwen3_moe", "phi2": "phi"}.get(arch, arch)
    cfg = tiny_config(len(tokens), model_type=model_type, rope_theta=1e6, **shape)
    mod = importlib.import_module(f"mlx_lm.models.{model_type}")
    mx.random.seed(seed)
    model = mod.Model(mod.ModelArgs.from_dict(cfg))
    T = gguf.GGMLQuantizationType
    stored = []
    rng = np.random.default_rng(seed)
    file_arch = "llama" if arch == "mixtral" else arch
    for name, a in tree_flatten(model.parameters()):
        w = np.array(a.astype(mx.float32))
        if name.endswith("norm.weight"):
            w = (1 + 0.2 * rng.standard_normal(w.shape)).astype(np.float32)  # not all ones
        heads = None  # llama's Q/K rows in interleaved-RoPE order
        if file_arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg["num_attention_heads" if "q_proj" in name else "num_key_value_heads"]
            w = permute(w, heads)
        router = name.endswith(("mlp.gate.weight", "block_sparse_moe.gate.weight"))
        if router:  # llama.cpp keeps a router in float32 whatever the file's type
            # Wide margins between experts' scores: a near-tie would let the fast path's
            # rounding (or a sum's order) pick another expert than mlx-lm does.
            w = 8 * w
            stored.append((name, w, None))
        elif qtype in K_SCALES and w.ndim >= 2:  # experts' 3-D tensors: rows of rows
            q = k_blocks(qtype, w.size // w.shape[-1], w.shape[-1], rng)
            q = q.reshape(*w.shape[:-1], q.shape[-1])
            stored.append((name, q, getattr(T, qtype)))
            w = gguf.quants.dequantize(q, getattr(T, qtype)).reshape(w.shape)
        elif qtype == "F16" and w.ndim >= 2:
            stored.append((name, w.astype(np.float16), None))  # written as F16
            w = w.astype(np.float16).astype(np.float32)
        elif qtype and w.ndim >= 2:  # experts' 3-D tensors too
            q = gguf.quants.quantize(w, getattr(T, qtype))
            stored.append((name, q, getattr(T, qtype)))
            w = gguf.quants.dequantize(q, getattr(T, qtype)).reshape(w.shape)
        elif arch.startswith("gemma") and name.endswith("norm.weight"):
            stored.append((name, w + 1, None))  # llama.cpp stores Gemma's norms as 1 + weight
        else:
            stored.append((name, w, None))
        if heads:
            w = unpermute(w, heads)
        model.update(_tree(name, mx.array(w)))  # the reference: what the file holds
    w = gguf.GGUFWriter(str(path), file_arch)
    _add_shape(w, cfg)
    _add_tokenizer(w, tokens, merges, "qwen2")
    if arch == "gemma3":
        w.add_sliding_window(cfg["sliding_window"])
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(cfg["rope_scaling"]["factor"])
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    if arch == "mixtral":
        w.add_expert_count(cfg["num_local_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
    if arch == "qwen3moe":
        w.add_expert_count(cfg["num_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if arch == "phi2":
        head = cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_rope_dimension_count(int(head * cfg["partial_rotary_factor"]))
        w.add_layer_norm_eps(cfg["layer_norm_eps"])
    if arch == "phi3":
        head = cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_rope_dimension_count(int(head * cfg["partial_rotary_factor"]))
        w.add_rope_scaling_orig_ctx_len(cfg["original_max_position_embeddings"])
        if longrope:
            for k in ("long", "short"):
                w.add_tensor(f"rope_factors_{k}.weight",
                             np.array(longrope[f"{k}_factor"], dtype=np.float32))  # fmt: skip
    fused: dict = {}  # (layer, weight or bias) -> {q/k/v: (array, kind)}
    for name, arr, kind in stored:
        qkv = re.match(r"model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.(\w+)$", name)
        if fused_qkv and qkv:  # written once all three are here: rows of q, k, v
            got = fused.setdefault((qkv[1], qkv[3]), {})
            got[qkv[2]] = arr
            if len(got) == 3:
                a, gg = np.concatenate([got[c] for c in "qkv"]), f"blk.{qkv[1]}.attn_qkv.{qkv[3]}"
                w.add_tensor(gg, a) if kind is None else w.add_tensor(gg, a, raw_dtype=kind)
            continue
        # llama.cpp's converter stacks experts as mlx-lm's SwitchGLU does
        experts = re.match(r"model\.layers\.(\d+)\.\w+\.switch_mlp\.(\w+)_proj\.weight$", name)
        if experts and split_experts:
            parts = [
                (f"blk.{experts[1]}.ffn_{experts[2]}.{e}.weight", a) for e, a in enumerate(arr)
            ]
        elif experts:
            parts = [(f"blk.{experts[1]}.ffn_{experts[2]}_exps.weight", arr)]
        else:
            parts = [(gguf_name(name, file_arch), arr)]
        for gg, a in parts:
            if kind is None:
                w.add_tensor(gg, a)
            else:
                w.add_tensor(gg, a, raw_dtype=kind)
    write_out(w)
    return path, model


def _tree(name: str, value):
    from mlx.utils import tree_unflatten

    return tree_unflatten([(name, value)])
