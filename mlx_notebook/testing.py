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
import time
from collections.abc import Callable, Sequence
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


def quantize_model_dir(src: str | Path, dst: str | Path, group_size: int, bits: int) -> Path:
    """Write an mlx-lm quantized copy of the model directory ``src`` to ``dst``.

    Quantized the way ``mlx_lm.convert -q`` does it (affine, every linear layer and
    the embedding), with the tokenizer files copied as they are.

    Returns:
        ``dst``, loadable with ``mlx_lm.load``.
    """
    import shutil

    from mlx_lm.utils import load_model, quantize_model, save_config, save_model

    src, dst = Path(src), Path(dst)
    model, config = load_model(src)
    model, config = quantize_model(model, config, group_size, bits)
    save_model(dst, model)
    save_config(config, dst / "config.json")
    for f in src.iterdir():
        if f.suffix != ".safetensors" and f.name not in ("config.json",) and f.is_file():
            shutil.copy(f, dst / f.name)
    return dst


class VirtualClock:
    """Seconds that pass only through `sleep`, which returns at once.

    Give it to code that takes a clock (a view's, ``mlx_notebook.engine.prefill.clock``)
    and to a `ScriptedModel`: measured times are then exactly what the test or the
    model's script spent, however loaded the machine is.
    """

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        """The current virtual time in seconds."""
        return self.now

    def sleep(self, seconds: float) -> None:
        """Advance the clock by ``seconds``."""
        self.now += seconds


class ScriptedModel:
    """A fake-free stand-in for an LM: real KV cache, logits from a rule.

    The token after position ``p`` (0-based, counting the prompt) is
    ``rule(p, token_at_p)``. Build it on the worker thread (``engine.call``).

    Args:
        vocab_size: Logit width.
        rule: ``(position, token) -> next token``.
        delay_s: Sleep per forward call, to make cancel timing observable.
        token_delay_s: Extra sleep per input token, so prefill cost grows with length.
        pos_delay_s: Extra sleep per input token per earlier token, as attention costs.
        fail_at: Raise RuntimeError when a forward call reaches this position.
        clock: Spend the delays on this `VirtualClock` instead of sleeping.
    """

    def __init__(
        self,
        vocab_size: int,
        rule: Callable[[int, int], int],
        delay_s: float = 0.0,
        token_delay_s: float = 0.0,
        fail_at: int | None = None,
        pos_delay_s: float = 0.0,
        clock: VirtualClock | None = None,
    ) -> None:
        import mlx.nn as nn

        self.vocab_size = vocab_size
        self.rule = rule
        self.delay_s = delay_s
        self.token_delay_s = token_delay_s
        self.pos_delay_s = pos_delay_s
        self.fail_at = fail_at
        self.sleep = time.sleep if clock is None else clock.sleep
        self.layers = [nn.Identity()]  # one KV cache slot
        self.calls = 0

    def parameters(self):
        """No weights."""
        return {}

    def set_dtype(self, dtype) -> None:
        """Nothing to cast."""

    def __call__(self, inputs, cache=None):
        """Logits [1, L, vocab] peaked at the rule's next token for each input position."""
        import mlx.core as mx

        self.calls += 1
        batch, c = inputs.tolist(), cache[0]
        # A batched cache (several rows, left-padded) has one offset per row.
        starts = c.offset.tolist() if isinstance(c.offset, mx.array) else [c.offset]
        n, start = len(batch[0]), max(starts)
        # One sleep per call, whatever the batch: decoding B rows costs about one row.
        wait = self.delay_s + self.token_delay_s * n + self.pos_delay_s * n * (start + n / 2)
        if wait:
            self.sleep(wait)
        if self.fail_at is not None and start + n > self.fail_at:
            raise RuntimeError(f"scripted failure at position {self.fail_at}")
        kv = mx.zeros((len(batch), 1, n, 1))
        c.update_and_fetch(kv, kv)
        rows = [[self.rule(s + i, t) for i, t in enumerate(ids)] for s, ids in zip(starts, batch)]
        logits = mx.full((len(batch), n, self.vocab_size), -30.0)
        return logits + 60.0 * mx.eye(self.vocab_size)[mx.array(rows)]


def looping_model(tokenizer, text: str, delay_s: float = 0.0) -> ScriptedModel:
    """A `ScriptedModel` that repeats ``text``'s tokens forever: a reply that never ends.

    For tests that must stop a reply: a real model may end its text before the Stop.
    Build it on the worker thread (``engine.call``), or register it with
    ``Engine.register_model``.
    """
    words = tokenizer.encode(text, add_special_tokens=False)
    vocab = len(tokenizer.get_vocab())
    return ScriptedModel(vocab, lambda pos, _tok: words[pos % len(words)], delay_s=delay_s)


def script_rule(prompt_len: int, outputs: Sequence[int], fill: int) -> Callable[[int, int], int]:
    """Rule that emits ``outputs`` right after a prompt of ``prompt_len`` tokens."""

    def rule(pos: int, _tok: int) -> int:
        k = pos - (prompt_len - 1)
        return outputs[k] if 0 <= k < len(outputs) else fill

    return rule
