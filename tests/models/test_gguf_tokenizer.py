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


@pytest.mark.parametrize("pre", ["llama-bpe", "tekken", "smollm"])
def test_llama3_files_ignore_merges_and_add_a_bos_unless_they_say(tmp_path, pre):
    from tokenizers import Tokenizer

    from mlx_notebook.models.gguf_tokenizer import write_tokenizer

    # "abc" is in the vocabulary, but no merge builds it from "ab" + "c".
    tokens = ["<|begin_of_text|>", "a", "b", "c", "ab", "abc"]
    md = {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.token_type": [3, 1, 1, 1, 1, 1],
        "tokenizer.ggml.bos_token_id": 0,
    }
    write_tokenizer(md, tmp_path)
    ids = Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode("abc").ids
    if pre != "smollm":  # as llama.cpp and Llama 3's and tekken's tokenizer.json do
        assert ids == [0, 5]
    else:
        assert ids == [4, 3]


def test_llama3_turns_end_on_eot_and_eom_too(tmp_path):
    import json

    from mlx_notebook.models.gguf_tokenizer import write_tokenizer

    tokens = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "a"]
    md = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "llama-bpe",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": [],
        "tokenizer.ggml.token_type": [3, 3, 3, 3, 1],
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 1,  # a base model's: chat turns end on <|eot_id|>
    }
    write_tokenizer(md, tmp_path)
    gen = json.loads((tmp_path / "generation_config.json").read_text())
    assert gen == {"eos_token_id": [1, 2, 3]}
    md["tokenizer.ggml.pre"] = "smollm"  # other files: their own eos only, as before
    write_tokenizer(md, tmp_path / "other")
    assert not (tmp_path / "other" / "generation_config.json").exists()


@pytest.fixture(scope="module", params=[True, False], ids=["llama2", "gemma"])
def spm_files(tmp_path_factory, request):
    """A SentencePiece BPE model and a tiny llama GGUF carrying it: Llama 2's kind, and
    Gemma's (no space put in front of the text: ``add_space_prefix`` false)."""
    import os

    from tests.gguf_fixture import sentencepiece_model

    # A frozen text (32 KB of the guides as they were): editing a page must not change
    # the vocabulary, and with it what the tiny random model samples.
    text = (Path(__file__).parent / "spm_corpus.txt").read_text()
    sp = sentencepiece_model(text + "\n" + "\n".join(SAMPLES[:2]), dummy_prefix=request.param)
    assert sp.encode("a", out_type=str)[0].startswith("\u2581") == request.param
    root = tmp_path_factory.mktemp("spm")
    old = os.environ.get("MLX_NOTEBOOK_CACHE")
    os.environ["MLX_NOTEBOOK_CACHE"] = str(root / "cache")
    try:
        path, _, _ = build_tiny_gguf(root / "spm.gguf", sentencepiece=sp)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as ex:  # MLX work off the main thread
            return sp, ex.submit(conv.convert_gguf, path, "q").result(), path
    finally:
        if old is None:
            os.environ.pop("MLX_NOTEBOOK_CACHE")
        else:
            os.environ["MLX_NOTEBOOK_CACHE"] = old


SPM_SAMPLES = [
    *SAMPLES,
    "",
    " leading space and  two  spaces, trailing ",
    "new\nlines\n\nand\ttabs",
    "The model's tokens: 1234567890 and ++--**",
    "GGUF files of the llama architecture are converted once",
]


@pytest.mark.parametrize("text", SPM_SAMPLES)
def test_a_sentencepiece_vocabulary_encodes_as_sentencepiece_does(spm_files, text):
    # SentencePiece itself is the reference: llama.cpp's tokenizer follows its merges
    # by score and its byte fallback (the samples have characters the model never saw).
    sp, out, _ = spm_files
    tok = load_tokenizer(out)
    want = [sp.bos_id(), *sp.encode(text)]
    assert tok.encode(text) == want
    assert tok.decode(want[1:]) == sp.decode(want[1:])
    assert (tok.bos_token, tok.eos_token) == ("<s>", "</s>")


def test_a_sentencepiece_file_streams_its_text_through_the_engine(spm_files, engine):
    from mlx_notebook.engine import Request, Token

    sp, _, path = spm_files
    job = engine.submit(Request("Hello café 東京", model=str(path), chat=False, max_tokens=24))
    pieces = [ev.text for ev in job.events() if isinstance(ev, Token)]
    res = job.result(timeout=300)
    ended = res.finish_reason == "stop" and res.token_ids[-1] in (
        sp.eos_id(),
        sp.piece_to_id("<end_of_turn>"),
    )
    assert len(res.token_ids) == 24 or ended
    assert "".join(pieces) == res.text  # bytes held back before the end of text too
    assert res.text == sp.decode(res.token_ids)  # streamed as SentencePiece decodes it


def test_stray_bytes_stream_as_sentencepiece_decodes_them(spm_files):
    # A truncated UTF-8 sequence before a whole piece: one U+FFFD a byte, as SentencePiece
    # (mlx-lm's own detokenizer gave one for the whole sequence).
    from mlx_notebook.models.gguf_tokenizer import bytes_as_sentencepiece

    sp, out, _ = spm_files
    tok = load_tokenizer(out)
    bytes_as_sentencepiece(tok)
    vocab = tok.get_vocab()
    word = sp.encode("rivers")
    for ids in ([vocab["<0xE2>"], vocab["<0x82>"], *word], [*word, vocab["<0xE6>"]]):
        detok = tok.detokenizer
        for i in ids:
            detok.add_token(i)
        detok.finalize()
        assert detok.text == sp.decode(ids)
    assert sp.decode([vocab["<0xE2>"], vocab["<0x82>"], *word]).startswith("\ufffd\ufffd")


def test_a_sentencepiece_model_stops_on_its_turn_end_as_well_as_its_eos(spm_files):
    # llama.cpp ends generation on known turn ends among the control tokens (Gemma's
    # <end_of_turn>, Phi-3's <|end|>), not only on the file's one eos.
    import json

    sp, out, _ = spm_files
    ids = json.loads((out / "generation_config.json").read_text())["eos_token_id"]
    assert ids == sorted([sp.eos_id(), sp.piece_to_id("<end_of_turn>")])
    from mlx_lm.utils import load_config

    assert load_config(out)["eos_token_id"] == ids  # what mlx-lm's load stops on
