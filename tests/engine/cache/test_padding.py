"""Models whose layers read their padding prefill rows one at a time, and say so.

mlx-lm's Mamba-1 mixer (``mamba``, Jamba's) takes no mask: a right-padded batched
prefill carries the padding into each short row's state. mamba2's scan and
attention use the rows' lengths, and stay batched.
"""

import pytest

from mlx_notebook.engine import Engine, Notice, Request
from mlx_notebook.engine.cache import padding
from mlx_notebook.engine.cache.padding import check_batching
from mlx_notebook.testing.families import build_family

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. Hello",
    "Rivers flow",
    "Paris is the capital of France.",
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("padding")
    return {f: str(build_family(f, root / f)) for f in ("mamba", "mamba2", "llama")}


@pytest.fixture
def eng():
    e = Engine()
    yield e
    e.close()


def check(eng, path):
    lm = eng.call(lambda: eng.registry.get(path)).result()
    return eng.call(lambda: check_batching(lm.model, lm.vocab_size)).result()


def test_the_check_finds_the_layers_that_read_their_padding(eng, models):
    prefill, decoding = check(eng, models["mamba"])
    assert "padding" in prefill and "ArraysCache" in prefill and decoding is None
    assert check(eng, models["mamba2"]) == (None, None)
    assert check(eng, models["llama"]) == (None, None)


def batched(eng, path, n=16):
    jobs = eng.submit_many(
        [
            Request(p, model=path, chat=False, max_tokens=n, prefill_target_s=30, reuse_cache=False)
            for p in PROMPTS
        ]
    )
    return [j.result(timeout=120) for j in jobs], jobs


def solo(eng, path, n=16):
    reqs = [
        Request(p, model=path, chat=False, max_tokens=n, batch=False, reuse_cache=False)
        for p in PROMPTS
    ]
    return [eng.submit(r).result(timeout=120).token_ids for r in reqs]


def test_without_the_check_padded_rows_part_from_their_solo_runs(eng, models, monkeypatch):
    # The defect: trusting every model with a padded prefill.
    monkeypatch.setattr(
        padding, "check_batching", lambda model, vocab_size, tables=(): (None, None)
    )
    res, _ = batched(eng, models["mamba"])
    assert max(r.stats.batch_rows for r in res) == 3
    assert [r.token_ids for r in res] != solo(eng, models["mamba"])


def spy(monkeypatch) -> list[int]:
    """Rows per shared prefill pass (`batch_prefill.prefill_together` calls)."""
    from mlx_notebook.engine.local import batch

    calls, real = [], batch.prefill_together
    monkeypatch.setattr(
        batch, "prefill_together", lambda m, g, t: (calls.append(len(g)), real(m, g, t))
    )
    return calls


def test_rows_prefill_alone_then_decode_together_and_equal_their_solo_runs(
    eng, models, monkeypatch
):
    path = models["mamba"]
    shared = spy(monkeypatch)
    res, jobs = batched(eng, path)
    assert shared == []  # each prompt in a pass of its own
    assert [r.token_ids for r in res] == solo(eng, path)
    assert max(r.stats.batch_rows for r in res) == 3  # decoding is still shared
    told = [
        [e.message for e in j.events() if isinstance(e, Notice) and "one at a time" in e.message]
        for j in jobs
    ]
    assert sum(len(t) for t in told) >= 2 and all(len(t) <= 1 for t in told)
    notes = "\n".join(eng.info().notes)
    assert f"batching of {path}: rows decode together; prompts prefill one at a time" in notes


def test_a_model_that_honours_padding_still_prefills_rows_together(eng, models, monkeypatch):
    path = models["mamba2"]
    shared = spy(monkeypatch)
    res, jobs = batched(eng, path)
    assert sum(shared) >= 2  # prompts shared a pass
    assert [r.token_ids for r in res] == solo(eng, path)
    assert not any(
        isinstance(e, Notice) and "one at a time" in e.message for j in jobs for e in j.events()
    )
    notes = "\n".join(eng.info().notes)
    assert "short prompts prefill together (padding checked)" in notes


