"""Write a tiny llama GGUF the way llama.cpp's converter does (permuted Q/K, Q4_1/Q8_0)."""

import json
from pathlib import Path

import numpy as np

from mlx_notebook.testing import CHATML, SPECIALS, build_tokenizer, tiny_config

Q4 = "Q4_1"
Q8 = "Q8_0"


def permute(w, n_head):
    # llama.cpp convert_hf_to_gguf.py: HF rotate-half order -> interleaved order
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def unpermute(w, n_head):
    return (
        w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def q6_k(rows: int, cols: int, rng) -> np.ndarray:
    """Random Q6_K blocks (``cols`` a multiple of 256) with modest scales: raw bytes."""
    import gguf

    _, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q6_K]
    raw = rng.integers(0, 256, size=(rows, cols // 256, size), dtype=np.uint8)
    raw[..., 192:208] = (
        rng.integers(-6, 7, size=(rows, cols // 256, 16)).astype(np.int8).view(np.uint8)
    )  # the 16 sub-block scales (int8)
    raw[..., 208:210] = np.frombuffer(np.float16(0.004).tobytes(), dtype=np.uint8)  # d
    return raw.reshape(rows, -1)


def build_tiny_gguf(path: Path, arch="llama", seed=0, float32=False, q6k_embedding=False):
    """Returns (gguf_path, hf_weights): the float32 weights a correct loader must reproduce.

    ``float32``: every tensor unquantized (a float32 GGUF), else Q4_1 and Q8_0 as above.
    ``q6k_embedding``: the token embedding in Q6_K, as llama.cpp's quantizer writes it
    (the model is 256 wide: a K-quant's rows are whole blocks of 256).
    """
    import gguf

    tok_dir = path.parent / (path.stem + "-tok")
    build_tokenizer(tok_dir)
    tj = json.loads((tok_dir / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
    cfg = tiny_config(len(tokens), **({"hidden_size": 256} if q6k_embedding else {}))
    E, L, F = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = E // H
    rng = np.random.default_rng(seed)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    T = gguf.GGMLQuantizationType
    hf, gg = {}, {}  # hf: reference weights (after quantization round trip)

    def put(hf_name, gg_name, w, qtype=None, perm_heads=None):
        stored = permute(w, perm_heads) if perm_heads else w
        if qtype is None or float32:
            gg[gg_name] = (stored, None)
            deq = stored
        else:
            q = gguf.quants.quantize(stored, getattr(T, qtype))
            gg[gg_name] = (q, getattr(T, qtype))
            deq = gguf.quants.dequantize(q, getattr(T, qtype)).reshape(stored.shape)
        hf[hf_name] = unpermute(deq, perm_heads) if perm_heads else deq

    if q6k_embedding:
        raw = q6_k(len(tokens), E, rng)
        gg["token_embd.weight"] = (raw, T.Q6_K)
        hf["model.embed_tokens.weight"] = gguf.quants.dequantize(raw, T.Q6_K)
    else:
        put("model.embed_tokens.weight", "token_embd.weight", r(len(tokens), E) * 5, Q8)
    put("model.norm.weight", "output_norm.weight", 1 + r(E))
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        put(p + "input_layernorm.weight", b + "attn_norm.weight", 1 + r(E))
        put(p + "post_attention_layernorm.weight", b + "ffn_norm.weight", 1 + r(E))
        put(p + "self_attn.q_proj.weight", b + "attn_q.weight", r(H * hd, E), Q4, H)
        put(p + "self_attn.k_proj.weight", b + "attn_k.weight", r(KV * hd, E), Q4, KV)
        put(p + "self_attn.v_proj.weight", b + "attn_v.weight", r(KV * hd, E), Q4)
        put(p + "self_attn.o_proj.weight", b + "attn_output.weight", r(E, H * hd), Q4)
        put(p + "mlp.gate_proj.weight", b + "ffn_gate.weight", r(F, E), Q4)
        put(p + "mlp.up_proj.weight", b + "ffn_up.weight", r(F, E), Q4)
        put(p + "mlp.down_proj.weight", b + "ffn_down.weight", r(E, F), Q4)

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(L)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    for name, (arr, qtype) in gg.items():
        if qtype is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, hf, cfg
