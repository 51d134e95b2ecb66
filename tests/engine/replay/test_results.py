"""The result cache in the engine: stored results replay without a forward pass."""

import pytest

from mlx_notebook.engine import Engine, Request
from mlx_notebook.engine.replay.results import Replays


@pytest.fixture
def cached(tmp_path):
    """An engine whose result cache is on, in a fresh file."""
    eng = Engine(results=Replays("deterministic", tmp_path / "cache.sqlite"))
    yield eng
    eng.close()


def streamed(job):
    """The job's token events as they streamed: text and id."""
    return [(e.text, e.token_id) for e in job.events_so_far() if type(e).__name__ == "Token"]


def req(tiny_dir, **kw):
    fields = dict(model=tiny_dir, chat=False, max_tokens=12, temperature=0)
    return Request("Once upon a time", **{**fields, **kw})


def test_a_greedy_result_replays_the_same_events_without_a_pass(cached, tiny_dir):
    first = cached.submit(req(tiny_dir, logprobs=3))
    a = first.result()
    assert a.stats.replayed is None and a.stats.decode_steps > 0
    again = cached.submit(req(tiny_dir, logprobs=3))
    b = again.result()
    assert b.stats.replayed is not None and b.stats.replayed["seconds"] == a.stats.total_s
    assert b.text == a.text and b.token_ids == a.token_ids and b.finish_reason == a.finish_reason
    assert [r.logprob for r in b.tokens] == [r.logprob for r in a.tokens]
    assert [r.top for r in b.tokens] == [r.top for r in a.tokens]
    assert streamed(again) == streamed(first)
    st = cached.scheduler.replays.store.stats()
    assert st["entries"] == 1 and st["hits"] == 1


SAMPLED = dict(temperature=0.7, seed=1)
MISSES = [  # each changes the text, or may: (the base request, the change)
    ({}, dict(max_tokens=11)), ({}, dict(stop=["zz"])), ({}, dict(temperature=0.7, seed=1)),
    (SAMPLED, dict(seed=2)), (SAMPLED, dict(top_k=5)), (SAMPLED, dict(top_p=0.5)),
    (SAMPLED, dict(min_p=0.1)), (SAMPLED, dict(temperature=0.8)),
    ({}, dict(repetition_penalty=1.3)), ({}, dict(logprobs=2)), ({}, dict(system="Brief.")),
    ({}, dict(chat=True)), ({}, dict(think=False)), ({}, dict(schema=["yes", "no"])),
    ({}, dict(prompt="Once upon a tim")),
]  # fmt: skip


@pytest.mark.parametrize("base,change", MISSES, ids=lambda c: ",".join(c) or "base")
def test_each_field_that_determines_the_text_misses(cached, tiny_dir, base, change):
    cached.submit(req(tiny_dir, **base)).result()
    change = dict(change)
    prompt = change.pop("prompt", "Once upon a time")
    fields = {**dict(model=tiny_dir, chat=False, max_tokens=12, temperature=0), **base}
    r = Request(prompt, **{**fields, **change})
    assert cached.submit(r).result().stats.replayed is None


HITS = [  # none changes the text
    dict(top_k=5), dict(top_p=0.5), dict(seed=9),  # greedy: the filters do nothing
    dict(batch=False), dict(draft_kind="lookup", num_draft_tokens=3),
    dict(draft_kind="suffix", num_draft_tokens=4), dict(reuse_cache=False),
    dict(remember=False), dict(prefill_target_s=0.05),
]  # fmt: skip


@pytest.mark.parametrize("change", HITS, ids=lambda c: ",".join(c))
def test_speculation_batching_and_caching_settings_hit(cached, tiny_dir, change):
    first = cached.submit(req(tiny_dir)).result()
    again = cached.submit(req(tiny_dir, **change)).result()
    assert again.stats.replayed is not None and again.text == first.text


