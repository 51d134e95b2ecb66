"""Evaluations on tiny models: cells counted, equal to solo runs, batched, stopped."""

import mlx.core as mx
import pytest

from mlx_notebook.engine.cache.sequence import forward_passes
from mlx_notebook.engine.decoding.prompt import encode_prompt
from mlx_notebook.engine.request import Request
from mlx_notebook.evaluation import EvalRun, ScorerError, choice, includes
from mlx_notebook.evaluation.plan import build

ROWS = [{"q": f"What is {i} plus {i}?", "answer": str(2 * i)} for i in range(12)]
VARIANTS = {"plain": "{q}", "terse": "Answer in one word: {q}"}


def test_two_models_two_prompts_twelve_rows_two_epochs(engine, route_on, tiny_dir, draft_dir):
    submitted = []
    plan = build(
        ROWS, VARIANTS, [tiny_dir, draft_dir], includes("answer"), 2, route_on,
        max_tokens=6, temperature=0.8, seed=7,
    )  # fmt: skip
    ended_before_second = []

    def follow(job):
        if job.request.model == draft_dir and not ended_before_second:
            ended_before_second.append(all(j.done for j in submitted))
        submitted.append(job)

    run = EvalRun(plan, on_submit=follow)
    before = forward_passes()
    res = run.start().wait()
    passes = forward_passes() - before
    assert len(submitted) == 2 * 2 * 12 * 2 == len(res.cells)  # one generation per cell
    assert all(c.finish_reason in ("stop", "length") and c.score is not None for c in res.cells)
    tokens = sum(c.stats.generation_tokens for c in res.cells)
    # Rows of a model share steps: far fewer passes than tokens (solo: one per token).
    assert passes < tokens / 4, (passes, tokens)
    assert max(c.stats.batch_rows for c in res.cells) >= 8  # the engine's batch, full
    # Epochs differ (the seed moves by one) and every cell equals its own solo run.
    e0 = [c.text for c in res.cells if c.epoch == 0]
    e1 = [c.text for c in res.cells if c.epoch == 1]
    assert e0 != e1
    for cell in res.cells:
        req = plan.request(cell)
        req.batch = False
        solo = engine.submit(req).result()
        assert cell.text == solo.text, (cell.row, cell.column, cell.epoch)
    # Models one after another: every job of the first model had ended when the second
    # model's first job was submitted (each is loaded once, they never alternate).
    firsts = [j for j in submitted if j.request.model == tiny_dir]
    seconds = [i for i, j in enumerate(submitted) if j.request.model == draft_dir]
    assert len(firsts) == len(seconds) == 48 and seconds[0] == 48
    assert ended_before_second == [True]
    s = res.summary()
    assert [c.label for c in s.columns] == [
        f"{m} · {v}" for m in ("tiny0", "cdraft0") for v in VARIANTS
    ] or len(s.columns) == 4
    assert len(s.pairs) == 6 and all(c.score.n == 12 for c in s.columns)
    assert len(res.to_frame()) == 96 and len(res.table()) == 12


def test_choice_accuracy_is_the_log_likelihood_mlx_lm_gives(engine, route_on, tiny_dir):
    from mlx_lm import load

    rows = [
        {"q": "The sky is", "options": ["blue", "green", "a loud noise"], "answer": "blue"},
        {"q": "Two plus two is", "options": ["four", "five"], "answer": 1},
        {"q": "Paris is in", "options": ["France", "Spain", "Peru", "Chad"], "answer": "Chad"},
    ]
    plan = build(rows, "{q}", [tiny_dir], choice(), 3, route_on)
    assert plan.epochs == 1  # a likelihood does not change with repeats
    before = forward_passes()
    res = EvalRun(plan).start().wait()
    assert forward_passes() - before == 2  # the first row alone, then the rest in one pass
    model, tok = load(tiny_dir)
    acc = []
    for cell in res.cells:
        row = rows[cell.row]
        ctx = encode_prompt(Request(row["q"]), tok)
        mine = cell.extra["loglik"]
        seqs = [ctx + tok.encode(o, add_special_tokens=False) for o in row["options"]]
        width = max(map(len, seqs))
        padded = model(mx.array([s + [0] * (width - len(s)) for s in seqs]))
        for k, (seq, got) in enumerate(zip(seqs, mine)):
            ids = seq[len(ctx) :]
            alone = model(mx.array([seq]))[0]
            for logits, tol in ((padded[k], 1e-4), (alone, 1e-4 * abs(got))):
                logits = logits.astype(mx.float32)
                logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
                ref = sum(logp[len(ctx) - 1 + t, ids[t]].item() for t in range(len(ids)))
                # Padded as ours: within 1e-4. Alone: OpenBLAS takes another kernel for
                # one row than for several, and float32 sums differ by ~3e-6 of their
                # size (0.0002 on this random model's -70); an off-by-one would not.
                assert abs(got - ref) < tol, (k, got, ref)
        best = max(range(len(mine)), key=lambda k: mine[k])
        want = row["answer"]
        right = want if isinstance(want, int) else row["options"].index(want)
        acc.append(float(best == right))
        assert cell.text == row["options"][best] and cell.score == acc[-1]
        lengths = [len(o) for o in row["options"]]
        norm = max(range(len(mine)), key=lambda k: mine[k] / lengths[k])
        assert cell.extra["acc_norm"] == float(norm == right)
    assert res.summary().columns[0].score.mean == pytest.approx(sum(acc) / len(acc))


