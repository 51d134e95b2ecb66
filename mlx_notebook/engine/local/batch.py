"""Continuous batching on the worker thread: normal-decoding rows of one model.

Decoding is memory-bound: one step over B rows reads the weights once, so it
costs little more than one row. The worker calls `Batch.tick` between other
work (and at the cancel points of a job running alone), and each tick:

1. ends the rows whose job was cancelled (their caches are consistent there);
2. runs at most one prefill chunk, for the oldest row still prefilling (chunks
   are time-sized as for a job alone, so a new job waits at most one chunk);
3. advances every decoding row by one batched step.

Steps are pipelined as in mlx-lm: step n+1 is queued (``async_eval``) before the
tokens of step n are read and emitted. Rows keep their own sampler, logits
processors, seed, stop strings, budget, events and stats (`output.Output`).
A row alone decodes on its own cache, exactly as a job alone; from two rows
on, each layer's caches are merged by that kind's own ``merge`` (full attention
into a left-padded ``BatchKVCache``, a sliding window into a
``BatchRotatingKVCache``, recurrent state stacked; see `caches`), and a row
that leaves gets its own cache of the original kind back (``extract``),
consistent with its tokens, for the prompt cache. A model with a kind that
cannot merge never gets here: its jobs run alone (`admit` says why).

Nothing strands a job: an error while joining ends the joining rows only; an
error in the shared step (or in taking a row out) ends the rows in it; every
ended row leaves the batch, so an empty batch lets the worker sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import mlx.core as mx
from mlx_lm.models.cache import BatchRotatingKVCache

from ..cache.caches import extract, layers, merge
from ..cache.prompt_cache import ModelState
from ..cache.sequence import CachedSequence, count_pass
from ..decoding.device import governor, rope_tables
from ..decoding.output import Output, prepare
from ..decoding.prefill import ChunkSizer
from ..errors import describe, detach_frames
from ..events import Finished, PrefillProgress
from ..job import Job
from ..replay.key import about_model
from . import jump
from .batch_prefill import may_prefill_together, prefill_together
from .batch_sampling import next_tokens
from .jump import jumps
from .row import Row


class Batch:
    """Rows of normal decoding on one model, stepped together.

    Args:
        max_rows: Most rows at once (prefilling and decoding).
        state_for: Returns a loaded model's `ModelState`.
    """

    def __init__(
        self, max_rows: int, state_for: Callable[[object], ModelState], replays=None
    ) -> None:
        self.max_rows = max_rows
        self.state_for = state_for
        self.replays = replays  # the result cache: a stored row is replayed, not admitted
        self.main = None  # the rows' LoadedModel
        self.rows: list[Row] = []  # admitted, in order
        self.decoding: list[Row] = []  # in the order of the cache's batch axis
        self._cache: list | None = None  # the lone row's own cache, or BatchKVCache layers
        self._pending: mx.array | None = None  # tokens sampled by the last step, one per row
        self._tables: list = []

    # -- admission ------------------------------------------------------------------
    @property
    def model_name(self) -> str | None:
        """The rows' model (registry name), or None when the batch is empty."""
        return None if self.main is None else self.main.name

    @property
    def room(self) -> int:
        """Rows that can still be admitted."""
        return self.max_rows - len(self.rows)

    @property
    def jobs(self) -> list[Job]:
        """The admitted jobs."""
        return [r.job for r in self.rows]

    def __bool__(self) -> bool:
        return bool(self.rows)

    def admit(self, job: Job, main) -> str | None:
        """Set ``job`` up as a row on ``main`` (loaded); it prefills on later ticks.

        A job that fails here (its prompt does not fit, say) ends at once.

        Returns:
            None, or why ``main`` cannot batch (a cache kind with no ``merge``):
            the job was not admitted and must run alone.
        """
        state = self.state_for(main)
        kind = state.unbatchable(main.model)
        if kind is not None:
            return f"{main.name} runs alone: its {kind} layers cannot join a batch"
        # A second row: whether the model runs batched at all (checked once per model).
        failed = state.batch_failure(main, rope_tables(main.model)) if self.rows else None
        if failed is not None:
            return f"{main.name} runs alone: {failed}"
        t0 = time.perf_counter()
        out = None
        try:
            setup = prepare(job, main)
            if self.replays is not None:
                stored = self.replays.lookup(job, main, setup)
                if stored is not None:  # no forward pass: its stored events, then the end
                    job.emit(stored)
                    return None
            out = Output(job, main.tokenizer, setup.max_tokens, t0, setup.prompt, setup.constraint)
            tables = rope_tables(main.model) if self.main is None else self._tables
            window, grid = state.prefill_grid(
                main, len(setup.prompt), tables, lambda: job.emit(state.checking(main))
            )
            seq, cached = state.cache.fetch(main.model, setup.prompt, job.request.reuse_cache)
            out.stats.prompt_tokens, out.stats.cached_tokens = len(setup.prompt), cached
            out.stats.sampling = setup.sampling
            out.stats.model = about_model(main, identify=bool(self.replays and self.replays.on))
        except Exception as exc:  # noqa: BLE001 - ends this job only
            fin = Finished.failed(exc)
            job.emit(fin if out is None else out.finish("error", fin.error, fin.exception))
            return None
        if self.main is None:
            self.main, self._tables = main, tables
        self.rows.append(
            Row(job, state, setup, seq, out, alone=lambda: not self.decoding, grid=(window, grid))
        )
        return None

    # -- the step -------------------------------------------------------------------------
    def tick(self) -> None:
        """End cancelled rows, run at most one prefill chunk, then one batched step.

        Never raises: an error ends the rows it concerns, with the error.
        """
        try:
            for row in [r for r in self.rows if r.job.cancelled]:
                self._end(row, "cancelled")
            self._prefill_chunk()
            self._step()
        except Exception as exc:  # noqa: BLE001 - the shared state failed: every row in it
            self._fail_shared(exc)

    def _fail_shared(self, exc: BaseException) -> None:
        """End every row whose cache lives in the batch (its state is unknown)."""
        failed = [r for r in self.rows if r in self.decoding or r.phase == "joining"]
        self.decoding, self._cache, self._pending = [], None, None
        for row in failed:
            row.phase, row.seq.cache = "failed", None
            self._end(row, "error", exc)

    def _prefill_chunk(self) -> None:
        """One time-sized chunk: of the oldest prefilling row, or of several short prompts.

        Rows whose whole remaining prompt fits the chunk budget together prefill in
        one forward pass (right-padded, as mlx-lm's batched prompt processing does):
        one pass over the weights instead of one per row, and they start decoding on
        the same step.
        """
        pre = []
        for r in self.rows:
            if r.phase == "prefill" and r.left == 0:  # all cached: nothing to prefill
                r.job.emit(PrefillProgress(len(r.seq.tokens), len(r.setup.prompt), "main"))
                r.prefilled()
            elif r.phase == "prefill":
                pre.append(r)
        if not pre:
            return
        first = pre[0]
        # Short prompts side by side attend only to their own short contexts: the time
        # target alone bounds the group (a long prompt's chunk is also held to the
        # length at which a prompt prefills fastest, `PrefillProfile.best`).
        fit = first.state.prefill.largest_within(first.sizer.target_s * ChunkSizer.MARGIN, 0)
        budget = max(first.sizer.size_at(len(first.seq.tokens)), int(min(fit or 0, first.sizer.hi)))
        group, total = [], 0
        for r in pre:
            if total + r.left > budget:
                break
            if r.sizer.grid and r.left > r.sizer.size_at(len(r.seq.tokens)):
                break  # one pass would not end where its prefill must (`ChunkSizer`)
            group.append(r)
            total += r.left
        try:
            if len(group) > 1 and may_prefill_together(group, self.main, self._tables):
                prefill_together(self.main, group, self._tables)
                return
            next(first.steps, None)
            if first.left == 0:
                first.prefilled()  # joins this tick's step
        except Exception as exc:  # noqa: BLE001 - these rows only
            for r in group or [first]:
                self._end(r, "error", exc)

    HOLD_S = 1.0

    def _burst_prefilling(self) -> bool:
        """Whether rows that arrived with the ready ones are still prefilling, briefly.

        Held back only while the rest is predicted to take under `HOLD_S` more
        seconds, so a long prompt never delays the others' first tokens much.
        """
        pre = [r for r in self.rows if r.phase == "prefill"]
        if not pre:
            return False
        left = sum(r.left for r in pre)
        predicted = pre[0].state.prefill.predict(left, 0)
        return predicted is not None and predicted <= self.HOLD_S

    def _step(self) -> None:
        joiners = [r for r in self.rows if r.phase == "ready"]
        if joiners and not self.decoding and self._burst_prefilling():
            joiners = []  # start the burst together: one merge, full steps, no stragglers
        if not self.decoding and not joiners:
            return
        cur = self._pending
        if joiners:
            try:
                self._join(joiners)
            except _JoinFailed as failed:  # nothing shared changed: the others go on
                for r in joiners:
                    self._end(r, "error", failed.__cause__)
                joiners = []
        if joiners:
            new = mx.array([r.setup.prompt[-1] for r in joiners], dtype=mx.uint32)
            cur = new if cur is None else mx.concatenate([cur, new])
        rows = self.decoding
        if not rows:
            return
        if any(jumps(r) for r in rows) and self._jumps_exactly(rows):
            jump.step(self, rows, cur)  # forced tokens ride in this pass
            return
        for r in rows:
            st = r.out.stats
            st.batch_rows = max(st.batch_rows, len(rows))
            st.decode_steps += 1
            st.step_rows += len(rows)
        if len(rows) == 1:  # alone: its own cache, int offsets, nothing to pin
            count_pass()
            logits = self.main.model(cur[:, None], cache=self._cache)[:, -1, :]
        else:
            positions = [len(r.seq.tokens) for r in rows]  # where each row's token goes
            for t in self._tables:  # the fast path's RoPE: this step's rows, taken once
                t.pin(positions)
            try:
                count_pass()
                logits = self.main.model(cur[:, None], cache=self._cache)[:, -1, :]
            finally:
                for t in self._tables:
                    t.pin(None)
        # A grammar needs this step's fed tokens before its mask: read them first then
        # (once), else after queueing the next step, so the read overlaps it.
        constrained = any(r.setup.constraint is not None for r in rows)
        values = cur.tolist() if constrained else None
        if values is not None:
            self._advance_constraints(rows, values)
        nxt = next_tokens(rows, cur, logits)
        mx.async_eval(nxt)
        if values is None:
            values = cur.tolist()
        governor().step()
        done = []
        for row, v in zip(rows, values):
            row.seq.record([v])  # fed by this step
            if row.fresh:
                row.fresh = False
                continue
            rec = row.setup.recorder
            if row.out.add(v, False, rec.record(v) if rec else None) or row.forced_end():
                done.append(row)
        self._pending = nxt
        for row in done:
            self._end(row, None)

    def _jumps_exactly(self, rows: list[Row]) -> bool:
        """Whether rows may feed several tokens in a pass, padded to the longest, exactly.

        Not where a pass over several tokens differs from single steps (plamo3), nor
        where layers read their padding, nor with mlx-lm's batched sliding window: once
        it has wrapped, its mask for a pass of several tokens is one key off (it hides a
        short row's first kept token), so batched rows there take a token a step.
        """
        state = rows[0].state
        if state.multi_token_problem(self.main, self._tables) is not None:
            return False
        if len(rows) == 1:
            return True
        if state.padding_problem(self.main, self._tables) is not None:
            return False
        return not any(isinstance(c, BatchRotatingKVCache) for c in layers(self._cache))

    def _advance_constraints(self, rows: list[Row], values: list[int]) -> None:
        """Feed each constrained row's grammar the token this step fed, before its mask.

        A fresh row's token is its prompt's last, not output: it is skipped.
        """
        for row, v in zip(rows, values):
            if row.setup.constraint is not None and not row.fresh:
                row.setup.constraint.consume([v])

    # -- the cache's batch axis ----------------------------------------------------------
    def _join(self, joiners: list[Row]) -> None:
        """Add ``joiners`` to the cache's batch axis.

        Raises:
            _JoinFailed: Merging failed before anything shared changed.
        """
        if not self.decoding and len(joiners) == 1:
            self._cache = joiners[0].seq.cache  # alone: its own cache, as a job alone
        else:
            caches = [r.seq.cache for r in joiners]
            lone = len(self.decoding) == 1  # the lone row's own cache joins the merge
            try:
                merged = merge([self._cache, *caches] if lone else caches)
            except Exception as exc:
                raise _JoinFailed from exc
            for r in joiners:
                r.phase = "joining"  # from here a failure concerns the shared state
            if lone or not self.decoding:
                self._cache = merged
            else:
                for mine, more in zip(self._cache, merged):
                    mine.extend(more)
            for r in self.decoding + joiners:
                r.seq.cache = None  # lives in the batch until the row leaves
        for r in joiners:
            r.phase = "decode"
        self.decoding = self.decoding + joiners

    def _leave(self, row: Row) -> None:
        i = self.decoding.index(row)
        keep = [j for j in range(len(self.decoding)) if j != i]
        if len(self.decoding) == 1:
            self._cache, self._pending = None, None
        else:
            row.seq.cache = extract(self._cache, i)
            if self._pending is not None:
                self._pending = self._pending[mx.array(keep)]
            if len(keep) == 1:  # back to one row: its own cache again
                last = self.decoding[keep[0]]
                last.seq.cache = extract(self._cache, keep[0])
                self._cache = last.seq.cache
            else:
                for c in self._cache:
                    c.filter(keep)
        self.decoding = [self.decoding[j] for j in keep]

    def _end(self, row: Row, reason: str | None, exc: BaseException | None = None) -> None:
        row.steps.close()  # a no-op once prefilled
        broken = None
        if row.phase == "decode":
            try:
                self._leave(row)
            except Exception as err:  # noqa: BLE001 - this row ends; the others after it
                broken, row.seq.cache = err, None
                self.decoding.remove(row)
                reason, exc = ("error", err) if exc is None else (reason, exc)
        row.phase = "done"
        self.rows.remove(row)
        if not self.rows:
            self.main, self._tables = None, []
        seq: CachedSequence = row.seq
        if seq.cache is not None and seq.consistent():
            row.state.cache.store(seq)
        req = row.job.request
        if req.remember and row.out.generated:
            row.state.suffix.add(row.setup.prompt + row.out.generated)
        stats = row.out.stats
        stats.prefill_chunk = max(stats.prefill_chunk, row.sizer.largest)  # also when stopped
        error = None if exc is None else describe(exc)
        row.job.emit(row.out.finish(reason, error, None if exc is None else detach_frames(exc)))
        if broken is not None:
            self._fail_shared(broken)

    def fail_all(self, reason: str, error: str | None = None, exc=None) -> None:
        """End every row (engine shutdown)."""
        for row in list(self.rows):
            row.steps.close()
            fin = row.out.finish(reason, error, exc)
            self.rows.remove(row)
            row.job.emit(fin)
        self.decoding, self._cache, self._pending, self.main = [], None, None, None


class _JoinFailed(Exception):
    """Merging new rows' caches failed; the batch is as it was (the cause is chained)."""