def test_unseeded_sampling_is_not_stored_unless_asked(cached, tiny_dir):
    r = req(tiny_dir, temperature=0.8)
    cached.submit(r).result()
    assert cached.submit(r).result().stats.replayed is None
    all_ = req(tiny_dir, temperature=0.8, cache="all")
    first = cached.submit(all_).result()
    again = cached.submit(all_).result()
    assert again.stats.replayed is not None and again.text == first.text


def test_off_and_refresh(cached, tiny_dir):
    cached.submit(req(tiny_dir)).result()
    assert cached.submit(req(tiny_dir, cache="off")).result().stats.replayed is None
    fresh = cached.submit(req(tiny_dir, cache="refresh")).result()
    assert fresh.stats.replayed is None and fresh.stats.decode_steps > 0
    assert cached.submit(req(tiny_dir)).result().stats.replayed is not None


def test_a_stopped_or_failed_job_is_not_stored(cached, endless_dir):
    job = cached.submit(Request("Go", model=endless_dir, chat=False, max_tokens=5000))
    next(e for e in job.events(detach=True) if type(e).__name__ == "Token")
    job.cancel()
    assert job.result().finish_reason == "cancelled"
    assert cached.scheduler.replays.store.stats()["entries"] == 0


def test_rows_of_a_map_replay_one_by_one_and_a_changed_row_alone_runs(cached, tiny_dir):
    from mlx_notebook.mapping import map as map_rows

    def run(rows):
        before = cached.forward_passes
        res = map_rows(rows, "Say {item}", model=tiny_dir, backend=cached, max_tokens=6,
                       temperature=0)  # fmt: skip
        return [r.stats.replayed is not None for r in res], cached.forward_passes - before

    assert run(["a", "b", "c"])[0] == [False, False, False]
    assert run(["a", "b", "c", "d", "e"])[0] == [True, True, True, False, False]
    replayed, passes = run(["a", "B", "c", "d", "e"])  # one row changed
    assert replayed == [True, False, True, True, True] and passes > 0
    assert run(["a", "B", "c", "d", "e"]) == ([True] * 5, 0)  # nothing left to compute


def test_a_corrupt_cache_file_warns_once_and_generates(tmp_path, tiny_dir):
    import warnings

    path = tmp_path / "cache.sqlite"
    path.write_bytes(b"\x00garbage" * 512)  # a truncated or foreign file
    eng = Engine(results=Replays("deterministic", path))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a = eng.submit(req(tiny_dir)).result()
            b = eng.submit(req(tiny_dir)).result()
        assert a.text == b.text and a.finish_reason in ("stop", "length")
        assert b.stats.replayed is None  # generated again: no cache, no failure
        assert len([w for w in caught if "result cache" in str(w.message)]) == 1
    finally:
        eng.close()


FAST_OFF = """
import json, sys
from mlx_notebook.engine import Engine, Request
from mlx_notebook.engine.replay.results import Replays
eng = Engine(results=Replays("deterministic", sys.argv[1]))
r = eng.submit(Request("Once upon a time", model=sys.argv[2], chat=False, max_tokens=12,
                       temperature=0)).result()
print(json.dumps([r.text, r.stats.replayed is not None]))
eng.close()
"""


