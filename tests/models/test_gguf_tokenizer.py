"""Tokenizer built from GGUF metadata."""

from pathlib import Path

import pytest
from mlx_lm.utils import load_tokenizer

from mlx_notebook.models import gguf as conv
from tests.gguf_fixture import build_tiny_gguf

SAMPLES = [
    "Hello, world! The quick brown fox.",
    "café naïve façade über straße",
    "emoji 😀🎉 and more 👍🏽",
    "東京タワー 北京 서울",
    "def f(x):\n    return x ** 2  # 12345\n\ttabs",
]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    import os

    root = tmp_path_factory.mktemp("tokcache")
    old = os.environ.get("MLX_NOTEBOOK_CACHE")
    os.environ["MLX_NOTEBOOK_CACHE"] = str(root)
    try:
        path, _, _ = build_tiny_gguf(tmp_path_factory.mktemp("g") / "t.gguf")
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as ex:  # MLX work off the main thread
            return ex.submit(conv.convert_gguf, path, "q").result()
    finally:
        if old is None:
            os.environ.pop("MLX_NOTEBOOK_CACHE")
        else:
            os.environ["MLX_NOTEBOOK_CACHE"] = old


def test_special_tokens_map_to_their_ids(converted):
    tok = load_tokenizer(Path(converted))
    vocab = tok.get_vocab()
    for special in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]:
        assert tok.encode(special, add_special_tokens=False) == [vocab[special]]
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id in tok.eos_token_ids
    assert tok.bos_token == "<|im_start|>"


@pytest.mark.parametrize("text", SAMPLES)
def test_decode_encode_round_trip(converted, text):
    tok = load_tokenizer(Path(converted))
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_digits_are_split_individually(converted):
    tok = load_tokenizer(Path(converted))
    ids = tok.encode("12345", add_special_tokens=False)
    assert len(ids) == 5


def test_chat_template_renders(converted):
    tok = load_tokenizer(Path(converted))
    out = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert out == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
