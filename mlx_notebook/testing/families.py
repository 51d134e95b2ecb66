"""Tiny random-weight models of many mlx-lm families, for tests and benchmarks.

Each is built from mlx-lm's own model class (config, random weights, the small
BPE tokenizer of `testing.build_tokenizer`) and loads through ``mlx_lm.load``,
so it exercises the same cache types, norms, RoPE variants and MoE blocks as a
real checkpoint of the family: full and sliding-window attention, gated-delta
and Mamba state, convolution state, and caches nested in a ``CacheList``.
Sliding windows are a few tokens long so that every check runs past them.
"""

from __future__ import annotations

import dataclasses
import importlib
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


# Every other architecture of mlx-lm: a small config (`config`). Sizes are shrunk
# wherever a field of that name exists; semantic fields are filled only where the
# family has no default. Configs that needed more (layer patterns, MoE routing, nested
# text configs) are in family_configs.json, first taken from mlx-lm's own model tests
# (tests/test_models.py, MIT licence) and shrunk to this size.
_SMALL = {
    **dict.fromkeys(["hidden_size", "d_model", "n_embd"], 64),
    **dict.fromkeys(["num_hidden_layers", "n_layer", "n_layers", "num_layers"], 2),
    **dict.fromkeys(["intermediate_size", "ffn_dim", "n_inner"], 128),
    **dict.fromkeys(["num_attention_heads", "n_head", "n_heads", "num_heads"], 4),
    **dict.fromkeys(["num_key_value_heads", "n_kv_heads", "num_kv_heads"], 2),
    **dict.fromkeys(["max_position_embeddings", "n_positions", "n_ctx"], 8192),
    **dict.fromkeys(["num_experts", "n_routed_experts", "num_local_experts"], 4),
    **dict.fromkeys(["n_shared_experts", "num_shared_experts"], 1),
    **dict.fromkeys(["moe_intermediate_size", "shared_intermediate_size"], 32),
    **dict.fromkeys(["kv_lora_rank", "q_lora_rank", "head_dim", "v_head_dim"], 16),
    **dict.fromkeys(["qk_rope_head_dim", "qk_nope_head_dim"], 8),
    **dict.fromkeys(["sliding_window", "attention_window_size"], WINDOW),
    "num_experts_per_tok": 2,
    "rope_theta": 10000.0,
}
_REQUIRED = {
    **dict.fromkeys(["rms_norm_eps", "layer_norm_eps", "norm_eps", "layer_norm_epsilon"], 1e-5),
    **dict.fromkeys(["attention_bias", "mlp_bias", "use_bias", "rope_traditional"], False),
    **dict.fromkeys(["first_k_dense_replace", "moe_layer_freq", "n_group", "topk_group"], 1),
    "partial_rotary_factor": 0.5,
    "rotary_dim": 8,
    "hidden_act": "silu",
    "routed_scaling_factor": 1.0,
    "norm_topk_prob": True,
    "tie_word_embeddings": True,
    "rope_scaling": None,
}
# mlx-lm modules that are parts of models, not models.
_PARTS = {
    "activations", "base", "cache", "bitlinear_layers", "gated_delta", "mla", "pipeline",
    "rope_utils", "ssm", "switch_layers",
}  # fmt: skip
# Architectures no config builds into a text model here, and why.
NOT_BUILT = {
    "olmo": "needs the ai2-olmo package (without it, refused at submit with mlx-lm's hint)",
    "prism_hadamard_qwen35": "needs a Hadamard pack file beside the weights",
}


def architectures() -> list[str]:
    """Every model architecture (``model_type`` module) of the installed mlx-lm."""
    import mlx_lm.models

    root = Path(mlx_lm.models.__file__).parent
    names = {p.stem for p in root.glob("*.py")} - _PARTS - {"__init__"}
    return sorted(names)


def known_configs() -> dict[str, dict]:
    """The configs of family_configs.json (every one builds with the installed mlx-lm)."""
    return json.loads((Path(__file__).parent / "family_configs.json").read_text())


def config(family: str) -> dict:
    """A small config of ``family`` (without its vocabulary, which `build_family` sets).

    `FAMILIES` first, then family_configs.json, then mlx-lm's own fields filled from
    the size table: a new architecture of a later mlx-lm gets a config to try.
    """
    if family in FAMILIES:
        return dict(FAMILIES[family])
    module = importlib.import_module(f"mlx_lm.models.{family}")
    out = _filled(module.ModelArgs)
    known = known_configs()
    if family in known:
        out.update(json.loads(json.dumps(known[family])))
        return out
    text = getattr(module, "TextArgs", None) or getattr(module, "TextConfig", None)
    if "text_config" in {f.name for f in dataclasses.fields(module.ModelArgs)} and text:
        out["text_config"] = _filled(text)  # a wrapper: its text model's own fields
    return out


