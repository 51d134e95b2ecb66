"""Panel state and actions without a frontend: ``panel.click(name)`` is what a click sends,
``panel.set_state`` what an edit in the browser does."""

import logging

import pytest
from traitlets import TraitError

import mlx_notebook
from mlx_notebook.engine import Token
from mlx_notebook.notebook.measure_views.compare import CompareResult

COPY = "Hello world. The quick brown fox. Hello world. The quick brown fox. Hello world."


@pytest.fixture
def panel(engine, tiny_dir):
    return mlx_notebook.Panel(
        engine=engine,
        prompt=COPY,
        model=tiny_dir,
        draft_source="lookup",
        lookup_ngram=2,
        num_draft_tokens=3,
        max_tokens=40,
        chat=False,
    )


def shown(panel, group):
    return group not in panel.hidden


def test_traits_drive_controls_and_back(panel):
    panel.num_draft_tokens = 5
    assert panel.get_state()["num_draft_tokens"] == 5  # what the browser's slider shows
    assert panel.model_sampling and not shown(panel, "sampling_row")
    panel.set_state({"temperature": 0.7})  # the slider moved in the browser
    assert panel.temperature == 0.7 and not panel.model_sampling  # set by hand: used
    assert shown(panel, "sampling_row") and panel.request().temperature == 0.7
    panel.model_sampling = True
    assert panel.request().temperature is None and panel.request().top_p is None
    panel.draft_source = "none"
    assert "compare" in panel.off and not shown(panel, "draft_row")
    assert "draft source" in panel.tips["compare"]  # disabled, and says why
    assert not shown(panel, "measure_row") and panel.estimate == ""
    panel.draft_source = "model"
    assert shown(panel, "draft_model") and not shown(panel, "lookup_ngram")
    panel.draft_source = "lookup"
    assert shown(panel, "lookup_ngram") and not shown(panel, "draft_model")
    assert "stop" in panel.off and panel.tips["stop"] == "nothing is running"
    panel.set_state({"sweep_from": 9, "sweep_to": 4})  # either end past the other: in order
    assert (panel.sweep_from, panel.sweep_to) == (4, 9)
    panel.sweep_to = 40
    assert (panel.sweep_from, panel.sweep_to) == (4, 16)


def test_unticking_the_models_sampling_starts_from_its_values(engine):
    panel = mlx_notebook.Panel(engine=engine, model="default")
    assert "temperature 0.2" in panel.sampling_hint
    panel.model_sampling = False
    assert (panel.temperature, panel.top_p) == (0.2, 0.9)
    given = mlx_notebook.Panel(engine=engine, model="default", prompt="hi", temperature=0.7)
    assert not given.model_sampling and given.request().temperature == 0.7


def test_history_is_capped_with_the_rest_behind_show_all(panel):
    from mlx_notebook.notebook.panel.snapshot import SHOWN_ROWS, history_html

    row = dict(prompt="p", mode="normal", k=None, tps=1.0, e2e_s=1.0, acceptance=None,
               ttft=0.1, finish="stop")  # fmt: skip
    rows = [dict(row, run=i + 1, action=f"generate {i + 1}") for i in range(25)]
    html = history_html(rows)
    first, _, rest = html.partition("<details")
    assert first.count("<tr>") == SHOWN_ROWS + 1 and "<td>25</td>" in first
    assert "<td>1</td>" not in first and "show all 25 runs" in rest
    assert rest.count("<tr>") == 26


def test_sweep_says_how_long_it_will_take_before_it_starts(panel):
    panel.sweep_from, panel.sweep_to, panel.repeats = 1, 4, 2
    assert "Sweep k 1–4: 13 runs of up to 40 tokens" in panel.estimate
    assert "Generate once" in panel.estimate  # nothing timed yet
    panel.click("generate")
    panel.wait(60)
    assert "at most about" in panel.estimate


