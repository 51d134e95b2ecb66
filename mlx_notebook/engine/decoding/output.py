"""What every job path shares: its setup (prompt, budget, sampler) and its output.

A job runs either alone (`runner.run_job`, speculative or opted out of batching)
or as a row of a batch (`batch.Batch`). Both prepare the job the same way and
turn generated token ids into `Token` events, text, stop handling and one
`Finished` through the same `Output`, so the two paths cannot drift apart.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import mlx.core as mx
from mlx_lm.sample_utils import make_logits_processors

from ..events import Finished, Notice, Stats, Token, wall_time
from ..job import Job
from ..token_records import special_ids
from .decode import KeyedSampler
from .prompt import check_top_k, encode_prompt, fit_context, lowered
from .reasoning import ReasoningSplitter
from .sampling import make_sampler
from .stops import StopMatcher


@dataclass
class Setup:
    """A job's prompt ids, its token budget and how it samples.

    Attributes:
        prompt: Prompt token ids.
        max_tokens: ``max_tokens`` after fitting the context window.
        sampler: From `make_sampler`.
        processors: From `make_logits_processors`, or None.
        greedy: Whether sampling is argmax.
        sampling: The sampling values in force (`generation.in_force`).
        sample: ``sample(logprobs, position)`` for the main model (`KeyedSampler`).
        constraint: The job's grammar state (`constraint.Constraint`), or None.
        recorder: Per-token records (`recorder.Recorder`) when ``logprobs`` is asked.
    """

    prompt: list[int]
    max_tokens: int
    sampler: object
    processors: list | None
    greedy: bool
    sampling: dict = field(default_factory=dict)
    sample: object = None
    constraint: object = None
    recorder: object = None


# Tokens a repetition penalty looks back over (mlx-lm's default, passed to it explicitly:
# `repetition_processors` marks its processor with the same number).
REPETITION_CONTEXT = 20


def repetition_processors(penalty: float) -> list:
    """mlx-lm's repetition penalty processor, marked ``penalty = (penalty, context)``.

    A batched step applies the marked processors of several rows together
    (`batch_sampling`); mlx-lm's closure keeps its values to itself.
    """
    processors = make_logits_processors(
        repetition_penalty=penalty, repetition_context_size=REPETITION_CONTEXT
    )
    processors[0].penalty = (float(penalty), REPETITION_CONTEXT)
    return processors


def prepare(job: Job, main) -> Setup:
    """Encode the prompt, fit the context (emitting a `Notice` if clamped), build the sampler.

    Raises:
        ContextOverflow: The prompt alone does not fit.
        ValueError: ``top_k`` exceeds the vocabulary.
    """
    from ..defaults import in_force

    sampling = in_force(job.request, getattr(main, "defaults", {}))
    req = job.request.with_defaults(getattr(main, "defaults", {}))
    checked = getattr(job, "checked", None)
    if checked is not None and checked.prompt is not None and checked.tokenizer is main.tokenizer:
        # Encoded and fitted at submit, with this very tokenizer: nothing twice.
        prompt, max_tokens, notices = list(checked.prompt), checked.max_tokens, checked.notices
    else:  # its model was not loaded at submit: encoded here, once
        prompt = encode_prompt(req, main.tokenizer)
        max_tokens = fit_context(len(prompt), req.max_tokens, main.context_length, main.name)
        notices = ()
        if max_tokens < req.max_tokens:
            notices = (lowered(req.max_tokens, max_tokens, len(prompt), main.context_length),)
        check_top_k(req.top_k, main.logits_size or main.vocab_size, main.name)
    for notice in notices:
        job.emit(Notice(notice))
    sampler = make_sampler(
        0.0 if req.greedy else req.temperature,
        top_p=req.top_p if req.top_p < 1 else 0.0,
        min_p=req.min_p,
        top_k=req.top_k,
    )
    processors = None
    if req.repetition_penalty not in (None, 1, 1.0):
        processors = repetition_processors(req.repetition_penalty)
    if req.chat and getattr(main.tokenizer, "has_thinking", False):
        from .reasoning import EndThinking  # a no-op until `Job.end_thinking`

        processors = [*(processors or []), EndThinking(job, main.tokenizer)]
    point = req.branch_from
    chosen = point is not None and point.token is not None
    if point is not None and (chosen or point.avoid is not None):
        from ..tokens.branching import first_token_processor, token_id

        vocab = main.logits_size or main.vocab_size
        token = token_id(point.token, main.tokenizer, vocab) if chosen else None
        first = first_token_processor(len(prompt), token, point.avoid)
        processors = [*(processors or []), first]
    constraint = None
    schema = job.request.constraint  # compiled once on the submitted request (cached there)
    if schema is not None:
        from ..tokens.constraint import for_schema

        constraint = for_schema(schema, main.tokenizer, main.logits_size or main.vocab_size)
    recorder = None
    if req.logprobs is not None:
        from ..tokens.recorder import Recorder

        recorder = Recorder(req.logprobs, main.tokenizer, chosen_first=chosen)
    return Setup(
        prompt, max_tokens, sampler, processors, req.greedy, sampling,
        KeyedSampler(sampler, req.seed), constraint, recorder,
    )  # fmt: skip


class Output:
    """Turns a job's token ids into events and text, and builds its `Finished`.

    Args:
        job: The job; `Token` events are emitted on it.
        tokenizer: The main model's tokenizer (its detokenizer is used).
        max_tokens: The job's token budget.
        t0: When the job's own work started (``time.perf_counter()``).
    """

    def __init__(
        self,
        job: Job,
        tokenizer,
        max_tokens: int,
        t0: float,
        prompt: Sequence[int] = (),
        constraint=None,
    ) -> None:
        self.job = job
        # A grammar that has ended ends the job (its tokens are consumed before `add`).
        self.constraint = constraint
        self._split = ReasoningSplitter.for_job(job.request, tokenizer, prompt)
        self._thought: list[str] = []
        self.max_tokens = max_tokens
        self.stats = Stats()
        self.reason = "length"
        self.generated: list[int] = []
        self._detok = tokenizer.detokenizer  # a fresh copy per access
        self._eos = set(tokenizer.eos_token_ids)
        self._special = special_ids(tokenizer)  # not text: no view or result shows them
        self._stops = StopMatcher(job.request.stop)
        self._pieces: list[str] = []
        self._matched: str | None = None
        self._released = False
        self._t0 = t0
        self._first = self._last = None

    def add(self, tid: int, from_draft: bool = False, info=None) -> bool:
        """Take one generated token; return True when generation must end here.

        ``info`` is its `TokenRecord` when the request asked for ``logprobs``. The last
        token's event also carries the text still held back (`_release`), so a stream's
        pieces add up to the result's text whenever the generation ends on a token.
        """
        i = len(self.generated)
        self.generated.append(tid)
        self._last = time.perf_counter()
        if self._first is None:
            self._first = self._last
        self.stats.generation_tokens = i + 1
        text = ""
        if tid in self._eos:
            self.reason, end = "stop", True
        elif tid in self._special:  # e.g. a drawn <|im_start|>: a token, never text
            end = i + 1 >= self.max_tokens
        else:
            self._detok.add_token(tid)
            text, self._matched = self._stops.feed(self._detok.last_segment)
            grammar_done = self.constraint is not None and self.constraint.stopped
            if self._matched is not None or grammar_done:
                self.reason = "stop"
            end = self.reason == "stop" or i + 1 >= self.max_tokens
        text, thought = self._route(text)
        if end:
            more, more_thought = self._release()
            text, thought = text + more, thought + more_thought
        self.job.emit(Token(text, tid, from_draft, i, thought, info))
        return end

    def _release(self) -> tuple[str, str]:
        """Release what is held back, once; return it as (answer, reasoning).

        That is the bytes the detokenizer holds and text withheld as a possible
        stop-string start or reasoning marker.
        """
        if self._released:
            return "", ""
        self._released = True
        start, start_thought = len(self._pieces), len(self._thought)
        if self._matched is None:
            self._detok.finalize()
            text, self._matched = self._stops.feed(self._detok.last_segment)
            self._route(text)
            if self._matched is None:
                self._route(self._stops.flush())
            else:
                self.reason = "stop"
        if self._split is not None:  # text held back as a possible marker start
            answer, thought = self._split.flush()
            self._pieces.append(answer)
            self._thought.append(thought)
        return "".join(self._pieces[start:]), "".join(self._thought[start_thought:])

    def finish(
        self, reason: str | None = None, error: str | None = None, exception=None
    ) -> Finished:
        """The terminal event (not emitted): text so far, with withheld text released.

        Args:
            reason: Overrides the reason `add` found (``"cancelled"``, ``"error"``).
            error: One-line error text.
            exception: The exception behind an error.
        """
        matched = self._matched
        self._release()  # a cancel or an error: held-back text is in the result only
        reason = "stop" if matched is None and self._matched is not None else reason
        reason = reason or self.reason
        st = self.stats
        st.peak_memory = mx.get_peak_memory() / 1e9
        if self._first is not None:
            st.total_s = self._last - self._t0
            st.ended_at = wall_time(self._last)
            st.ttft_s = self._first - self._t0
            st.prompt_tps = (st.prompt_tokens - st.cached_tokens) / max(st.ttft_s, 1e-9)
            if st.generation_tokens > 1 and self._last > self._first:
                st.generation_tps = (st.generation_tokens - 1) / (self._last - self._first)
        text, thought = "".join(self._pieces), "".join(self._thought)
        return Finished(text, reason, self._matched, error, st, exception, thought)

    def _route(self, text: str) -> tuple[str, str]:
        """Keep ``text`` as answer and reasoning pieces; return both parts."""
        thought = ""
        if self._split is not None:
            text, thought = self._split.feed(text)
            self._thought.append(thought)
        self._pieces.append(text)
        return text, thought
