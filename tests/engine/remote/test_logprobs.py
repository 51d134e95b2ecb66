"""A server's streamed logprobs as records: both API shapes, and what a server omits."""

import math

from mlx_notebook.engine.remote.logprobs import records_of, request_fields


def test_the_request_asks_in_the_chat_shape_on_both_endpoints():
    assert request_fields(3) == {"logprobs": True, "top_logprobs": 3}


def test_chat_entries_become_records_ranked_among_the_alternatives_sent():
    choice = {"logprobs": {"content": [
        {"token": "a", "logprob": -2.0, "id": 7,
         "top_logprobs": [{"token": "b", "logprob": -0.5}, {"token": "a", "logprob": -2.0},
                          {"token": "c", "logprob": -1.0}]},
        {"token": "z", "logprob": -9.0, "top_logprobs": [{"token": "y", "logprob": -0.1}]},
    ]}}  # fmt: skip
    a, z = records_of(choice, 4, k=2)
    assert (a.index, a.token_id, a.text, a.rank) == (4, 7, "a", 3)
    assert a.top == (("b", -1, -0.5), ("c", -1, -1.0)) and math.isnan(a.entropy)
    assert (z.index, z.token_id, z.rank) == (5, -1, 2)  # outside the alternatives: after them


def test_legacy_lists_and_what_is_skipped():
    choice = {"logprobs": {"tokens": ["x", "y"], "token_logprobs": [None, -0.25],
                           "top_logprobs": [None, {"y": -0.25, "w": -3.0}]}}  # fmt: skip
    (y,) = records_of(choice, 0, k=5)  # a token without a logprob is skipped
    assert (y.index, y.text, y.logprob, y.rank) == (1, "y", -0.25, 1)
    assert y.top == (("y", -1, -0.25), ("w", -1, -3.0))
    assert records_of({"delta": {"content": "hi"}}, 0, 5) == []
    assert records_of({"logprobs": None}, 0, 5) == []
    odd = {"logprobs": {"content": ["bad", {"token": "t", "logprob": "nan?"}]}}
    assert records_of(odd, 0, 5) == []
