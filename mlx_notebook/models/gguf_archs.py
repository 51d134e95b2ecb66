"""What each GGUF architecture is in mlx-lm: tensor names, ``config.json``, experts.

llama.cpp names every architecture's tensors alike (``blk.N.attn_q``, ...) and keeps
the model's shape as ``{arch}.*`` metadata; mlx-lm's model of the same kind wants its
own names and a Hugging Face style config. The tables below map one to the other,
and `config_of` fills in what the files leave out as llama.cpp's loader does.
"""

from __future__ import annotations

import re

from .gguf_tokenizer import _scalar

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
# Q/K/V biases follow their weights' names), Phi-3's fused projections, Gemma 2/3's
# extra norms and the experts of mixtures (`_ARCH_NAMES`).
ARCHS = {
    "llama": True, "qwen2": False, "qwen3": False, "qwen3moe": False, "phi2": False, "phi3": False,
    "gemma": False, "gemma2": False, "gemma3": False,
}  # fmt: skip
# Kinds of model a GGUF architecture holds besides its own: Mixtral's files are
# llama's with experts (llama.cpp's LlamaModel writes both).
_KINDS = {"mixtral": True}
# Whether each kind's Q/K rows are in interleaved-RoPE order (``rope_traditional``).
_PERMUTED = {**ARCHS, **_KINDS}
# mlx-lm's model type, where it is not the kind's name.
_MODEL_TYPES = {"gemma3": "gemma3_text", "qwen3moe": "qwen3_moe", "phi2": "phi"}
# Gemma's norms scale by 1 + weight; llama.cpp's converter stores weight + 1.
NORM_SHIFT = {"gemma": 1.0, "gemma2": 1.0, "gemma3": 1.0}
# Gemma 2 and 3 normalize before and after both attention and the MLP.
_GEMMA_NORMS = [
    (r"^blk\.(\d+)\.post_attention_norm\.", r"model.layers.\1.post_attention_layernorm."),
    (r"^blk\.(\d+)\.ffn_norm\.", r"model.layers.\1.pre_feedforward_layernorm."),
    (r"^blk\.(\d+)\.post_ffw_norm\.", r"model.layers.\1.post_feedforward_layernorm."),
]


def _experts(block: str) -> list:
    """A mixture's names under the model's ``block``.

    The router, and each projection of every expert in one 3-D tensor (as mlx-lm's
    SwitchGLU stacks them).
    """
    return [
        (r"^blk\.(\d+)\.ffn_gate_inp\.", rf"model.layers.\1.{block}.gate."),
        (
            r"^blk\.(\d+)\.ffn_(gate|up|down)_exps\.",
            rf"model.layers.\1.{block}.switch_mlp.\2_proj.",
        ),
    ]


# Phi-3 keeps Q, K and V in one matrix and the gate and up projections in another,
# as mlx-lm's phi3 does: llama.cpp names the second ffn_up.
_ARCH_NAMES = {
    "phi3": [
        (r"^blk\.(\d+)\.attn_qkv\.", r"model.layers.\1.self_attn.qkv_proj."),
        (r"^blk\.(\d+)\.ffn_up\.", r"model.layers.\1.mlp.gate_up_proj."),
    ],
    "qwen3moe": _experts("mlp"),
    "mixtral": _experts("block_sparse_moe"),
    # Phi-2: LayerNorms with biases, the output product named dense, a biased MLP
    # (q/k/v kept fused by older files are split first: `unfuse_qkv`).
    "phi2": [
        (r"^output_norm\.", "model.final_layernorm."),
        (r"^blk\.(\d+)\.attn_output\.", r"model.layers.\1.self_attn.dense."),
        (r"^blk\.(\d+)\.ffn_up\.", r"model.layers.\1.mlp.fc1."),
        (r"^blk\.(\d+)\.ffn_down\.", r"model.layers.\1.mlp.fc2."),
    ],
    "gemma2": _GEMMA_NORMS,
    "gemma3": _GEMMA_NORMS,
}


def kind_of(arch: str, md: dict) -> str:
    """The model a file of GGUF architecture ``arch`` holds: ``arch``, or one of `_KINDS`."""
    if arch == "llama" and int(_scalar(md.get("llama.expert_count", 0)) or 0) > 0:
        return "mixtral"
    return arch


# Mixtral files written before llama.cpp stacked experts (early 2024) keep each
# expert's projection apart: ``blk.N.ffn_gate.E.weight``.
_ONE_EXPERT = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down)\.(\d+)\.(\w+)$")


