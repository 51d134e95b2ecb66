"""Forcing and forbidding one token in a logits row."""

import mlx.core as mx

from mlx_notebook.engine.tokens.forcing import only, without


def test_only_keeps_one_token_and_without_drops_one():
    logits = mx.array([[1.0, 3.0, 2.0]])
    assert only(logits, 2).tolist() == [[-float("inf"), -float("inf"), 2.0]]
    assert without(logits, 1).tolist() == [[1.0, -float("inf"), 2.0]]
    assert mx.argmax(without(logits, 1), axis=-1).item() == 2  # greedy: the runner-up