def test_the_fast_path_is_not_in_the_key(cached, tiny_dir, tmp_path):
    import json
    import os
    import subprocess
    import sys

    first = cached.submit(req(tiny_dir)).result()  # the fast path on, in this process
    path = str(cached.scheduler.replays.path)
    env = {**os.environ, "MLX_NOTEBOOK_FAST": "0"}
    out = subprocess.run(
        [sys.executable, "-c", FAST_OFF, path, tiny_dir],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    text, replayed = json.loads(out.stdout.splitlines()[-1])
    assert replayed and text == first.text


DIGEST = """
import sys
from mlx_notebook.engine.replay import key
ident = key.model_identity(sys.argv[1])
print(ident, key.hashed[0])
"""


def test_model_files_are_hashed_once_across_processes(tmp_path, tiny_dir):
    import os
    import subprocess
    import sys

    env = {**os.environ, "MLX_NOTEBOOK_CACHE": str(tmp_path / "cache")}

    def identity():
        out = subprocess.run(
            [sys.executable, "-c", DIGEST, tiny_dir], capture_output=True, text=True,
            env=env, check=True,
        )  # fmt: skip
        ident, hashed = out.stdout.split()
        return ident, int(hashed)

    first, hashed_first = identity()
    again, hashed_again = identity()  # a restart
    assert first == again and len(first) == 64
    assert hashed_first >= 3 and hashed_again == 0  # config, tokenizer, weights: once


def test_a_reply_cut_short_by_stop_thinking_is_not_stored(cached, tiny_dir):
    job = cached.submit(req(tiny_dir))
    job.end_thinking()  # a click on "Stop thinking": the result is not the request's own
    job.result()
    assert cached.scheduler.replays.store.stats()["entries"] == 0


def test_a_damaged_entry_is_a_miss_said_once_never_a_failure(cached, tiny_dir):
    import sqlite3
    import warnings

    first = cached.submit(req(tiny_dir)).result()
    store = cached.scheduler.replays.store
    cached.run_on_worker(lambda: None)  # the worker has stored it (listeners run there)
    conn = sqlite3.connect(store.path)
    changed = conn.execute("""UPDATE results SET payload = '{"tokens": [[1]], "stats": {}}'""")
    assert changed.rowcount == 1
    conn.commit()
    conn.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = cached.submit(req(tiny_dir)).result()  # raises GenerationError if it failed
    assert again.stats.replayed is None and again.text == first.text
    assert len([w for w in caught if "could not be replayed" in str(w.message)]) == 1


def test_refresh_replaces_an_unseeded_sample_in_all_mode(tmp_path, tiny_dir):
    eng = Engine(results=Replays("all", tmp_path / "cache.sqlite"))
    try:
        sampled = req(tiny_dir, temperature=1.5, max_tokens=20)
        old = eng.submit(sampled).result()
        assert eng.submit(sampled).result().text == old.text  # "all": the first sample
        new = eng.submit(req(tiny_dir, temperature=1.5, max_tokens=20, cache="refresh")).result()
        assert new.stats.replayed is None
        assert eng.submit(sampled).result().text == new.text  # the refreshed one now
    finally:
        eng.close()


def test_a_read_only_folder_warns_once_and_generates(tmp_path, tiny_dir, read_only):
    import warnings

    folder = tmp_path / "ro"
    folder.mkdir()
    read_only(folder)
    try:
        (folder / "probe").write_text("x")  # the folder must really refuse
        writable = True
    except OSError:
        writable = False
    eng = Engine(results=Replays("deterministic", folder / "cache.sqlite"))
    try:
        assert not writable
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            a = eng.submit(req(tiny_dir)).result()
            b = eng.submit(req(tiny_dir)).result()
        assert a.text == b.text and a.finish_reason in ("stop", "length")
        assert b.stats.replayed is None  # nothing could be stored: generated again
        assert len([w for w in caught if "result cache" in str(w.message)]) == 1
    finally:
        eng.close()


def test_a_stream_stored_short_of_its_text_replays_with_the_rest_on_its_last_token():
    # Stored before the last token carried what was held back (a stray byte, a possible
    # stop-string start): the texts added up to less than the result's.
    from mlx_notebook.engine.replay.results import replay_events

    def payload(pieces, text):
        tokens = [[p, 7 + i, False, i, "", None] for i, p in enumerate(pieces)]
        return dict(tokens=tokens, text=text, finish_reason="stop", matched_stop=None,
                    reasoning="", stats={}, made=0.0)  # fmt: skip

    events, fin = replay_events(payload(["fo", ""], "fox\ufffd"))
    assert [e.text for e in events] == ["fo", "x\ufffd"] and fin.text == "fox\ufffd"
    assert [e.token_id for e in events] == [7, 8]
    events, _ = replay_events(payload(["fo", "x"], "fox"))  # as stored now: unchanged
    assert [e.text for e in events] == ["fo", "x"]
    events, _ = replay_events(payload(["fo", "x"], "bar"))  # not a prefix: left as stored
    assert [e.text for e in events] == ["fo", "x"]
