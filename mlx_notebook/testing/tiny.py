"""Small real models for tests and benchmarks: no downloads, built in a second.

- `build_tiny_model`: a random-weight llama with a real byte-level BPE
  tokenizer, written as an mlx-lm model directory.
- `quantize_model_dir`: an mlx-lm quantized copy of a model directory.
- `ScriptedModel`: an mlx-lm-compatible module whose next token follows a
  script, for deterministic stop-string, cancel and speculative tests.
- `VirtualClock`: time that moves only when told (or when a `ScriptedModel`
  "works"), for timing tests that a busy machine cannot disturb.
"""

from __future__ import annotations

import json
from pathlib import Path

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = (
    "The quick brown fox jumps over the lazy dog. Hello world! Stop here. "
    "Rivers flow to the sea; mountains rise above the clouds. 0123456789 "
    "def main():\n    print('hello')\n<img src=x onerror=alert(1)> <script>x</script> "
    "Paris is the capital of France. Speculative decoding drafts tokens, then verifies. "
    "café naïve façade 東京 😀 — über straße ЖЖЖ\n"
)


# A reasoning model's template, as Qwen3's: thinking opens the reply unless switched off,
# and an earlier reply's reasoning is rendered from its ``reasoning_content``.
THINKING_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% if message.get('reasoning_content') %}{{'<think>' + message['reasoning_content']"
    " + '</think>'}}{% endif %}{{message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think></think>' }}"
    "{% else %}{{ '<think>' }}{% endif %}{% endif %}"
)
THINK_SPECIALS = ["<think>", "</think>"]


def build_tokenizer(
    path: Path, vocab_size: int = 384, thinking: bool = False, all_bytes: bool = True
) -> None:
    """Train a byte-level BPE tokenizer and write tokenizer files to ``path``.

    Args:
        path: The directory to write.
        vocab_size: Tokens in the vocabulary.
        thinking: Add ``<think>``/``</think>`` and a template that opens thinking,
            as reasoning models have.
        all_bytes: Start from all 256 bytes, so any text can be written. False
            keeps only the corpus's characters (a vocabulary with gaps).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS + (THINK_SPECIALS if thinking else []),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if all_bytes else [],
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 20, trainer)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": None,
                "eos_token": "<|im_end|>",
                "unk_token": None,
                "pad_token": "<|endoftext|>",
                "chat_template": THINKING_CHATML if thinking else CHATML,
                "model_max_length": 4096,
            }
        )
    )
    (path / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
    )


def tiny_config(vocab_size: int, **over) -> dict:
    """An mlx-lm llama config of a few hundred kB."""
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "max_position_embeddings": 4096,
    }
    cfg.update(over)
    return cfg


def build_tiny_model(
    path: str | Path,
    seed: int = 0,
    vocab_size: int = 384,
    all_bytes: bool = True,
    thinking: bool = False,
    endless: bool = False,
    **config,
) -> Path:
    """Write a random-weight llama with a real BPE tokenizer to ``path``.

    Weights are scaled so logits have clear margins: greedy decoding is then
    stable under different prefill chunkings. With ``thinking`` its tokenizer has
    ``<think>`` markers and a template that opens a thinking block (see
    `build_tokenizer`): a reasoning model's shape, thinking random text.
    With ``endless`` the end-of-sequence token's (tied) embedding row is zero, so
    its logit is exactly 0, below the largest of the other random logits: greedy
    decoding runs until ``max_tokens`` or Stop, never racing a test to its end.

    Returns:
        The model directory, loadable with ``mlx_lm.load``.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_map
    from mlx_lm.models import llama

    path = Path(path)
    build_tokenizer(path, vocab_size, thinking=thinking, all_bytes=all_bytes)
    vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
    cfg = tiny_config(len(vocab), **config)
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(cfg))
    model.update(tree_map(lambda p: p * 3.0, model.parameters()))
    if endless:
        eos = vocab["<|im_end|>"]
        table = model.model.embed_tokens.weight
        model.model.embed_tokens.weight = table * (mx.arange(table.shape[0]) != eos)[:, None]
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def quantize_model_dir(
    src: str | Path,
    dst: str | Path,
    group_size: int,
    bits: int,
    dtype: str | None = None,
    symmetric: bool = False,
) -> Path:
    """Write an mlx-lm quantized copy of the model directory ``src`` to ``dst``.

    Quantized the way ``mlx_lm.convert -q`` does it (affine, every linear layer and
    the embedding), with the tokenizer files copied as they are. ``dtype``
    (``"bfloat16"``): the weights cast first, so scales and biases are stored in
    it, as in mlx-community's directories. ``symmetric``: every bias is then its
    scale times ``-2 ** (bits - 1)``, as a GGUF file's Q4_0 and Q8_0 blocks convert
    (the weights change; the file is still MLX's affine layout).

    Returns:
        ``dst``, loadable with ``mlx_lm.load``.
    """
    import shutil

    from mlx_lm.utils import load_model, quantize_model, save_config, save_model

    src, dst = Path(src), Path(dst)
    model, config = load_model(src)
    if dtype is not None:
        import mlx.core as mx

        model.set_dtype(getattr(mx, dtype))
    model, config = quantize_model(model, config, group_size, bits)
    if symmetric:
        import mlx.nn as nn

        for _, m in model.named_modules():
            if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
                m.biases = m.scales * -(2 ** (bits - 1))
    save_model(dst, model)
    save_config(config, dst / "config.json")
    for f in src.iterdir():
        if f.suffix != ".safetensors" and f.name not in ("config.json",) and f.is_file():
            shutil.copy(f, dst / f.name)
    return dst
