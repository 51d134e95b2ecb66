import pytest

from mlx_notebook.engine import Request
from mlx_notebook.notebook.compare import CompareRun, compare_requests

COPY = "Hello world. The quick brown fox. Hello world. The quick brown fox. Hello world."


def test_compare_requests_are_fair():
    normal, spec = compare_requests(Request("x", draft="lookup", num_draft_tokens=4))
    assert normal.draft is None and spec.draft == "lookup"
    assert not normal.reuse_cache and not spec.reuse_cache
    with pytest.raises(ValueError, match="draft"):
        compare_requests(Request("x"))


def test_sampled_divergence_is_reported_with_margin(engine, tiny_dir):
    req = Request(
        COPY,
        model=tiny_dir,
        chat=False,
        max_tokens=30,
        temperature=1.5,
        seed=1,
        draft="lookup",
        lookup_ngram=1,
        num_draft_tokens=4,
    )
    run = CompareRun(engine, req).start()
    res = run.wait(60)
    assert res.complete and res.identical is False and res.diverged_at is not None
    assert res.margin is not None and res.margin >= 0
    html = run.widget.children[0].value
    assert "texts differ at token" in html and "expected with sampling" in html


def test_compare_magic(ipshell, tiny_dir):
    ip = ipshell
    ip.run_line_magic("load_ext", "mlx_notebook")
    ip.run_cell_magic("generate", f"-m {tiny_dir} --compare --raw -n 20 --wait -o cmp", COPY)
    res = ip.user_ns["cmp"].wait()
    assert res.identical and res.speedup is not None
