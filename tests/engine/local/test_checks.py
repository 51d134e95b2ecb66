"""A request is checked once: its model resolved and its prompt encoded once, for both threads."""

import collections
import sys
import threading

from mlx_notebook.engine import Engine, Request

COUNTED = {"resolve", "encode_prompt", "fit_context", "check_top_k", "check_request", "peek"}


def counting(engine, fn):
    """Run ``fn`` with every call of `COUNTED` (in mlx_notebook) counted per thread."""
    counts = collections.Counter()

    def prof(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name in COUNTED and "mlx_notebook" in code.co_filename:
            who = "worker" if threading.current_thread() is engine.scheduler.thread else "caller"
            counts[who, code.co_name] += 1

    engine.run_on_worker(lambda: sys.setprofile(prof))
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
        engine.run_on_worker(lambda: sys.setprofile(None))
    return counts


def test_a_loaded_model_is_resolved_once_and_the_prompt_encoded_once(tiny_dir):
    eng = Engine()
    try:
        eng.submit(Request("warm up", model=tiny_dir, chat=False, max_tokens=2)).result()
        req = Request("Hello there", model=tiny_dir, chat=False, max_tokens=3)
        counts = counting(eng, lambda: eng.submit(req).result())
    finally:
        eng.close()
    assert counts["caller", "check_request"] == 1
    assert counts["caller", "peek"] == 1  # the spec looked up once, found loaded
    assert counts["caller", "encode_prompt"] == 1 and counts["worker", "encode_prompt"] == 0
    assert counts["caller", "fit_context"] == 1 and counts["worker", "fit_context"] == 0
    assert counts["caller", "check_top_k"] == 1 and counts["worker", "check_top_k"] == 0
    assert counts["caller", "resolve"] == 0 and counts["worker", "resolve"] == 0


def test_a_model_loaded_by_the_job_is_resolved_on_the_caller_and_encoded_on_the_worker(tiny_dir):
    eng = Engine()
    try:
        req = Request("Hello there", model=tiny_dir, chat=False, max_tokens=3)
        counts = counting(eng, lambda: eng.submit(req).result())
    finally:
        eng.close()
    # Resolved to its registry name at submit (the check that it exists), then loaded
    # by that name: the worker resolves it only to load it.
    assert counts["caller", "resolve"] == 1 and counts["worker", "resolve"] == 1
    assert counts["caller", "peek"] == 1
    assert counts["caller", "encode_prompt"] == 0 and counts["worker", "encode_prompt"] == 1
    assert counts["worker", "fit_context"] == 1


def test_a_budget_lowered_at_submit_is_said_once(tiny_dir):
    eng = Engine()
    try:
        eng.submit(Request("warm up", model=tiny_dir, chat=False, max_tokens=2)).result()
        ctx = eng.registry.peek(tiny_dir).context_length
        job = eng.submit(Request("Hello", model=tiny_dir, chat=False, max_tokens=ctx * 2))
        job.cancel()
        notices = [e.text for e in job.events() if type(e).__name__ == "Notice"]
    finally:
        eng.close()
    assert len([n for n in notices if n.startswith("max_tokens lowered")]) <= 1


def test_a_model_that_needs_what_is_missing_is_refused_at_submit_as_main_or_draft(
    tmp_path, tiny_dir
):
    import importlib.util
    import json

    import pytest

    from mlx_notebook.models.spec import ModelUnavailable

    if importlib.util.find_spec("hf_olmo"):
        pytest.skip("ai2-olmo is installed")
    olmo = tmp_path / "olmo"
    olmo.mkdir()
    (olmo / "config.json").write_text(json.dumps({"model_type": "olmo"}))
    eng = Engine()
    try:
        for req in (
            Request("Hello", model=str(olmo), chat=False),
            Request("Hello", model=tiny_dir, draft=str(olmo), chat=False),
        ):
            with pytest.raises(ModelUnavailable, match=r"^\S+: mlx-lm's 'olmo' .*hf_olmo[^\n]*$"):
                eng.submit(req)
    finally:
        eng.close()
