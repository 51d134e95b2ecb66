"""What each GGUF architecture is in mlx-lm: names, config, experts (gguf_archs)."""

import numpy as np
import pytest

from mlx_notebook.models import gguf_archs as archs


@pytest.mark.parametrize(
    ("arch", "layers", "scalar"),
    [("gemma2", 26, 256), ("gemma2", 46, 144), ("gemma3", 34, 256), ("gemma3", 62, 168)],
)
def test_gemma_queries_scale_by_head_size_but_by_width_on_the_27b(arch, layers, scalar):
    # What Gemma 2/3 files leave out and llama.cpp's loader fixes: the 27B models
    # (46 and 62 layers; 4,608 and 5,376 wide, 32 heads) scale queries by hidden/heads.
    hidden = {26: 2304, 46: 4608, 34: 2560, 62: 5376}[layers]
    heads = 32 if layers in (46, 62) else 8
    md = {f"{arch}.{k}": v for k, v in [("embedding_length", hidden), ("block_count", layers),
          ("attention.head_count", heads), ("attention.key_length", 256),
          ("feed_forward_length", 4 * hidden), ("vocab_size", 256)]}  # fmt: skip
    cfg = archs.config_of(md, {}, arch)
    assert cfg["query_pre_attn_scalar"] == scalar and cfg["head_dim"] == 256
    if arch == "gemma2":  # llama.cpp's defaults where the file is silent
        assert (cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"]) == (50.0, 30.0)


def test_experts_kept_apart_are_stacked_in_expert_order_and_let_go():
    # Old Mixtral files: blk.N.ffn_gate.E.* for E = 0..11 (10 and 11 sort before 2 as
    # text); each quantized part (weight, scales, biases) is stacked on its own.
    import mlx.core as mx

    weights = {"blk.0.attn_q.weight": mx.zeros((4, 4))}
    for e in range(12):
        for part, dtype in (("weight", mx.uint32), ("scales", mx.float16), ("biases", mx.float16)):
            weights[f"blk.3.ffn_down.{e}.{part}"] = mx.full((2, 5), e, dtype=dtype)
    out = archs.stack_experts(weights)
    assert sorted(out) == ["blk.0.attn_q.weight"] + [
        f"blk.3.ffn_down_exps.{p}" for p in ("biases", "scales", "weight")
    ]
    w = out["blk.3.ffn_down_exps.weight"]
    assert w.shape == (12, 2, 5) and w.dtype == mx.uint32
    assert np.array(w)[:, 0, 0].tolist() == list(range(12))


@pytest.mark.parametrize(
    ("arch", "md", "kind"),
    [("llama", {}, "llama"), ("llama", {"llama.expert_count": 0}, "llama"),
     ("llama", {"llama.expert_count": 8}, "mixtral"), ("qwen3moe", {}, "qwen3moe")],
)  # fmt: skip
def test_a_llama_file_with_experts_is_mixtral(arch, md, kind):
    assert archs.kind_of(arch, md) == kind


def test_experts_width_comes_from_their_weights_where_the_file_is_silent():
    # expert_feed_forward_length is optional in llama.cpp's loader.
    import mlx.core as mx

    md = {f"qwen3moe.{k}": v for k, v in [("embedding_length", 64), ("block_count", 2),
          ("attention.head_count", 4), ("feed_forward_length", 128), ("expert_count", 4),
          ("expert_used_count", 2)]}  # fmt: skip
    weights = {"model.layers.0.mlp.switch_mlp.gate_proj.weight": mx.zeros((4, 48, 8), mx.uint32)}
    cfg = archs.config_of(md, weights, "qwen3moe")
    assert cfg["moe_intermediate_size"] == 48 and cfg["num_experts_per_tok"] == 2
    md["qwen3moe.expert_feed_forward_length"] = 96
    assert archs.config_of(md, weights, "qwen3moe")["moe_intermediate_size"] == 96
