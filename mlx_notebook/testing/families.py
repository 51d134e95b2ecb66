"""Tiny random-weight models of many mlx-lm families, for tests and benchmarks.

Each is built from mlx-lm's own model class (config, random weights, the small
BPE tokenizer of `testing.build_tokenizer`) and loads through ``mlx_lm.load``,
so it exercises the same cache types, norms, RoPE variants and MoE blocks as a
real checkpoint of the family: full and sliding-window attention, gated-delta
and Mamba state, convolution state, and caches nested in a ``CacheList``.
Sliding windows are a few tokens long so that every check runs past them.
"""

from __future__ import annotations

import json
from pathlib import Path

WINDOW = 8  # sliding-window length: short, so prompts and outputs cross it

_ATTN = {"num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5}
_BASE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, **_ATTN}
_ROPE = {"rope_theta": 10000.0, "max_position_embeddings": 8192}
_MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}

FAMILIES: dict[str, dict] = {
    "llama": {**_BASE, **_ROPE, "tie_word_embeddings": True},
    "qwen2": {**_BASE, **_ROPE, "tie_word_embeddings": True},
    "qwen3": {**_BASE, **_ROPE, "head_dim": 16, "tie_word_embeddings": True},
    "qwen3_moe": {
        **_BASE,
        **_ROPE,
        **_MOE,
        "head_dim": 16,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "tie_word_embeddings": True,
    },
    "qwen3_5": {
        **_BASE,
        "num_hidden_layers": 4,
        "full_attention_interval": 2,  # layers 0, 2: gated delta; 1, 3: attention
        "head_dim": 16,
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
        "rope_parameters": {
            "type": "default",
            "mrope_section": [2, 1, 1],
            "rope_theta": 10000,
            "partial_rotary_factor": 0.5,
        },
    },
    "gemma3_text": {
        **_BASE,
        **_ROPE,
        "num_hidden_layers": 3,
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "sliding_window": WINDOW,
        "sliding_window_pattern": 2,
    },
    "gemma4_text": {
        **_BASE,
        "num_hidden_layers": 4,
        "head_dim": 16,
        "global_head_dim": 32,
        "num_kv_shared_layers": 2,
        "hidden_size_per_layer_input": 8,
        "sliding_window": WINDOW,
        "sliding_window_pattern": 2,
        "max_position_embeddings": 8192,
        "use_double_wide_mlp": False,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "final_logit_softcapping": 300.0,  # 30 saturates random logits into ties
        "tie_word_embeddings": False,  # tied, random layers predict their input: one token loops
    },
    "gpt_oss": {
        **_BASE,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "head_dim": 16,
        "sliding_window": WINDOW,
        "rope_theta": 10000,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    "phi3": {**_BASE, **_ROPE, "tie_word_embeddings": False},
    "starcoder2": {**_BASE, **_ROPE, "norm_epsilon": 1e-5, "tie_word_embeddings": True},
    "ministral3": {
        **_BASE,
        "head_dim": 16,
        "max_position_embeddings": 8192,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "llama_4_scaling_beta": 0.1,
            "original_max_position_embeddings": 1024,  # scaling starts inside the long check
        },
    },
    "olmo2": {**_BASE, **_ROPE, "tie_word_embeddings": True},
    "smollm3": {**_BASE, **_ROPE, "no_rope_layer_interval": 2, "tie_word_embeddings": True},
    "lfm2": {
        **_BASE,
        "num_hidden_layers": 3,
        "max_position_embeddings": 8192,
        "norm_eps": 1e-5,
        "conv_bias": False,
        "conv_L_cache": 3,
        "block_dim": 64,
        "block_multiple_of": 16,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False,
        "block_ff_dim": 128,
        "layer_types": ["conv", "full_attention", "conv"],
        "tie_word_embeddings": True,
    },
    "mamba2": {
        "num_heads": 8,
        "head_dim": 16,
        "hidden_size": 64,
        "intermediate_size": 128,
        "expand": 2,
        "state_size": 16,
        "num_hidden_layers": 2,
        "layer_norm_epsilon": 1e-5,
        "conv_kernel": 4,
        "n_groups": 1,
        "use_bias": False,
        "use_conv_bias": True,
        "tie_word_embeddings": True,
        "time_step_limit": [0.0, 1e9],
        "time_step_rank": "auto",
        "max_position_embeddings": 8192,
    },
    "falcon_h1": {
        **_BASE,
        "head_dim": 16,
        "mamba_d_conv": 4,
        "mamba_d_head": 16,
        "mamba_d_ssm": 64,
        "mamba_d_state": 16,
        "mamba_n_heads": 4,
        "mamba_chunk_size": 16,
        "rope_theta": 10000.0,
        "max_position_embeddings": 8192,
    },
}


def build_family(family: str, path: str | Path, seed: int = 0, scale: float = 3.0, **over) -> Path:
    """Write a tiny random-weight model of ``family`` to ``path``.

    Weights are scaled by ``scale`` so logits have clear margins (greedy text
    does not hinge on near-ties that chunking or batching could flip).

    Args:
        family: An mlx-lm ``model_type``: a key of `FAMILIES`, or another whose whole
            config comes in ``over``.
        path: The directory to write.
        seed: MLX's random seed for the weights.
        scale: Factor on every weight matrix.
        **over: Config values to change (a larger model for benchmarks, say).

    Returns:
        The model directory, loadable with ``mlx_lm.load``.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_map
    from mlx_lm.utils import _get_classes

    from .tiny import SPECIALS, build_tokenizer

    path = Path(path)
    build_tokenizer(path)
    vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
    # The tokenizer's end of turn, not the family's default id (outside this vocabulary).
    ids = {"eos_token_id": vocab["<|im_end|>"], "bos_token_id": None, "pad_token_id": None}
    cfg = {"model_type": family, "vocab_size": len(vocab), **ids, **FAMILIES.get(family, {})}
    cfg.update(over)
    if isinstance(cfg.get("text_config"), dict):  # a wrapper (llama4): the text model's own
        cfg["text_config"] = {"vocab_size": len(vocab), **ids, **cfg["text_config"]}
    if family == "gemma4_text":
        cfg["vocab_size_per_layer_input"] = len(vocab)
    model_class, args_class = _get_classes(cfg)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(cfg))
    # Matrices only: norm weights and layer scalars keep their initial values.
    model.update(tree_map(lambda p: p * scale if p.ndim >= 2 else p, model.parameters()))
    weights = dict(tree_flatten(model.parameters()))
    # Special tokens neither mean nor get predicted: no end of turn cuts a run short.
    specials = mx.array([vocab[s] for s in SPECIALS])
    for key, w in weights.items():
        if key.endswith(("embed_tokens.weight", "lm_head.weight", "embeddings.weight")):
            if w.ndim == 2 and w.shape[0] == len(vocab):
                w[specials] = 0.0
    mx.eval(weights)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(cfg))
    return path
