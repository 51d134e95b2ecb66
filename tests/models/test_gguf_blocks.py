"""GGUF K-quant and Q5 blocks read into MLX's quantized layout: exact, or within a step."""

import json

import numpy as np
import pytest

from mlx_notebook.models import gguf as conv
from mlx_notebook.models import gguf_blocks as blocks
from tests.gguf_arch_fixture import build_arch_gguf
from tests.gguf_fixture import K_SCALES, k_blocks

# Each type: the bits it is stored at, and whether the mapping is exact.
KINDS = {
    "Q4_0": (4, True), "Q4_1": (4, True), "Q8_0": (8, True), "Q5_0": (5, True),
    "Q5_1": (5, True), "Q4_K": (4, True), "Q5_K": (5, True), "Q2_K": (8, False),
    "Q3_K": (8, False), "Q6_K": (6, False),
}  # fmt: skip


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_NOTEBOOK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def raw_of(kind: str, rows: int, cols: int, seed: int = 0):
    """Random blocks of ``kind`` and what llama.cpp's own reader (gguf-py) makes of them."""
    import gguf

    rng = np.random.default_rng(seed)
    T = getattr(gguf.GGMLQuantizationType, kind)
    if kind in K_SCALES:
        raw = k_blocks(kind, rows, cols, rng)
    else:
        raw = gguf.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), T)
    return raw, gguf.quants.dequantize(raw, T).reshape(rows, cols)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_block_type_becomes_mlx_affine_groups_of_32(kind):
    import mlx.core as mx

    bits, exact = KINDS[kind]
    raw, want = raw_of(kind, 6, 512)
    q, scales, biases, got_bits = blocks._blocks(raw, blocks.__dict__[kind], 512)
    assert got_bits == bits and q.max() < 2**bits
    packed = blocks._pack(q, bits)
    assert packed.shape == (6, 512 * bits // 32) and scales.shape == (6, 16)
    # As stored: float16 scales and biases (as MLX's own reader stores Q4_0 and Q4_1),
    # computed here in float32.
    s32, b32 = (a.astype(np.float16).astype(np.float32) for a in (scales, biases))
    deq = np.array(
        mx.dequantize(mx.array(packed), mx.array(s32), mx.array(b32), group_size=32, bits=bits)
    )
    err = np.abs(deq - want).reshape(6, -1, 32)
    s32, b32 = s32[..., None], b32[..., None]
    if exact:  # the same values; a K-quant's d * scale rounded to float16 (2**-11)
        rel = 2**-10 if kind in ("Q4_K", "Q5_K") else 2**-20
        top = 31 if kind.startswith("Q5") else 2**bits - 1  # the largest q in the file
        assert (err <= rel * (np.abs(s32) * top + np.abs(b32)) + 1e-9).all()
    else:  # re-quantized: within half a step of the stored grid (1/(2 (2^bits - 1)) of the range)
        step = np.abs(s32)  # Q6_K's scales keep their sign
        bound = 1 if kind == "Q6_K" else 0.5  # Q6_K: the top of the grid clips (below)
        assert (err <= step * bound * (1 + 2**-6) + 1e-9).all(), float((err / step).max())
        assert err.max() > 0  # not exact: the docs say so


def test_q6_k_keeps_the_larger_half_of_each_group_and_is_symmetric():
    # Each group of 32 is two Q6_K sub-blocks of 16: the one of larger scale keeps its
    # values (but for float16's rounding of the scale), the other rounds to its grid;
    # every bias is -32 times the scale, so the fast path keeps none (6.5 bits a weight).
    raw, want = raw_of("Q6_K", 6, 512)
    q, scales, biases, bits = blocks._blocks(raw, blocks.Q6_K, 512)
    assert bits == 6 and q.max() < 64
    np.testing.assert_array_equal(biases, -32 * scales)
    s = scales.astype(np.float16).astype(np.float32)[..., None, None]
    got = (q.reshape(6, 16, 2, 16).astype(np.float32) - 32) * s
    err = np.abs(got - want.reshape(6, 16, 2, 16))
    kept = err.max(-1).min(-1)  # the better half of each group
    assert (kept <= 2**-10 * 32 * np.abs(s[..., 0, 0])).all()
    # The other half within half a step, but where its value is past the grid's top
    # (31 steps; its scale of opposite sign and nearly as large): clipped there.
    top = q.reshape(6, 16, 2, 16) == 63
    assert (err <= np.abs(s) / 2 * (1 + 2**-8) + 1e-9).all(where=~top)
    assert (err <= np.abs(s) * (1 + 32 * 2**-11) + 1e-9).all()  # the scale's float16 rounding


@pytest.mark.parametrize("kind", ["Q4_1", "Q5_K", "Q6_K"])
def test_a_matrix_decoded_by_slabs_of_rows_equals_it_decoded_whole(kind, monkeypatch):
    # Slabs bound the decoders' temporaries (a 262k-row embedding): same bytes out.
    raw, _ = raw_of(kind, 7, 512)
    whole = blocks._matrix(raw, blocks.__dict__[kind], 512)
    monkeypatch.setattr(blocks, "SLAB", 1100)  # two rows a slab: the last one shorter
    for a, b in zip(whole, blocks._matrix(raw, blocks.__dict__[kind], 512)):
        assert a.dtype == b.dtype and (a == b).all()
    assert whole[1].dtype == np.float16 and whole[0].shape == (7, 512 * KINDS[kind][0] // 32)


@pytest.mark.parametrize(
    ("arch", "kind"),
    [("qwen2", k) for k in ("Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "Q3_K", "Q2_K")]
    + [("qwen3moe", "Q4_K"), ("qwen3moe", "Q5_K"), ("mixtral", "Q4_K")]  # experts' 3-D tensors
    + [("mixtral-split", "Q4_0"), ("mixtral-split", "Q4_K")],  # one tensor an expert
)
def test_a_file_of_each_type_loads_quantized_and_decodes_as_mlx_lm_does(
    engine, cache, tmp_path, arch, kind
):
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.generate import generate_step

    from mlx_notebook.engine import Request

    split = arch.endswith("-split")  # a Mixtral file from before llama.cpp stacked experts
    path, ref = build_arch_gguf(
        tmp_path / f"{kind}.gguf", arch.removesuffix("-split"), kind, split_experts=split
    )
    text = "The 12 ships sailed at dawn"
    ids = [5, 17, 42, 99, 3, 250, 7, 64, 128, 11, 200, 31]

    def run():
        out = conv.convert_gguf(path, "q")
        model, tok = load(str(out))  # stock mlx-lm on the converted weights
        prompt = mx.array(tok.encode(text))
        want = [t for (t, _), _ in zip(generate_step(prompt, model), range(8))]
        logits = np.array(model(mx.array([ids]))[0].astype(mx.float32))
        truth = np.array(ref(mx.array([ids]))[0].astype(mx.float32))
        return out, want, logits, truth

    out, want, ours, truth = engine.call(run).result()
    quant = json.loads((out / "config.json").read_text())["quantization"]
    layers = {k: v for k, v in quant.items() if isinstance(v, dict)}
    assert layers and {v["bits"] for v in layers.values()} == {KINDS[kind][0]}
    assert {v["group_size"] for v in layers.values()} == {32}
    # Against the file's own values (gguf-py's dequantization) in float32.
    if kind == "Q6_K":
        # At 6 bits the weights move 1.2 % (rms) and this random model amplifies that
        # about 9x in its logits (0.10 rms; min-max 6-bit groups: 1.5 % and 0.15): a
        # wrong layout or name would leave them unrelated (about 1.4).
        rel = float(np.sqrt(np.mean((ours - truth) ** 2) / np.mean(truth**2)))
        assert rel < 0.2, rel
    else:
        tol = 2e-2 if KINDS[kind][1] else 0.1
        np.testing.assert_allclose(ours, truth, atol=tol * np.abs(truth).max())
    # The engine (fast path on, where the CPU has it) gives mlx-lm's greedy ids.
    res = engine.submit(
        Request(text, model=str(path), chat=False, max_tokens=8, temperature=0,
                repetition_penalty=1)
    ).result(timeout=300)  # fmt: skip
    assert res.token_ids == want


def test_a_q4_k_file_loads_at_4_bits_near_its_own_size(engine, cache, tmp_path):
    # Q4_K is 4.5 bits a weight in the file; 4 bits and a float16 scale and bias per 32
    # here (5), where MLX's reader gave float16 (16) and the CPU load widened it (32).
    path, _ = build_arch_gguf(tmp_path / "q4k.gguf", "qwen2", "Q4_K")
    out = engine.call(lambda: conv.convert_gguf(path, "q")).result()
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "np") as f:
        sizes = {k: f.get_tensor(k).nbytes for k in f.keys()}
    mats = sum(v for k, v in sizes.items() if not k.endswith("norm.weight"))
    file_mats = sum(
        t.n_bytes for t in __import__("gguf").GGUFReader(str(path)).tensors if len(t.shape) == 2
    )
    assert mats / file_mats == pytest.approx(5 / 4.5, rel=0.02)


def test_a_file_read_by_blocks_keeps_its_float_tensors(tmp_path):
    # A K-quant file's float tensors (a bfloat16 embedding, float32 norms) come through.
    import gguf
    import mlx.core as mx

    from tests.gguf_fixture import write_out

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((8, 256)).astype(np.float32)
    norm = rng.standard_normal(256).astype(np.float32)
    raw, want = raw_of("Q4_K", 4, 256)
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    T = gguf.GGMLQuantizationType
    w.add_tensor("token_embd.weight", gguf.quants.quantize(emb, T.BF16), raw_dtype=T.BF16)
    w.add_tensor("output_norm.weight", norm)
    w.add_tensor("blk.0.attn_q.weight", raw, raw_dtype=T.Q4_K)
    write_out(w)
    weights, md = blocks.read_blocks(tmp_path / "m.gguf")
    assert md["general.architecture"] == "llama"
    assert weights["token_embd.weight"].dtype == mx.bfloat16
    bf = gguf.quants.dequantize(gguf.quants.quantize(emb, T.BF16), T.BF16).reshape(emb.shape)
    assert (np.array(weights["token_embd.weight"].astype(mx.float32)) == bf).all()
    assert (np.array(weights["output_norm.weight"]) == norm).all()
    q = weights["blk.0.attn_q.weight"]
    deq = mx.dequantize(
        q,
        weights["blk.0.attn_q.scales"].astype(mx.float32),
        weights["blk.0.attn_q.biases"].astype(mx.float32),
        group_size=32,
        bits=4,
    )
    np.testing.assert_allclose(np.array(deq), want, atol=2**-9 * np.abs(want).max())
