"""Typed events a job emits, from `Queued` to exactly one terminal `Finished`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "cancelled", "error"]


@dataclass(frozen=True)
class Queued:
    """The job waits in the engine's queue.

    Attributes:
        position: Jobs ahead of this one, the running job included (0 = next).
        waiting_for: What the engine is busy with, e.g. ``"job 3 on default"``.
    """

    position: int
    waiting_for: str = ""


@dataclass(frozen=True)
class Started:
    """The worker picked the job up."""


ENGINE = "the engine"  # `Loading.model` while the worker imports MLX (first use)


@dataclass(frozen=True)
class Loading:
    """The worker is loading a model the job needs (seconds on first use).

    Attributes:
        model: The spec being loaded; `ENGINE` while the worker imports MLX itself.
    """

    model: str


@dataclass(frozen=True)
class Notice:
    """Something the user should know about this job, e.g. a clamped ``max_tokens``.

    Attributes:
        message: One line of text.
    """

    message: str


@dataclass(frozen=True)
class PrefillProgress:
    """Prompt tokens processed so far.

    Attributes:
        done: Prompt tokens in the KV cache (reused tokens count as done).
        total: Prompt tokens in all.
        model: ``"main"`` or ``"draft"``: which model is prefilling.
    """

    done: int
    total: int
    model: str = "main"


@dataclass(frozen=True)
class Token:
    """One generated token.

    Attributes:
        text: Text released by this token. Empty while the detokenizer waits for
            more bytes or while the text could still start a stop string, and for
            a special token (end of turn, ``<|im_start|>``), which is not text. The
            token that ends a generation releases all that was held back, so the
            tokens' texts add up to `Finished.text` (but for a cancel or an error).
        token_id: The token id.
        from_draft: True when the token was a draft token accepted by the main model.
        index: 0-based position among the generated tokens.
        reasoning: Reasoning text released by this token (a thinking model's
            reply before its answer); ``text`` is then the answer's part only.
        info: Its `TokenRecord` when the request asked for ``logprobs``.
    """

    text: str
    token_id: int
    from_draft: bool
    index: int
    reasoning: str = ""
    info: object = None


@dataclass
class Stats:
    """Timing and size figures of one job.

    Attributes:
        prompt_tokens: Tokens in the prompt.
        cached_tokens: Prompt tokens reused from the prompt cache, not recomputed.
        generation_tokens: Tokens generated.
        ttft_s: Seconds from start to the first token.
        prompt_tps: Prompt tokens computed per second.
        generation_tps: Generated tokens per second after the first one.
        peak_memory: Peak memory of the MLX allocator, in GB.
        draft_tokens_proposed: Draft tokens proposed (speculative decoding only).
        draft_tokens_accepted: Draft tokens accepted (speculative decoding only).
        draft_rounds: Verify rounds that had at least one draft token.
        proposed_by_position: For draft position i+1, the rounds that proposed it.
        accepted_by_position: For draft position i+1, the rounds that accepted it.
        total_s: Seconds from the start of the job's own work (after any model
            load) to its end: prefill and decode, the end-to-end figure.
        prefill_chunk: The largest prefill chunk used, in tokens.
        drafts_known: False when the draft counts are unknown (a server that does
            not report them), so zero proposed does not mean none accepted.
        batch_rows: The most jobs this one was decoded with in one batched step,
            itself included (1: it decoded alone in the batch; 0: it ran outside
            the batch, as speculative and opted-out jobs do).
        decode_steps: Forward passes of the main model after prefill that this job
            took part in (a batched step counts once; a verify pass counts once).
        step_rows: Rows in those passes, added up: ``step_rows / decode_steps`` is
            the mean batch a token of this job was decoded in.
        replayed_tokens: Accepted tokens fed again after rejected drafts, where the
            cache (a sliding window past its length, recurrent state) could not
            be trimmed and was restored from a snapshot instead.
        sampling: The sampling values in force and which came from the model's
            ``generation_config.json`` (`defaults.in_force`).
        model: What ran it (a local model): its name, the hash of its files
            (`replay.key.model_identity`), the precision loaded, the device and the
            versions of mlx, mlx-lm and this package. Saved outputs carry it.
        ended_at: When its last token came, in epoch seconds (None before any
            token): with ``total_s``, where its work lay in time, so rows' aggregate
            figures can be found again from their stats (`mapping.result.aggregate`).
        replayed: When the result came from the result cache, no forward pass made it:
            ``{"made": epoch seconds, "seconds": the original run's total_s}``; the
            other figures are the original run's. None for a result generated now.
    """

    prompt_tokens: int = 0
    cached_tokens: int = 0
    generation_tokens: int = 0
    ttft_s: float | None = None
    prompt_tps: float = 0.0
    generation_tps: float = 0.0
    peak_memory: float = 0.0
    draft_tokens_proposed: int = 0
    draft_tokens_accepted: int = 0
    draft_rounds: int = 0
    proposed_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    total_s: float = 0.0
    prefill_chunk: int = 0
    drafts_known: bool = True
    batch_rows: int = 0
    decode_steps: int = 0
    step_rows: int = 0
    replayed_tokens: int = 0
    sampling: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)
    ended_at: float | None = None
    replayed: dict | None = None

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / proposed draft tokens, or None when nothing was proposed."""
        if not self.draft_tokens_proposed:
            return None
        return self.draft_tokens_accepted / self.draft_tokens_proposed

    @property
    def mean_accepted(self) -> float | None:
        """Mean accepted draft tokens per round that had drafts, or None."""
        if not self.draft_rounds:
            return None
        return self.draft_tokens_accepted / self.draft_rounds

    @property
    def e2e_tps(self) -> float:
        """Generated tokens per second of ``total_s`` (prefill included)."""
        return self.generation_tokens / self.total_s if self.total_s > 0 else 0.0


def wall_time(perf_t: float) -> float:
    """Epoch seconds of ``perf_t``, a `time.perf_counter` reading in the past."""
    return time.time() - (time.perf_counter() - perf_t)


@dataclass(frozen=True)
class Finished:
    """The terminal event: always the last one, exactly once.

    Attributes:
        text: The whole generated text, stop string excluded.
        finish_reason: ``"stop"`` (EOS or stop string), ``"length"``,
            ``"cancelled"`` or ``"error"``.
        matched_stop: The stop string that ended the job, if any.
        error: One line of error text when ``finish_reason == "error"``.
        stats: Timing and size figures.
        reasoning: A thinking model's reasoning, apart from ``text`` (the answer).
        exception: The exception behind an error, with its traceback (frames'
            locals cleared), for whoever wants more than the one line.
    """

    text: str
    finish_reason: FinishReason
    matched_stop: str | None = None
    error: str | None = None
    stats: Stats = field(default_factory=Stats)
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    reasoning: str = ""

    @classmethod
    def failed(cls, exc: BaseException, text: str = "") -> Finished:
        """The terminal event of a job that ``exc`` ended: one line, and the exception."""
        from .errors import describe, detach_frames

        return cls(text, "error", None, describe(exc), exception=detach_frames(exc))


Event = Queued | Started | Loading | Notice | PrefillProgress | Token | Finished