def test_compare_runs_interleaved_pairs_and_gives_one_verdict(panel):
    panel.max_pairs = 2
    panel.click("compare")
    assert panel.running and "generate" in panel.off and "stop" not in panel.off
    assert "Stop first" in panel.tips["compare"]  # and every input is disabled: running
    assert not panel.can_stop  # one Stop button: the panel's
    assert panel.status == ""  # the view says what runs, once
    res = panel.wait(60)
    assert isinstance(res, CompareResult) and res.identical is True and len(res.runs) == 4
    assert res.verdict in ("faster", "slower", "same", "undecided")
    html = panel.value
    assert html.count('class="verdict"') == 1 and "identical text in all 4 runs" in html
    assert "highlighted</span> = draft tokens the main model accepted" in html
    assert not panel.running and "generate" not in panel.off and "stop" in panel.off
    # pair 1 runs normal first, pair 2 speculative first
    assert [r["mode"] for r in panel.history] == ["normal", "lookup", "lookup", "normal"]
    assert panel.history[0]["prompt"].startswith("Hello world.")
    assert "Hello world." in panel.history_html


def test_scripted_draft_acceptance_in_stats_and_view(engine, scripted, tiny_tokenizer):
    vocab = sorted(tiny_tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    pool = [i for t, i in vocab if t.startswith("\u0120") and t[1:].isalpha() and len(t) > 2]
    outputs, alt = [pool[i % 12] for i in range(24)], pool[12]
    ids = scripted("main", outputs=outputs)
    from mlx_notebook.testing import script_rule

    main_rule = script_rule(len(ids), outputs, alt)
    scripted("draft", rule=lambda p, t: alt if p - (len(ids) - 1) in (5, 12) else main_rule(p, t))
    panel = mlx_notebook.Panel(
        engine=engine,
        prompt="Hello",
        model="main",
        draft_source="model",
        draft_model="draft",
        num_draft_tokens=4,
        max_tokens=24,
        chat=False,
        max_pairs=2,
    )
    panel.click("compare")
    res = panel.wait(60)
    assert res.identical and res.acceptance == pytest.approx(17 / 20)
    html = panel.value
    assert "acceptance 85%" in html and "accepted 85% of 20 drafts" in html
    assert html.count('class="draft"') == 17 + 1  # the first pair's accepted tokens, and legend
    assert "accepted, by draft position" in html  # the position chart


def test_stop_during_second_half_keeps_first(engine, scripted):
    scripted("slow", delay_s=0.02)
    panel = mlx_notebook.Panel(
        engine=engine,
        prompt="Hello",
        model="slow",
        draft_source="lookup",
        max_tokens=15,
        chat=False,
    )
    panel.click("compare")
    *_warmup, normal, spec = panel._active
    normal.wait(30)
    for ev in spec.events(timeout=30, detach=True):
        if isinstance(ev, Token):
            break
    panel.click("stop")
    res = panel.wait(30)
    (n,), (s,) = res.normal, res.speculative
    assert n.finish_reason == "length" and len(n.token_ids) == 15
    assert s.finish_reason == "cancelled"
    assert not res.complete and res.speedup is None and res.verdict is None
    html = panel.value
    assert "stopped" in html and "done (max tokens)" in html


def test_sweep_k_1_to_3_repeated_with_baselines(panel):
    panel.sweep_from, panel.sweep_to = 1, 3
    panel.repeats = 2
    panel.click("sweep")
    res = panel.wait(120)
    ks = [k for k, _ in res.runs]
    assert sorted(k for k in ks if k) == [1, 1, 2, 2, 3, 3] and ks[0] is None and ks[-1] is None
    assert len(panel.history) == len(res.runs)  # the normal baselines are in the table
    assert sum(r["mode"] == "normal" for r in panel.history) == ks.count(None)
    html = panel.value
    assert "<svg" in html and "normal decoding" in html
    shown_part, _, all_part = panel.history_html.partition("<details")
    assert shown_part.count("<tr>") == 10 + 1 and all_part.count("<tr>") == len(res.runs) + 1
    assert f"show all {len(res.runs)} runs" in all_part
    assert "lookup" in panel.history_text()
    panel.click("clear")
    assert panel.history == [] and panel.history_html == ""


def test_a_new_action_clears_the_last_chart(panel):
    panel.sweep_from, panel.sweep_to, panel.repeats = 1, 1, 1
    panel.click("sweep")
    panel.wait(60)
    assert "<svg" in panel.value
    panel.draft_source = "none"
    panel.click("generate")
    assert "<svg" not in panel.value
    panel.wait(60)


def test_suffix_choice_runs_suffix_drafting(panel):
    panel.draft_source = "suffix"
    assert not shown(panel, "lookup_ngram") and shown(panel, "draft_row")
    assert "compare" not in panel.off and "sweep" not in panel.off
    req = panel.request()
    assert (req.mode, req.draft) == ("suffix", None)
    panel.set_state({"draft_source": "suffix"})  # the toggle pressed in the browser
    panel.click("generate")
    res = panel.wait(60)
    assert res.finish_reason == "length" and panel.history[-1]["mode"] == "suffix"
    panel.click("generate")  # the same prompt again: drafts from the first answer
    assert panel.wait(60).stats.draft_tokens_accepted > 0


def test_bad_setting_shows_error_and_runs_nothing(panel):
    panel.prompt = "   "
    panel.click("generate")
    assert not panel.running and "prompt" in panel.status
    assert panel.engine.info().queued == 0


def test_generate_button(panel):
    panel.draft_source = "none"
    panel.click("generate")
    res = panel.wait(60)
    assert res.finish_reason == "length" and panel.history[-1]["mode"] == "normal"
    assert panel.model in panel.model_options  # loaded models are offered


@pytest.mark.parametrize("action", ["generate", "compare", "sweep"])
def test_incompatible_draft_shows_inline_and_the_panel_stays_usable(panel, other_vocab_dir, action):
    panel.draft_source = "model"
    panel.draft_model = other_vocab_dir
    panel.click(action)
    assert "vocabulary" in panel.status
    assert not panel.running and "generate" not in panel.off
    assert panel.wait(1) is None  # nothing ran
    panel.draft_source = "lookup"
    panel.click("generate")
    assert panel.wait(60).finish_reason == "length"


def test_a_submit_failure_after_start_resets_the_panel(panel, monkeypatch):
    def refuse(_req):
        raise RuntimeError("engine is closed")

    monkeypatch.setattr(panel.engine, "submit", refuse)
    panel.click("generate")
    assert "closed" in panel.status and not panel.running
    assert panel.wait(1) is None


def test_seed_box_refuses_negative_seeds(panel):
    with pytest.raises(TraitError):
        panel.seed = -1


def test_inspect_box_records_tokens_and_tints_the_view(panel):
    panel.draft_source = "none"
    panel.set_state({"inspect": True})
    assert panel.inspect and panel.request().logprobs == 5
    panel.click("generate")
    res = panel.wait(60)
    assert len(res.tokens) == 40 and len(res.tokens[0].top) == 5
    html = panel.value
    assert html.count('class="tk b') >= 40 and 'class="card"' in html
    panel.inspect = False
    assert panel.request().logprobs is None


def test_a_run_that_ends_before_its_view_is_shown_is_in_the_snapshot(panel, monkeypatch):
    from mlx_notebook.notebook.views.view import LiveView

    attach = LiveView.attach

    def attach_and_finish(self, *jobs, **kw):  # the job ends before attach returns
        out = attach(self, *jobs, **kw)
        assert self.wait_rendered(60)
        return out

    monkeypatch.setattr(LiveView, "attach", attach_and_finish)
    saved = []  # what the snapshot under the widget is updated to
    monkeypatch.setattr(panel.snapshot, "update", lambda html, plain: saved.append(html))
    panel.draft_source = "none"
    panel.generate()
    assert panel.wait(60).text
    view = panel._view.renderer.html()
    assert panel.last_result.text[:8] in panel._view.renderer.plain()
    assert view and view in saved[-1]  # the last run's view, not nothing


def test_actions_are_numbered_per_kind_so_the_first_sweep_is_sweep_1(panel, monkeypatch):
    panel.max_tokens, panel.sweep_from, panel.sweep_to, panel.repeats = 6, 1, 1, 1
    panel.click("generate")
    panel.wait(60)
    submit = panel.engine.submit

    def refuse(_req):
        raise RuntimeError("engine is closed")

    monkeypatch.setattr(panel.engine, "submit", refuse)
    panel.click("sweep")  # fails after it began: no run, no number used
    assert "closed" in panel.status and panel.history[-1]["action"] == "generate 1"
    monkeypatch.setattr(panel.engine, "submit", submit)
    panel.click("sweep")
    panel.wait(60)
    panel.click("sweep")
    panel.wait(60)
    actions = [r["action"] for r in panel.history]
    assert actions == ["generate 1"] + ["sweep 1"] * 3 + ["sweep 2"] * 3
    assert "<td>sweep 1</td>" in panel.history_html
    panel.clear_history()
    panel.click("sweep")
    panel.wait(60)
    assert {r["action"] for r in panel.history} == {"sweep 1"}


def test_compare_and_sweep_measure_the_sampling_the_panel_shows(
    engine, tiny_dir, tmp_path, monkeypatch
):
    import json
    import shutil

    sampled = tmp_path / "sampled"
    shutil.copytree(tiny_dir, sampled)
    config = {"do_sample": True, "temperature": 0.2, "top_p": 0.9}
    (sampled / "generation_config.json").write_text(json.dumps(config))
    panel = mlx_notebook.Panel(
        engine=engine, prompt=COPY, model=str(sampled), draft_source="lookup",
        lookup_ngram=2, max_tokens=8, chat=False, max_pairs=2, seed=5,
    )  # fmt: skip
    assert panel.model_sampling and "temperature 0.2 · top_p 0.9" in panel.sampling_hint
    sent = []
    submit = engine.submit
    monkeypatch.setattr(engine, "submit", lambda r: sent.append(r) or submit(r))
    panel.click("compare")
    res = panel.wait(60)
    assert len(sent) == len(panel.history) + 2  # the pairs, and the untimed warm-up pair
    assert {(r.temperature, r.top_p, r.seed) for r in sent} == {(0.2, None, 5)}  # top_p: model's
    assert not res.greedy
    assert {
        (r.stats.sampling["temperature"], r.stats.sampling["top_p"]) for _, _, r in res.runs
    } == {(0.2, 0.9)}
    sent.clear()
    panel.sweep_from, panel.sweep_to, panel.repeats = 1, 1, 1
    panel.click("sweep")
    panel.wait(60)
    assert sent and {(r.temperature, r.seed) for r in sent} == {(0.2, 5)}
    panel.temperature = 0.5  # set by hand: measured as set
    assert panel.measured_request().temperature == 0.5 and not panel.model_sampling


def test_each_run_draws_in_the_panel_from_a_whole_view_then_deltas(panel, monkeypatch):
    sent = []
    monkeypatch.setattr(panel, "send", lambda msg, buffers=None: sent.append(msg))
    panel.draft_source = "none"
    panel._on_msg(panel, {"event": "click", "button": "generate"}, [])  # as the browser sends
    panel.wait(60)
    runs = [sent]
    sent = []
    monkeypatch.setattr(panel, "send", lambda msg, buffers=None: sent.append(msg))
    panel.click("generate")
    panel.wait(60)
    runs.append(sent)
    for msgs in runs:  # each run starts from its whole first view; then deltas
        assert msgs[0]["kind"] == "full" and len(msgs) >= 2  # (and the final view)
        assert all(m["kind"] == "delta" or m["seq"] in (4, 16, 64) for m in msgs[1:])
    seqs = [m["seq"] for m in runs[0] + runs[1]]
    assert seqs == sorted(set(seqs))  # one numbering for the widget's life: no copy confused
    assert panel.initial_seq == seqs[-1] and "".join(panel.initial) == panel.value
    assert panel.ended and panel.last_result.text[:10] in panel.value


def test_the_panels_stop_cancels_its_run(engine, scripted):
    scripted("slow", delay_s=0.02)
    panel = mlx_notebook.Panel(engine=engine, prompt="Hello", model="slow", max_tokens=200)
    panel.click("generate")
    (job,) = panel._active
    for ev in job.events(timeout=30, detach=True):
        if isinstance(ev, Token):
            break
    panel._on_msg(panel, {"event": "click", "button": "stop"}, [])  # the panel's own Stop
    res = panel.wait(30)
    assert res.finish_reason == "cancelled" and 0 < len(res.token_ids) < 200
    assert panel.stopping and panel.ended and "stop" in panel.off


def test_a_click_on_a_button_shown_disabled_does_nothing(panel):
    panel.draft_source = "none"
    assert "compare" in panel.off
    panel.click("compare")  # sent by a page that had not yet drawn it disabled
    assert not panel.running and panel.status == "" and panel.wait(1) is None


def test_compare_refused_after_it_began_frees_the_panel(panel):
    panel.draft_source = "none"
    panel.compare()  # from code: Compare needs a draft source
    assert "draft source" in panel.status and not panel.running
    assert panel.wait(1) is None


def test_a_failed_runs_late_end_leaves_the_next_run_alone(engine, scripted, monkeypatch):
    import threading

    from mlx_notebook.notebook.views.view import LiveView

    scripted("slow", delay_s=0.02)
    panel = mlx_notebook.Panel(engine=engine, prompt="Hello", model="slow", chat=False,
                               draft_source="lookup", max_tokens=100000)  # fmt: skip
    gate, old_done = threading.Event(), threading.Event()
    finish = LiveView.finish

    def late_finish(self):  # the failed sweep's view ends on its own thread, late
        if not old_done.is_set():
            gate.wait(30)
            finish(self)
            old_done.set()
        else:
            finish(self)

    monkeypatch.setattr(LiveView, "finish", late_finish)
    submit = panel.engine.submit
    monkeypatch.setattr(panel.engine, "submit", lambda r: (_ for _ in ()).throw(RuntimeError("x")))
    panel.click("sweep")  # fails after it began: no run; its view ends on its thread
    assert not panel.running
    monkeypatch.setattr(panel.engine, "submit", submit)
    panel.draft_source = "none"
    panel.click("generate")  # never ends by itself
    mine = panel._view
    gate.set()  # the failed view's end runs now, while the new run is current
    assert old_done.wait(30)
    assert panel.running and panel.owner is mine  # untouched: not ended, not redrawn
    assert not panel.ended and "stop" not in panel.off
    panel.click("stop")
    assert panel.wait(30).finish_reason == "cancelled" and panel.ended


def test_a_click_applies_the_settings_it_carries_before_acting(panel, caplog):
    # ipywidgets holds a setting's update back while one is unanswered, and a click
    # (a custom message) overtakes it: the click carries the page's settings.
    seen = []
    panel.on_click("compare", lambda: seen.append((panel.num_draft_tokens, panel.prompt)))
    state = {"num_draft_tokens": 5, "prompt": "typed", "running": True, "status": "<b>x</b>"}
    panel._on_msg(panel, {"event": "click", "button": "compare", "state": state}, [])
    assert seen == [(5, "typed")]
    assert not panel.running and panel.status != "<b>x</b>"  # only the settings are taken
    panel._on_msg(panel, {"event": "click", "button": "compare"}, [])  # none carried: as is
    assert seen[-1] == (5, "typed")
    bad = {"event": "click", "button": "compare", "state": {"num_draft_tokens": "five"}}
    with caplog.at_level(logging.ERROR, logger="mlx_notebook"):
        panel._on_msg(panel, bad, [])  # a value the trait refuses: logged, nothing runs
    assert len(seen) == 2 and panel.num_draft_tokens == 5 and "compare button failed" in caplog.text
