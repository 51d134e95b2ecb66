"""Runs one job alone on the worker thread: prompt, prefill, token stream, text, stats.

Speculative jobs, jobs that opted out of batching and engines with batching off
run here; normal decoding otherwise runs as a row of `batch.Batch`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import mlx.core as mx

from ..cache.prompt_cache import ModelState, PromptCache, persists
from ..cache.sequence import CachedSequence
from ..decoding.decode import normal_tokens
from ..decoding.device import rope_tables
from ..decoding.drafts import DraftContext, DraftSource, make_source
from ..decoding.output import Output, prepare
from ..decoding.prefill import ChunkSizer, prefill
from ..decoding.speculative import DraftCounters, speculative_tokens
from ..errors import Cancelled, describe, detach_frames
from ..events import Finished, Notice, PrefillProgress
from ..job import Job
from ..replay.key import about_model


def run_job(
    job: Job,
    main,
    draft,
    state_for: Callable[[object], ModelState],
    stream,
    safe_point: Callable[[], None] = lambda: None,
    replays=None,
    alone: Callable[[], bool] = lambda: True,
) -> Finished:
    """Generate for ``job`` and return its terminal event (not yet emitted).

    Args:
        job: The job; events other than `Finished` are emitted here.
        main: Loaded main model (``.model``, ``.tokenizer``).
        draft: Loaded draft model, or None.
        state_for: Returns the `ModelState` (prompt cache, prefill profile) of a model.
        stream: The worker's MLX stream.
        safe_point: Called at every cancel point while the caches are consistent
            (the engine runs pending calls and other jobs' steps there).
        replays: The result cache (`replay.results.Replays`): a stored result is
            replayed without a forward pass. None: off.
        alone: Whether no other job's rows wait for this job's prefill chunks (the
            batch decodes only at ``safe_point``): only then may a chunk run past the
            time target, between cancel points inside it.
    """
    req = job.request
    t0 = time.perf_counter()
    seqs: list[tuple[PromptCache, CachedSequence]] = []
    counters = DraftCounters()
    out: Output | None = None
    prompt_ids: list[int] | None = None
    reason, error, exception = None, None, None

    def check() -> None:
        if job.cancelled:
            raise Cancelled
        safe_point()

    try:
        check()
        setup = prepare(job, main)
        if replays is not None and (stored := replays.lookup(job, main, setup)) is not None:
            return stored
        prompt = prompt_ids = setup.prompt
        out = Output(job, main.tokenizer, setup.max_tokens, t0, setup.prompt, setup.constraint)
        stats = out.stats
        stats.prompt_tokens, stats.sampling = len(prompt), setup.sampling
        stats.model = about_model(main, identify=bool(replays and replays.on))
        if req.seed is not None:
            mx.random.seed(req.seed)
        main_state = state_for(main)
        main_cache = main_state.cache
        told = lambda: job.emit(main_state.checking(main))  # noqa: E731 - the check runs now
        window, grid = main_state.prefill_grid(
            main, len(prompt), rope_tables(main.model), told, check
        )
        seq, stats.cached_tokens = main_cache.fetch(main.model, prompt, req.reuse_cache)
        seqs.append((main_cache, seq))
        ctx = DraftContext(req, setup.sampler, session=main_state.suffix)
        if req.mode == "draft":
            draft_state = state_for(draft)
            draft_cache = draft_state.cache
            dseq, _ = draft_cache.fetch(draft.model, prompt, req.reuse_cache)
            seqs.append((draft_cache, dseq))
            ctx.draft_seq, ctx.draft_profile = dseq, draft_state.prefill
        source: DraftSource | None = make_source(req.kind, ctx)
        if source is not None and (
            why := main_state.multi_token_problem(main, rope_tables(main.model), check, told)
        ):
            job.emit(Notice(f"{main.name} decodes without drafts: {why}"))
            source = None  # verifying drafts would change the text
        c = setup.constraint
        if getattr(c, "jump", False) and main_state.multi_token_problem(
            main, rope_tables(main.model), check, told
        ):
            c.jump = False  # forced tokens fed together would change it too: one a step
        sizer = ChunkSizer(req.prefill_target_s, main_state.prefill, window=window, grid=grid)
        try:
            prefill(
                seq,
                prompt,
                check=check,
                progress=lambda d, t: job.emit(PrefillProgress(d, t, "main")),
                sizer=sizer,
                stop=lambda: job.cancelled,
                alone=alone,
            )
        finally:
            stats.prefill_chunk = sizer.largest
        if req.reuse_cache:
            main_cache.keep_prompt(seq, persists(req))
        passes0 = seq.passes
        history = list(prompt)
        common = dict(
            sampler=setup.sample,
            processors=setup.processors,
            max_tokens=setup.max_tokens,
            check=check,
            stream=stream,
            greedy=setup.greedy,
            constraint=setup.constraint,
            recorder=setup.recorder,
        )
        if source is None:
            tokens = normal_tokens(seq, history, **common)
        else:
            tokens = speculative_tokens(
                seq,
                history,
                source,
                num_draft=req.num_draft_tokens,
                counters=counters,
                draft_progress=lambda d, t: job.emit(PrefillProgress(d, t, "draft")),
                **common,
            )
        try:
            rec = setup.recorder
            for tid, from_draft in tokens:
                if out.add(tid, from_draft, rec.take() if rec is not None else None):
                    break
        finally:
            tokens.close()  # runs the generator's cleanup on this thread
            stats.decode_steps = stats.step_rows = seq.passes - passes0
            stats.replayed_tokens = seq.replayed
    except Cancelled:
        reason = "cancelled"
    except Exception as exc:  # travels as a value; the worker lives on
        reason, error, exception = "error", describe(exc), detach_frames(exc)
        seqs = [(c, s) for c, s in seqs if s.consistent()]
    finally:
        for cache, s in reversed(seqs):  # the main model's last: it wins a shared slot
            cache.store(s)
    if out is None:  # ended before the prompt was even encoded
        return Finished.failed(exception) if exception else Finished("", "cancelled")
    if prompt_ids is not None and req.remember:
        state_for(main).suffix.add(prompt_ids + out.generated)  # for later suffix drafting
    stats = out.stats
    stats.draft_tokens_proposed = counters.proposed
    stats.draft_tokens_accepted = counters.accepted
    stats.draft_rounds = counters.rounds
    stats.proposed_by_position = list(counters.proposed_at)
    stats.accepted_by_position = list(counters.accepted_at)
    return out.finish(reason, error, exception)