def _filled(args) -> dict:
    """The size table's values for ``args``'s fields; the semantic ones where required."""
    out = {}
    for f in dataclasses.fields(args):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.name in _SMALL:
            out[f.name] = _SMALL[f.name]
        elif required and f.name in _REQUIRED:
            out[f.name] = _REQUIRED[f.name]
    return out


def _not_zero(path: str, p):
    """Random values for a matrix at zero; a gain of 4 for an output norm at zero.

    Gemma's norms scale by ``1 + w``: at 4, the layers outweigh the tied embedding,
    which else picks the input token again.
    """
    import mlx.core as mx

    if p.ndim >= 2 and not mx.any(p).item():
        return mx.random.normal(p.shape, dtype=p.dtype) * 0.5
    if p.ndim == 1 and "post" in path and "norm" in path and not mx.any(p).item():
        return mx.full(p.shape, 3.0, dtype=p.dtype)
    return p


def _scaled(path: str, p, scale: float):
    """A matrix times ``scale``; bitnet's ternary layers drawn at random.

    Their packed bytes hold four 2-bit fields, each 0..2 (weights -1, 0, 1); their one
    scale a layer is drawn from 0.1-0.3, so that a wrong use of it changes the text.
    """
    import mlx.core as mx

    if p.dtype == mx.uint8:
        f = mx.random.randint(0, 3, (4, *p.shape))
        return sum(f[k] << (2 * k) for k in range(4)).astype(mx.uint8)
    if path.endswith("weight_scale"):
        return mx.random.uniform(0.1, 0.3, p.shape, dtype=p.dtype)
    return p * scale if p.ndim >= 2 else p


def build_family(family: str, path: str | Path, seed: int = 0, scale: float = 3.0, **over) -> Path:
    """Write a tiny random-weight model of ``family`` to ``path``.

    Weights are scaled by ``scale`` so logits have clear margins (greedy text
    does not hinge on near-ties that chunking or batching could flip).

    Args:
        family: An mlx-lm ``model_type`` (see `architectures`); its config is `config`'s.
        path: The directory to write.
        seed: MLX's random seed for the weights.
        scale: Factor on every weight matrix.
        **over: Config values to change (a larger model for benchmarks, say).

    Returns:
        The model directory, loadable with ``mlx_lm.load``.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_map_with_path
    from mlx_lm.utils import _get_classes

    from .tiny import SPECIALS, build_tokenizer

    path = Path(path)
    build_tokenizer(path)
    vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
    # The tokenizer's end of turn, not the family's default id (outside this vocabulary).
    ids = {"eos_token_id": vocab["<|im_end|>"], "bos_token_id": None, "pad_token_id": None}
    cfg = {"model_type": family, "vocab_size": len(vocab), **ids, **config(family)}
    cfg.update(over)
    if isinstance(cfg.get("text_config"), dict):  # a wrapper (llama4): the text model's own
        cfg["text_config"] = {"vocab_size": len(vocab), **ids, **cfg["text_config"]}
    if family == "gemma4_text":
        cfg["vocab_size_per_layer_input"] = len(vocab)
    model_class, args_class = _get_classes(cfg)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(cfg))
    # Matrices only: norm weights and layer scalars keep their initial values.
    model.update(tree_map_with_path(lambda k, p: _scaled(k, p, scale), model.parameters()))
    if family not in FAMILIES:  # what some families start at zero (talkie's output)
        model.update(tree_map_with_path(_not_zero, model.parameters()))
    weights = dict(tree_flatten(model.parameters()))
    # Special tokens neither mean nor get predicted: no end of turn cuts a run short.
    specials = mx.array([vocab[s] for s in SPECIALS])
    rows = cfg["vocab_size"]  # above the tokenizer's where a model needs more (phi3small)
    for w in weights.values():  # embeddings and output layers, whatever their names
        if w.ndim == 2 and w.shape[0] == rows:
            w[specials] = 0.0
            w[len(vocab) :] = 0.0  # ids no token has: logits 0, under the best real one
    mx.eval(weights)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(cfg))
    return path