def stack_experts(weights: dict) -> dict:
    """Each layer's per-expert tensors as one ``ffn_*_exps`` tensor, experts first.

    One projection at a time (an expert's arrays are dropped once stacked), so the
    file's weights are held about once.
    """
    import mlx.core as mx

    groups: dict = {}
    for key in list(weights):
        m = _ONE_EXPERT.match(key)
        if m:
            layer, proj, e, part = m.groups()
            groups.setdefault((layer, proj, part), {})[int(e)] = key
    for (layer, proj, part), keys in sorted(groups.items()):
        stacked = mx.stack([weights.pop(keys[e]) for e in sorted(keys)])
        mx.eval(stacked)
        weights[f"blk.{layer}.ffn_{proj}_exps.{part}"] = stacked
    return weights


_FUSED_QKV = re.compile(r"^blk\.(\d+)\.attn_qkv\.(\w+)$")


def unfuse_qkv(weights: dict, md: dict, kind: str) -> dict:
    """Phi-2's fused ``attn_qkv`` as the separate q, k and v that mlx-lm's ``phi`` has.

    Files converted from Phi-2's first checkpoints keep one tensor: rows of q, k, v.
    Quantized rows split as they are (a block never spans two rows); one tensor at a
    time, the fused one dropped once split.
    """
    import mlx.core as mx

    if kind != "phi2":
        return weights
    heads = int(_scalar(md["phi2.attention.head_count"]))
    kv = int(_scalar(md.get("phi2.attention.head_count_kv", heads)))
    dim = int(_scalar(md["phi2.embedding_length"])) // heads
    bounds = [0, heads * dim, (heads + kv) * dim, (heads + 2 * kv) * dim]
    for key in [k for k in weights if _FUSED_QKV.match(k)]:
        layer, part = _FUSED_QKV.match(key).groups()
        fused = weights.pop(key)
        for name, lo, hi in zip("qkv", bounds, bounds[1:]):
            weights[f"blk.{layer}.attn_{name}.{part}"] = mx.contiguous(fused[lo:hi])
        mx.eval([weights[f"blk.{layer}.attn_{n}.{part}"] for n in "qkv"])
        del fused
    return weights


def rename(name: str, arch: str = "llama") -> str:
    """A GGUF tensor name as mlx-lm's model of kind ``arch`` names it."""
    for pat, rep in _ARCH_NAMES.get(arch, []) + _NAMES:
        new, n = re.subn(pat, rep, name)
        if n:
            return new
    raise ValueError(f"unexpected GGUF tensor {name!r} for the {arch} architecture")


def config_of(md: dict, weights: dict, arch: str = "llama", kind: str | None = None) -> dict:
    """mlx-lm's ``config.json`` for a file of GGUF architecture ``arch`` holding ``kind``.

    What the file leaves out is filled in as llama.cpp's loader fills it.
    """
    kind = kind or arch

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
        # optional in llama.cpp's loader: then the experts' own width, from their weights
        width = g("expert_feed_forward_length")
        if width is None:
            width = next(v.shape[1] for k, v in weights.items() if k.endswith("gate_proj.weight"))
        extra["moe_intermediate_size"] = int(width)
        extra.update(decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True)
    if kind == "mixtral":  # every expert as wide as feed_forward_length
        extra["num_local_experts"] = int(g("expert_count"))
        extra["num_experts_per_tok"] = int(g("expert_used_count"))
    if arch == "phi2":  # LayerNorm's epsilon; RoPE over part of each head
        extra["layer_norm_eps"] = float(g("attention.layer_norm_epsilon", 1e-5))
        extra["partial_rotary_factor"] = int(g("rope.dimension_count", head_dim)) / head_dim
    if arch == "phi3":  # rotary dimensions and the context LongRoPE scales from
        extra["partial_rotary_factor"] = int(g("rope.dimension_count", head_dim)) / head_dim
        ctx = g("rope.scaling.original_context_length", g("context_length", 4096))
        extra["original_max_position_embeddings"] = int(ctx)
    return {
        **extra,
        "model_type": _MODEL_TYPES.get(kind, kind),
        "hidden_size": hidden,
        "num_hidden_layers": int(g("block_count")),
        "intermediate_size": int(g("feed_forward_length", extra.get("moe_intermediate_size"))),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": float(g("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(g("rope.freq_base", 10000.0)),
        "rope_traditional": _PERMUTED[kind],
        "vocab_size": int(g("vocab_size", len(md.get("tokenizer.ggml.tokens", [])))),
        "max_position_embeddings": int(g("context_length", 2048)),
        "tie_word_embeddings": "lm_head.weight" not in weights,
    }


def in_features(module: str, config: dict) -> int:
    """The width of the inputs of linear layer ``module`` (a path in the model)."""
    if module.endswith("switch_mlp.down_proj"):
        return config.get("moe_intermediate_size", config["intermediate_size"])
    if module.endswith(("down_proj", "mlp.fc2")):  # fc2: Phi-2's
        return config["intermediate_size"]
    if module.endswith(("o_proj", "self_attn.dense")):
        return config["num_attention_heads"] * config["head_dim"]
    return config["hidden_size"]
