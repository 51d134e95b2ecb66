"""Llama 3's RoPE scaling, given back from the one tensor llama.cpp keeps of it.

llama.cpp's converter writes Llama 3.1/3.2's ``rope_scaling`` (``rope_type:
llama3``) into no metadata key: only into ``rope_freqs.weight``, the divisor of
each rotary frequency. mlx-lm builds the same divisors from the config
(``Llama3RoPE``), so the config is found by trying the parameters these models
use and keeping the one whose divisors are the file's. Dropping the tensor
instead would run the model with unscaled RoPE: wrong text, and no error.
"""

from __future__ import annotations

from itertools import product

# The Llama 3.x releases use factor 8 (3.1) or 32 (3.2), low 1, high 4, an original
# context of 8,192; the grid also covers fine-tunes that changed them.
ORIGINAL_CONTEXTS = (8192, 4096, 2048, 16384, 32768, 65536, 131072)
LOW_FACTORS = (1.0, 0.5, 2.0)
HIGH_FACTORS = (4.0, 2.0, 8.0)


def llama3_scaling(divisors, head_dim: int, base: float, name: str = "") -> dict | None:
    """The ``rope_scaling`` whose per-frequency divisors are ``divisors``.

    Args:
        divisors: The file's ``rope_freqs.weight`` (``head_dim // 2`` values).
        head_dim: The rotary dimensions.
        base: ``rope_theta``.
        name: The file's name, for the error.

    Returns:
        mlx-lm's ``rope_scaling`` dict, or None when every divisor is 1.

    Raises:
        ValueError: No Llama 3 scaling gives these divisors (one line).
    """
    import mlx.core as mx
    from mlx_lm.models.rope_utils import Llama3RoPE

    divisors = divisors.astype(mx.float32)
    if divisors.shape != (head_dim // 2,):
        raise ValueError(
            f"rope_freqs of shape {divisors.shape} for {head_dim} rotary dims ({name})"
        )
    factor = mx.max(divisors).item()
    if mx.all(divisors == 1).item():
        return None
    plain = base ** (mx.arange(0, head_dim, 2) / head_dim)
    for orig, low, high in product(ORIGINAL_CONTEXTS, LOW_FACTORS, HIGH_FACTORS):
        cand = {
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": low,
            "high_freq_factor": high,
            "original_max_position_embeddings": orig,
        }
        got = Llama3RoPE(head_dim, base=base, scaling_config=cand)._freqs / plain
        if mx.allclose(got, divisors, rtol=1e-3, atol=1e-6).item():  # a file may store F16
            return cand
    raise ValueError(
        f"GGUF rope_freqs that no Llama 3 RoPE scaling gives (factor {factor:g}): not "
        f"supported ({name})"
    )
