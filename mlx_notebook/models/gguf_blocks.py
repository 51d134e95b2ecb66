"""GGUF files with K-quants or Q5 blocks, read block by block into MLX's quantized layout.

MLX's own reader (``mx.load``) expands K-quants to float16 and refuses Q5_0, Q5_1,
Q3_K and Q5_K outright, so a Q4_K_M file would load at twice its size and a Q5_K_M
file not at all. Here every block type whose groups of 32 are affine maps onto MLX's
affine layout (``w = scale * q + bias``, groups of 32) exactly, but for the float16
rounding of a K-quant's products ``d * scale`` (relative 2**-11, as MLX's reader
stores every scale in float16):

- Q4_0, Q4_1 and Q4_K at 4 bits (Q4_K: each 32-value sub-block's 6-bit scale and
  minimum times the super-block's ``d`` and ``dmin``);
- Q5_0, Q5_1 and Q5_K at 5 bits (MLX packs 5 bits as a bit stream, 20 bytes a group);
- Q8_0 at 8 bits.

Q2_K, Q3_K and Q6_K scale 16-value halves of a group separately, which no affine
group of 32 holds exactly: they are dequantized (gguf-py, llama.cpp's own reader) and
re-quantized: Q6_K at 6 bits, each group on the larger of its halves' scales (that
half exact, the other within half a step, one at the grid's top: 1.32x Q6_K's own
error against the float weights, measured in ``docs/guide/models.md``), Q2_K and Q3_K
at 8 (within 1/510 of a group's range). The fast path's kernels compute 4, 5, 6 and 8
bits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

GROUP = 32
# GGML type ids read here, and how each one is stored.
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16 = 0, 1, 2, 3, 6, 7, 8, 30
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = 10, 11, 12, 13, 14
# The bits each block type is stored at; the re-quantized types' values move (above).
BITS = {Q4_0: 4, Q4_1: 4, Q4_K: 4, Q5_0: 5, Q5_1: 5, Q5_K: 5, Q8_0: 8, Q6_K: 6, Q2_K: 8, Q3_K: 8}
REQUANTIZED = {Q2_K, Q3_K, Q6_K}
TYPES = {F32, F16, BF16} | set(BITS)
# The types MLX's reader refuses or turns into float16 (BF16 too, measured: out of
# float16's range, a bfloat16 weight would not survive): a file with any comes here.
NEEDS_BLOCKS = {Q5_0, Q5_1, BF16} | {Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}


def read_blocks(path: Path) -> tuple[dict, dict]:
    """``(weights, metadata)`` of a GGUF file, as ``mx.load(path, return_metadata=True)``.

    Quantized matrices come as ``name`` (packed ``uint32``), ``name``'s ``scales`` and
    ``biases`` siblings (``.weight`` -> ``.scales``/``.biases``), groups of 32.
    """
    import mlx.core as mx
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    md = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue  # the header's own counts
        md[name] = field.contents()
    weights = {}
    for t in reader.tensors:
        kind = int(t.tensor_type)
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        raw = np.asarray(t.data)
        if kind == F32 or kind == F16:
            weights[t.name] = mx.array(raw.reshape(shape))
        elif kind == BF16:
            weights[t.name] = mx.array(raw.view(np.uint16).reshape(shape)).view(mx.bfloat16)
        else:
            w, scales, biases = _matrix(raw.reshape(-1, raw.shape[-1]), kind, shape[-1])
            rows = shape[:-1]
            stem = t.name[: -len(".weight")] if t.name.endswith(".weight") else t.name
            weights[t.name] = mx.array(w.reshape(*rows, -1))
            weights[f"{stem}.scales"] = mx.array(scales.reshape(*rows, -1))
            weights[f"{stem}.biases"] = mx.array(biases.reshape(*rows, -1))
        mx.eval(weights[t.name])  # off the file's pages before the next tensor
    return weights, md


# Values decoded at a time: the decoders' temporaries (float32 for the re-quantized
# types, several arrays) stay near 100 MB whatever the matrix (a 262k-row embedding).
SLAB = 1 << 22


def _matrix(raw: np.ndarray, kind: int, cols: int) -> tuple:
    """One matrix's packed ``uint32`` values and float16 scales and biases, by slabs.

    float16, as MLX's reader stores Q4_0/Q4_1's (a GPU computes in it; the CPU loader
    widens to float32): a K-quant's ``d * scale`` is rounded there, 2**-11.
    """
    rows, step = raw.shape[0], max(1, SLAB // cols)
    bits = BITS[kind]
    w = np.empty((rows, cols * bits // 32), np.uint32)
    scales = np.empty((rows, cols // GROUP), np.float16)
    biases = np.empty_like(scales)
    for r in range(0, rows, step):
        q, s, b, _ = _blocks(raw[r : r + step], kind, cols)
        w[r : r + step], scales[r : r + step], biases[r : r + step] = _pack(q, bits), s, b
    return w, scales, biases


def _blocks(raw: np.ndarray, kind: int, cols: int) -> tuple:
    """``(q, scales, biases, bits)`` of one matrix's rows of raw blocks (``uint8``)."""
    rows = raw.shape[0]
    if kind == Q6_K:
        return (*_q6_k(raw, cols), 6)
    if kind in REQUANTIZED:
        from gguf import GGMLQuantizationType, dequantize

        w = dequantize(raw, GGMLQuantizationType(kind)).reshape(rows, cols)
        return (*_requantize(w.astype(np.float32, copy=False), BITS[kind]), BITS[kind])
    if kind in (Q4_K, Q5_K):
        b = raw.reshape(rows, cols // 256, -1)
        d, dmin = _f16(b[..., 0:2]), _f16(b[..., 2:4])
        sc, m = _scale_min(b[..., 4:16])  # (rows, blocks, 8)
        ql = b[..., -128:].reshape(rows, -1, 4, 32)  # four 64-value chunks of 32 bytes
        q = np.stack([ql & 15, ql >> 4], axis=3)  # (rows, blocks, 4, 2, 32)
        if kind == Q5_K:
            qh = b[..., 16:48][:, :, None, None, :]  # bit 2i and 2i+1 of each byte
            shift = (2 * np.arange(4)[:, None] + np.arange(2)[None, :]).astype(np.uint8)
            shift = shift[None, None, :, :, None]
            q = q | (((qh >> shift) & 1) << 4)
        scales = d[..., None] * sc
        biases = -(dmin[..., None] * m)
        return (
            q.reshape(rows, cols),
            scales.reshape(rows, -1),
            biases.reshape(rows, -1),
            BITS[kind],
        )
    b = raw.reshape(rows, cols // GROUP, -1)
    d = _f16(b[..., 0:2])
    if kind == Q8_0:
        q = (b[..., 2:34].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return q.reshape(rows, cols), d, -128 * d, 8
    lo = 4 if kind in (Q4_1, Q5_1) else 2  # after the minimum, where one is stored
    bias = _f16(b[..., 2:4]) if lo == 4 else None
    qh = None
    if kind in (Q5_0, Q5_1):
        qh = b[..., lo : lo + 4].copy().view(np.uint32)  # (rows, groups, 1)
        lo += 4
    qs = b[..., lo : lo + 16]
    q = np.concatenate([qs & 15, qs >> 4], axis=-1)  # values j and j + 16 share a byte
    if qh is not None:
        q = q | (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)
    if bias is None:
        bias = -(16 if kind == Q5_0 else 8) * d
    return q.reshape(rows, cols), d, bias, BITS[kind]


def _q6_k(raw: np.ndarray, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q6_K at 6 bits, symmetric: each group of 32 on the larger of its halves' scales.

    A Q6_K value is ``d * sc * (q - 32)``, each 16 values with their own 8-bit ``sc``.
    The group's scale is the half's with the larger magnitude, so that half keeps its
    ``q`` exactly (but for the scale's float16 rounding) and the other half's values
    round to that grid: within half its step, or one step where a value past the grid's
    top (31 steps; that half's scale of the other sign and nearly as large) is clipped.
    Symmetric groups keep no biases on the fast path: 6.5 bits a weight, the file's 6.56.
    """
    from gguf import GGMLQuantizationType, dequantize

    rows = raw.shape[0]
    w = dequantize(raw, GGMLQuantizationType.Q6_K).reshape(rows, -1, GROUP)
    b = raw.reshape(rows, cols // 256, -1)
    sub = (_f16(b[..., 208:210])[..., None] * b[..., 192:208].view(np.int8)).reshape(rows, -1, 2)
    big = np.where(np.abs(sub[..., 0]) >= np.abs(sub[..., 1]), sub[..., 0], sub[..., 1])
    scale = big.astype(np.float16).astype(np.float32)
    scale = np.where(scale == 0, 1.0, scale)  # both halves zero: every value 0
    q = np.clip(np.rint(w / scale[..., None]), -32, 31) + 32
    return q.astype(np.uint8).reshape(rows, cols), scale, -32 * scale


def _f16(two: np.ndarray) -> np.ndarray:
    """Little-endian float16 fields (the last axis, 2 bytes) as float32."""
    return np.ascontiguousarray(two).view(np.float16)[..., 0].astype(np.float32)


def _scale_min(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and minimums packed in a K-quant's 12 bytes (``get_scale_min_k4``)."""
    s = s.astype(np.uint8)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)], -1)
    m = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], -1)
    return sc.astype(np.float32), m.astype(np.float32)


def _requantize(w: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Affine ``bits``-bit over groups of 32, on the float16 scales and biases it is stored with.

    The scale is rounded up and the minimum down to float16 before the values are
    rounded to it, so every value stays within half a step of the stored grid.
    """
    g = w.reshape(w.shape[0], -1, GROUP)
    lo, hi = g.min(-1), g.max(-1)
    lo16 = lo.astype(np.float16)
    lo16 = np.where(lo16.astype(np.float32) > lo, np.nextafter(lo16, np.float16(-np.inf)), lo16)
    top = 2**bits - 1
    scale = np.where(hi > lo, (hi - lo16.astype(np.float32)) / top, 1.0)
    s16 = scale.astype(np.float16)
    s16 = np.where(s16.astype(np.float32) < scale, np.nextafter(s16, np.float16(np.inf)), s16)
    lo32, s32 = lo16.astype(np.float32), s16.astype(np.float32)
    q = np.clip(np.rint((g - lo32[..., None]) / s32[..., None]), 0, top).astype(np.uint8)
    return q.reshape(w.shape), s32, lo32


def _pack(q: np.ndarray, bits: int) -> np.ndarray:
    """Values (``uint8``, below ``2**bits``) packed into ``uint32`` as MLX lays them out.

    MLX lays a row out as one little-endian bit stream, element k at bit ``k * bits``:
    each 8 values fill ``bits`` bytes (for 4 and 8 bits too).
    """
    v = q.reshape(q.shape[0], -1, 8).astype(np.uint64)
    word = np.bitwise_or.reduce(v << (bits * np.arange(8, dtype=np.uint64)), axis=-1)
    row = word[..., None].view(np.uint8)[..., :bits]  # little-endian: the low bytes first
    return np.ascontiguousarray(row).reshape(q.shape[0], -1).view(np.uint32)
