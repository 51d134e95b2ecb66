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
    """Random Q6_K blocks (``cols`` a multiple of 256) with modest scales: raw bytes.

    The sub-block scales as llama.cpp's quantizer leaves them: magnitudes in the upper
    half of int8 (the block's largest at about 127), signs either way.
    """
    import gguf

    _, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q6_K]
    raw = rng.integers(0, 256, size=(rows, cols // 256, size), dtype=np.uint8)
    shape = (rows, cols // 256, 16)
    sc = rng.integers(64, 128, size=shape) * rng.choice([-1, 1], size=shape)
    raw[..., 192:208] = sc.astype(np.int8).view(np.uint8)  # the 16 sub-block scales (int8)
    raw[..., 208:210] = np.frombuffer(np.float16(0.0001).tobytes(), dtype=np.uint8)  # d
    return raw.reshape(rows, -1)


# Where each K-quant keeps its float16 super-block scales (byte offsets in a block),
# and modest values for them: random bytes elsewhere are valid blocks.
K_SCALES = {
    "Q2_K": [(80, 0.01), (82, 0.005)],
    "Q3_K": [(108, 0.004)],
    "Q4_K": [(0, 0.0005), (2, 0.001)],
    "Q5_K": [(0, 0.00025), (2, 0.001)],
    "Q6_K": [(208, 0.0001)],
}


def k_blocks(kind: str, rows: int, cols: int, rng) -> np.ndarray:
    """Random ``kind`` K-quant blocks (``cols`` a multiple of 256): raw bytes per row.

    gguf-py reads every K-quant but writes none; llama.cpp's quantizer is a build away.
    """
    import gguf

    if kind == "Q6_K":
        return q6_k(rows, cols, rng)
    _, size = gguf.GGML_QUANT_SIZES[getattr(gguf.GGMLQuantizationType, kind)]
    raw = rng.integers(0, 256, size=(rows, cols // 256, size), dtype=np.uint8)
    for at, value in K_SCALES[kind]:
        raw[..., at : at + 2] = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)
    return raw.reshape(rows, -1)


def llama3_rope_factors(head_dim, base, factor, low, high, orig) -> np.ndarray:
    """``rope_freqs.weight`` as llama.cpp's converter computes it for Llama 3's scaling."""
    import math

    out = []
    for f in 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)):
        wavelen = 2 * math.pi / f
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def build_tiny_gguf(
    path: Path,
    arch="llama",
    seed=0,
    float32=False,
    q6k_embedding=False,
    rope_scaling=None,
    sentencepiece=None,
):
    """Returns (gguf_path, hf_weights): the float32 weights a correct loader must reproduce.

    ``float32``: every tensor unquantized (a float32 GGUF), else Q4_1 and Q8_0 as above.
    ``q6k_embedding``: the token embedding in Q6_K, as llama.cpp's quantizer writes it
    (the model is 256 wide: a K-quant's rows are whole blocks of 256).
    ``rope_scaling``: Llama 3's (mlx-lm's dict), written as llama.cpp does: only as
    the ``rope_freqs.weight`` tensor.
    ``sentencepiece``: a SentencePiece processor whose vocabulary the file carries (as
    Llama 2's and Mistral's files do) instead of the byte-level BPE one.
    """
    import gguf

    if sentencepiece is not None:
        tokens = [sentencepiece.id_to_piece(i) for i in range(sentencepiece.get_piece_size())]
    else:
        tokens, merges = _tokens(path)
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
    if rope_scaling:
        cfg["rope_scaling"] = rope_scaling
        rs = rope_scaling
        gg["rope_freqs.weight"] = (
            llama3_rope_factors(hd, cfg["rope_theta"], rs["factor"], rs["low_freq_factor"],
                                rs["high_freq_factor"], rs["original_max_position_embeddings"]),
            None,
        )  # fmt: skip
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
    _add_shape(w, cfg)
    if sentencepiece is not None:
        add_spm_tokenizer(w, sentencepiece)
    else:
        _add_tokenizer(w, tokens, merges, "smollm")
    for name, (arr, qtype) in gg.items():
        if qtype is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)
    write_out(w)
    return path, hf, cfg


def _add_shape(w, cfg: dict) -> None:
    """The model's shape as llama.cpp's converter writes it, under ``w``'s architecture."""
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    if "head_dim" in cfg:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])


def write_out(w) -> None:
    """Header, metadata and tensors to the file; closed."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _tokens(path: Path) -> tuple[list[str], list[str]]:
    """The tiny tokenizer's tokens (by id) and merges, built beside ``path``."""
    tok_dir = path.parent / (path.stem + "-tok")
    build_tokenizer(tok_dir)
    tj = json.loads((tok_dir / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
    return tokens, merges


def _add_tokenizer(w, tokens: list[str], merges: list[str], pre: str) -> None:
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)


def sentencepiece_model(text: str, vocab_size: int = 400, dummy_prefix: bool = True):
    """A SentencePiece BPE model trained on ``text``, set up as Llama 2's is (as Gemma's,
    no space in front of the text, with ``dummy_prefix=False``)."""
    import io

    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(line for line in text.splitlines() if line.strip()),
        model_writer=buf, vocab_size=vocab_size, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, minloglevel=2,
        # Llama 2's and Mistral's: no normalization (llama.cpp applies none either).
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        split_digits=True, allow_whitespace_only_pieces=True,
        control_symbols=["<end_of_turn>"],  # Gemma's end of a turn
        add_dummy_prefix=dummy_prefix,
    )  # fmt: skip
    return spm.SentencePieceProcessor(model_proto=buf.getvalue())


def add_spm_tokenizer(w, sp) -> list[str]:
    """``sp``'s vocabulary as llama.cpp's converter writes a SentencePiece one; its tokens."""
    n = sp.get_piece_size()
    tokens = [sp.id_to_piece(i) for i in range(n)]

    def kind(i: int) -> int:  # llama.cpp's token types
        if sp.is_unknown(i):
            return 2
        if sp.is_control(i):
            return 3
        if sp.is_unused(i):
            return 5
        return 6 if sp.is_byte(i) else 1

    w.add_vocab_size(n)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([sp.get_score(i) for i in range(n)])
    w.add_token_types([kind(i) for i in range(n)])
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(sp.encode("a", out_type=str)[0].startswith("\u2581"))
    return tokens
