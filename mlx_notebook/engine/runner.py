"""Runs one job on the worker thread: prompt, prefill, token stream, text, stats."""

from __future__ import annotations

import time
from collections.abc import Callable

import mlx.core as mx
from mlx_lm.sample_utils import make_logits_processors, make_sampler

from .decode import normal_tokens
from .drafts import DraftContext, DraftSource, make_source
from .errors import Cancelled, describe, detach_frames
from .events import Finished, Notice, PrefillProgress, Stats, Token
from .job import Job
from .prefill import ChunkSizer, prefill
from .prompt import check_top_k, encode_prompt, fit_context
from .prompt_cache import ModelState, PromptCache
from .sequence import CachedSequence
from .speculative import DraftCounters, speculative_tokens
from .stops import StopMatcher


def run_job(
    job: Job,
    main,
    draft,
    state_for: Callable[[object], ModelState],
    stream,
    safe_point: Callable[[], None] = lambda: None,
) -> Finished:
    """Generate for ``job`` and return its terminal event (not yet emitted).

    Args:
        job: The job; events other than `Finished` are emitted here.
        main: Loaded main model (``.model``, ``.tokenizer``).
        draft: Loaded draft model, or None.
        state_for: Returns the `ModelState` (prompt cache, prefill profile) of a model.
        stream: The worker's MLX stream.
        safe_point: Called at every cancel point while the caches are consistent
            (the engine runs pending calls there).
    """
    req, tok = job.request, main.tokenizer
    t0 = time.perf_counter()
    stats = Stats()
    pieces: list[str] = []
    reason, matched, error, exception = "length", None, None, None
    seqs: list[tuple[PromptCache, CachedSequence]] = []
    counters = DraftCounters()
    detok, stops = None, StopMatcher(req.stop)
    t_first = t_last = None
    finalized = False
    prompt_ids: list[int] | None = None
    generated: list[int] = []

    def check() -> None:
        if job.cancelled:
            raise Cancelled
        safe_point()

    try:
        check()
        prompt = prompt_ids = encode_prompt(req, tok)
        stats.prompt_tokens = len(prompt)
        max_tokens = fit_context(len(prompt), req.max_tokens, main.context_length, main.name)
        if max_tokens < req.max_tokens:
            job.emit(
                Notice(
                    f"max_tokens lowered from {req.max_tokens} to {max_tokens}: the prompt "
                    f"uses {len(prompt)} of the model's {main.context_length}-token context"
                )
            )
        check_top_k(req.top_k, main.logits_size or main.vocab_size, main.name)
        if req.seed is not None:
            mx.random.seed(req.seed)
        sampler = make_sampler(
            0.0 if req.greedy else req.temperature,
            top_p=req.top_p if req.top_p < 1 else 0.0,
            min_p=req.min_p,
            top_k=req.top_k,
        )
        processors = None
        if req.repetition_penalty not in (None, 1, 1.0):
            processors = make_logits_processors(repetition_penalty=req.repetition_penalty)

        main_state = state_for(main)
        main_cache = main_state.cache
        seq, stats.cached_tokens = main_cache.fetch(main.model, prompt, req.reuse_cache)
        seqs.append((main_cache, seq))
        ctx = DraftContext(req, sampler, session=main_state.suffix)
        if req.mode == "draft":
            draft_state = state_for(draft)
            draft_cache = draft_state.cache
            dseq, _ = draft_cache.fetch(draft.model, prompt, req.reuse_cache)
            seqs.append((draft_cache, dseq))
            ctx.draft_seq, ctx.draft_profile = dseq, draft_state.prefill
        source: DraftSource | None = make_source(req.kind, ctx)
        sizer = ChunkSizer(req.prefill_target_s, main_state.prefill)
        prefill(
            seq,
            prompt,
            check=check,
            progress=lambda d, t: job.emit(PrefillProgress(d, t, "main")),
            sizer=sizer,
        )
        stats.prefill_chunk = sizer.largest
        history = list(prompt)
        common = dict(
            sampler=sampler,
            processors=processors,
            max_tokens=max_tokens,
            check=check,
            stream=stream,
        )
        if source is None:
            tokens = normal_tokens(seq, history, greedy=req.greedy, **common)
        else:
            tokens = speculative_tokens(
                seq,
                history,
                source,
                num_draft=req.num_draft_tokens,
                counters=counters,
                draft_progress=lambda d, t: job.emit(PrefillProgress(d, t, "draft")),
                greedy=req.greedy,
                **common,
            )

        detok = tok.detokenizer
        eos = set(tok.eos_token_ids)
        try:
            for i, (tid, from_draft) in enumerate(tokens):
                generated.append(tid)
                t_last = time.perf_counter()
                if t_first is None:
                    t_first = t_last
                stats.generation_tokens = i + 1
                if tid in eos:
                    reason = "stop"
                    job.emit(Token("", tid, from_draft, i))
                    break
                detok.add_token(tid)
                if i + 1 == max_tokens:
                    detok.finalize()
                    finalized = True
                text, matched = stops.feed(detok.last_segment)
                pieces.append(text)
                job.emit(Token(text, tid, from_draft, i))
                if matched is not None:
                    reason = "stop"
                    break
        finally:
            tokens.close()  # runs the generator's cleanup on this thread
    except Cancelled:
        reason = "cancelled"
    except Exception as exc:  # travels as a value; the worker lives on
        reason, error, exception = "error", describe(exc), detach_frames(exc)
        seqs = [(c, s) for c, s in seqs if s.consistent()]
    finally:
        for cache, s in reversed(seqs):  # the main model's last: it wins a shared slot
            cache.store(s)
    if matched is None:
        # Release bytes the detokenizer still holds and text withheld as a
        # possible stop-string start.
        if detok is not None and not finalized:
            detok.finalize()
            text, matched = stops.feed(detok.last_segment)
            pieces.append(text)
        if matched is None:
            pieces.append(stops.flush())
        else:
            reason = "stop"
    if prompt_ids is not None and req.remember:
        state_for(main).suffix.add(prompt_ids + generated)  # for later suffix drafting
    stats.draft_tokens_proposed = counters.proposed
    stats.draft_tokens_accepted = counters.accepted
    stats.draft_rounds = counters.rounds
    stats.proposed_by_position = list(counters.proposed_at)
    stats.accepted_by_position = list(counters.accepted_at)
    _fill_timing(stats, t0, t_first, t_last)
    return Finished("".join(pieces), reason, matched, error, stats, exception)


def _fill_timing(stats: Stats, t0: float, t_first, t_last) -> None:
    stats.peak_memory = mx.get_peak_memory() / 1e9
    if t_first is None:
        return
    stats.total_s = t_last - t0
    stats.ttft_s = t_first - t0
    computed = stats.prompt_tokens - stats.cached_tokens
    stats.prompt_tps = computed / max(stats.ttft_s, 1e-9)
    if stats.generation_tokens > 1 and t_last > t_first:
        stats.generation_tps = (stats.generation_tokens - 1) / (t_last - t_first)