COPY = "Rivers flow to the sea; mountains rise above the clouds. " * 3


@pytest.fixture(scope="module")
def plamo3(tmp_path_factory):
    return str(build_family("plamo3", tmp_path_factory.mktemp("plamo3") / "m"))


def lookup(eng, path):
    req = Request(COPY, model=path, chat=False, max_tokens=24, draft="lookup", lookup_ngram=1)
    job = eng.submit(req)
    return job.result(timeout=120), job


def test_without_the_check_verified_drafts_change_plamo3s_text(eng, plamo3, monkeypatch):
    # The defect: a verify pass over several tokens is not single steps on this model.
    monkeypatch.setattr(padding, "multi_token_problem", lambda *args: None)
    normal = eng.submit(Request(COPY, model=plamo3, chat=False, max_tokens=24)).result()
    spec, _ = lookup(eng, plamo3)
    assert spec.stats.draft_tokens_proposed > 0 and spec.token_ids != normal.token_ids


def test_a_model_whose_multi_token_pass_differs_decodes_without_drafts(eng, plamo3, models):
    normal = eng.submit(Request(COPY, model=plamo3, chat=False, max_tokens=24)).result()
    spec, job = lookup(eng, plamo3)
    assert spec.token_ids == normal.token_ids and spec.stats.draft_tokens_proposed == 0
    told = [e.message for e in job.events() if isinstance(e, Notice)]
    assert told == [
        f"{plamo3} decodes without drafts: a pass over several tokens parts from single "
        "steps (layers with RotatingKVCache)"
    ]
    notes = "\n".join(eng.info().notes)
    assert f"speculation on {plamo3}: decodes without drafts" in notes
    # A model whose passes agree keeps its drafts.
    spec, _ = lookup(eng, models["llama"])
    assert spec.stats.draft_tokens_proposed > 0
    assert "drafts verified in one pass" in "\n".join(eng.info().notes)


def test_a_check_stopped_between_its_chunks_runs_again_and_an_ask_inside_it_waits(eng, plamo3):
    # The check's cancel points run other jobs' work: a job admitted there asks again
    # (answered "a problem" for now, not remembered); what they raise stops the check,
    # which runs again next time, and is never taken for the check's own failure.
    from mlx_notebook.engine.cache.prompt_cache import ModelState
    from mlx_notebook.engine.errors import Cancelled

    def run():
        main, state = eng.registry.get(plamo3), ModelState()
        told, inside = [], []

        def stop(exc):
            def between():
                inside.append(state.multi_token_problem(main))
                raise exc

            return between

        for exc in (Cancelled(), RuntimeError("another job's admission failed")):
            with pytest.raises(type(exc)):
                state.multi_token_problem(main, (), stop(exc), lambda: told.append("told"))
            assert state.drafts is None  # nothing remembered
        why = state.multi_token_problem(main, (), lambda: None, lambda: told.append("told"))
        return inside, why, told

    inside, why, told = eng.call(run).result()
    assert inside == ["the check of a multi-token pass is still running"] * 2
    assert "parts from single steps" in why and told == ["told"] * 3


def test_a_window_longer_than_the_probe_is_checked_past_its_end(tmp_path, monkeypatch):
    # A real plamo3 keeps 2,048 tokens; here 40, still past the check's short prefix
    # (12): a pass over tokens inside the window agrees with single steps, so only a
    # pass past the window finds it.
    from mlx_lm import load

    path = build_family("plamo3", tmp_path / "m", sliding_window=40)
    model, tok = load(str(path))
    vocab = len(tok.get_vocab())
    assert padding.sliding_window(model) == 40
    assert "parts from single steps" in padding.multi_token_problem(model, vocab)
    monkeypatch.setattr(padding, "MAX_WINDOW", 0)  # as the check was: a short prefix
    assert padding.multi_token_problem(model, vocab) is None  # finds nothing
