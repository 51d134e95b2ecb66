from mlx_lm import load

from mlx_notebook.testing import build_tiny_model


def test_tiny_model_builds_and_loads_fast(engine, tmp_path):
    # What keeps it fast, measured in bytes: a few hundred kB of weights.
    path = build_tiny_model(tmp_path / "m")
    assert (path / "model.safetensors").stat().st_size < 1_000_000

    def run():
        model, tok = load(str(path))
        return model, tok

    model, tok = engine.call(run).result()
    from mlx.utils import tree_flatten

    assert sum(v.size for _, v in tree_flatten(model.parameters())) < 200_000
    assert tok.decode(tok.encode("Hello world")) == "Hello world"  # a real BPE tokenizer


def test_the_endless_model_runs_to_max_tokens_where_tiny_ends(engine, tiny_dir, endless_dir):
    from mlx_notebook.engine import Request

    prompt = "Hello world. The quick brown fox"  # tiny_dir's greedy text ends after 358 tokens
    ended = engine.submit(Request(prompt, model=tiny_dir, chat=False, max_tokens=600)).result(60)
    endless = engine.submit(Request(prompt, model=endless_dir, chat=False, max_tokens=600))
    assert ended.finish_reason == "stop" and len(ended.token_ids) < 600  # ended at EOS
    fin = endless.result(60)
    assert fin.finish_reason == "length" and len(fin.token_ids) == 600  # ran to the limit
