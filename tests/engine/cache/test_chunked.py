"""Llama 4's chunked attention cache: rewound from snapshots, never trimmed past its chunk."""

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ChunkedKVCache, KVCache

from mlx_notebook.engine import Request
from mlx_notebook.engine.cache.caches import trims_exactly

TEXT = dict(
    attention_bias=False, attention_chunk_size=8, head_dim=16, hidden_size=64,
    interleave_moe_layer_step=4, intermediate_size=32, intermediate_size_mlp=128,
    max_position_embeddings=8192, model_type="llama4_text", num_attention_heads=4,
    num_experts_per_tok=1, num_hidden_layers=4, num_key_value_heads=2, num_local_experts=2,
    rms_norm_eps=1e-5, rope_scaling=None, rope_theta=10000.0, use_qk_norm=True,
)  # fmt: skip
PROMPT = "The quick brown fox jumps over the lazy dog. " * 3  # 63 tokens: eight chunks


@pytest.fixture(scope="module")
def llama4(tmp_path_factory):
    from mlx_notebook.testing.families import build_family

    return str(build_family("llama4", tmp_path_factory.mktemp("llama4"), text_config=TEXT))


def test_mlx_lm_says_a_chunked_cache_trims_but_it_cannot_go_past_its_chunk():
    c = ChunkedKVCache(8)
    for _ in range(3):  # 24 tokens, 8 at a time: the front is dropped as it goes
        c.maybe_trim_front()
        c.update_and_fetch(mx.ones((1, 2, 8, 4)), mx.ones((1, 2, 8, 4)))
    c.maybe_trim_front()
    assert c.is_trimmable() and c.trim(17) < 17  # the defect: it says yes, then cannot
    assert not trims_exactly([ChunkedKVCache(8), KVCache()])
    assert trims_exactly([KVCache(), KVCache()])


def run(engine, model, prompt=PROMPT, **kw):
    req = Request(prompt, model=model, chat=False, max_tokens=12, temperature=0, **kw)
    return engine.submit(req).result()


def test_a_second_identical_prompt_reuses_the_prefix_and_gives_the_same_ids(engine, llama4):
    first = run(engine, llama4)
    again = run(engine, llama4)  # failed: "cache trimmed 9 of 24 tokens", or other ids
    assert again.token_ids == first.token_ids and again.stats.cached_tokens > 0
    fresh = run(engine, llama4, reuse_cache=False)
    assert fresh.token_ids == first.token_ids
    assert run(engine, llama4, batch=False).token_ids == first.token_ids


def test_lookup_drafts_and_an_extended_prompt_equal_normal_decoding(engine, llama4):
    base = run(engine, llama4, reuse_cache=False)
    assert run(engine, llama4, draft="lookup", lookup_ngram=1).token_ids == base.token_ids
    longer = PROMPT + "And then the fox"
    cached = run(engine, llama4, longer)
    assert cached.token_ids == run(engine, llama4, longer, reuse_cache=False).token_ids