def test_a_raising_scorer_stops_the_run_after_one_row(engine, route_on, tiny_dir):
    submitted = []

    def broken(row, out):
        raise KeyError("no such field 'answr'")

    plan = build(ROWS, "{q}", [tiny_dir], broken, 1, route_on, max_tokens=3)
    run = EvalRun(plan, on_submit=submitted.append)
    with pytest.raises(ScorerError, match="answr.*on row 0; nothing else ran"):
        run.start()
    assert len(submitted) == 1 and run.done
    assert [c.finish_reason for c in run.cells[1:]] == ["skipped"] * 11


def test_stop_mid_run_keeps_the_finished_cells(engine, route_on, tiny_dir, endless):
    import threading

    plan = build(
        ROWS[:4], "{q}", [tiny_dir, endless], includes("answer"), 1, route_on, max_tokens=400
    )
    started = threading.Event()
    run = EvalRun(plan, on_submit=lambda job: job.request.model == endless and started.set())
    run.start()
    assert started.wait(60)
    for cell in run.cells:  # wait for the endless model's first token, then stop
        if plan.columns[cell.column].model == endless:
            while cell.job is None or cell.job.token_count == 0:
                pass
            break
    run.cancel()
    res = run.wait(60)
    kept = [c for c in res.cells if plan.columns[c.column].model == tiny_dir]
    stopped = [c for c in res.cells if plan.columns[c.column].model == endless]
    assert all(c.finish_reason in ("stop", "length") and c.score is not None for c in kept)
    assert {c.finish_reason for c in stopped} <= {"cancelled", "skipped"}
    assert any(c.text for c in stopped)  # the text so far stays
    assert res.summary().columns[1].stopped == 4


def test_one_column_stops_and_the_others_go_on(engine, route_on, tiny_dir, endless):
    plan = build(ROWS[:3], {"a": "{q}", "b": "Q: {q}"}, [endless], None, 1, route_on, max_tokens=60)
    run = EvalRun(plan).start()
    run.cancel_column(1)
    res = run.wait(60)
    assert {c.finish_reason for c in res.cells if c.column == 0} == {"length"}
    assert {c.finish_reason for c in res.cells if c.column == 1} <= {"cancelled", "skipped"}


def test_a_judge_grades_each_output_under_its_schema(engine, route_on, tiny_dir, draft_dir):
    from mlx_notebook.evaluation import judge

    submitted = []
    plan = build(ROWS[:3], "{q}", [tiny_dir], judge(draft_dir, reference="answer"), 1, route_on,
                 max_tokens=4)  # fmt: skip
    res = EvalRun(plan, on_submit=submitted.append).start().wait()
    assert len(submitted) == 3  # the view follows the generations, not the grader's jobs
    for cell in res.cells:  # a verdict in the schema, or the reason it has none
        if cell.error is None:
            assert cell.score in (1.0, 2.0, 3.0, 4.0, 5.0) and isinstance(cell.extra["reason"], str)
        else:
            assert cell.error.startswith("judge: the verdict ended (length)")
    assert any(c.error is None for c in res.cells)
