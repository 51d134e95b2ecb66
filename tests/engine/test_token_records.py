"""Per-token records: the statistics of a known distribution, and the table's summaries."""

import math

import mlx.core as mx
import pytest

from mlx_notebook.engine.token_records import TokenRecord, TokenTable, position_stats


def test_position_stats_of_a_known_distribution():
    probs = [0.5, 0.25, 0.125, 0.125]
    logits = mx.array([[math.log(p) + 3.0 for p in probs]] * 2)  # a shift changes nothing
    lp, rank, ent, ids, tops = position_stats(logits, mx.array([1, 3]), top_k=2)
    assert lp == pytest.approx([math.log(0.25), math.log(0.125)], abs=1e-6)
    assert rank == [2, 3]  # ties share the better rank: two tokens are above 0.125
    assert ent[0] == pytest.approx(-sum(p * math.log(p) for p in probs), abs=1e-6)
    assert ids == [[0, 1], [0, 1]] and tops[0] == pytest.approx([math.log(0.5), math.log(0.25)])
    *_, none_ids, none_tops = position_stats(logits, mx.array([0, 0]), top_k=0)
    assert none_ids == [[], []] and none_tops == [[], []]


def test_table_perplexity_and_frame():
    table = TokenTable(
        TokenRecord(i, i, f"t{i}", math.log(p), 1, 0.0) for i, p in enumerate([0.5, 0.25])
    )
    assert table.mean_logprob == pytest.approx((math.log(0.5) + math.log(0.25)) / 2)
    assert table.perplexity == pytest.approx(math.sqrt(8))
    assert table[1].prob == pytest.approx(0.25)
    assert list(table.to_frame()["token"]) == ["t0", "t1"]
    assert math.isnan(TokenTable().perplexity)
