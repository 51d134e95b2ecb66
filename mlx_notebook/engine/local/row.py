"""One job in the batch: its sequence, its output, its prefill steps and where it stands."""

from __future__ import annotations

import mlx.core as mx

from ..cache.prompt_cache import ModelState, persists
from ..decoding.output import Output, Setup
from ..decoding.prefill import ChunkSizer, prefill_steps
from ..events import PrefillProgress
from ..job import Job


class Row:
    """One job in the batch: its sequence, its output and where it stands.

    Args:
        job: The job.
        state: Its model's `ModelState`.
        setup: Prompt, budget and sampler.
        seq: Its KV cache and tokens (taken from the prompt cache).
        out: Turns its tokens into events.
        alone: Whether no other row waits for its prefill chunks (see `prefill_steps`).
        grid: ``(window, grid)`` of its chunks (`ModelState.prefill_grid`).
    """

    def __init__(
        self,
        job: Job,
        state: ModelState,
        setup: Setup,
        seq,
        out: Output,
        alone=lambda: True,
        grid: tuple[int, int] = (0, 0),
    ) -> None:
        self.job, self.state, self.setup, self.seq, self.out = job, state, setup, seq, out
        window, step = grid
        self.sizer = ChunkSizer(
            job.request.prefill_target_s, state.prefill, window=window, grid=step
        )
        self.steps = prefill_steps(
            seq,
            setup.prompt,
            progress=lambda d, t: job.emit(PrefillProgress(d, t, "main")),
            sizer=self.sizer,
            stop=lambda: job.cancelled,
            alone=alone,
        )
        self.phase = "prefill"  # then "ready" (prefilled), "decode", "done"
        self.told_padding = False  # heard that its prompt prefills alone (`batch_prefill`)
        self.fresh = True  # its next emitted value is its prompt's last token, not output
        # Logits processors see every token fed so far (the last one is fed next).
        self.context = mx.array(setup.prompt[:-1], dtype=mx.uint32) if setup.processors else None

    @property
    def left(self) -> int:
        """Prompt tokens still to prefill (the last one is decoded)."""
        return len(self.setup.prompt) - 1 - len(self.seq.tokens)

    def prefilled(self) -> None:
        """The prompt is in the cache: ready to join the next step."""
        self.steps.close()
        self.phase = "ready"
        if self.job.request.reuse_cache:
            self.state.cache.keep_prompt(self.seq, persists(self.job.request))

    def forced_end(self) -> bool:
        """Write a grammar's forced ending at once (a choice's last tokens, ``"]}``).

        Returns whether the row ended: its forced tokens then cost no steps.
        """
        c = self.setup.constraint
        if c is None or c.stopped:
            return False
        out = self.out
        rec = self.setup.recorder
        for t in c.forced_ending(out.max_tokens - len(out.generated)):
            c.consume([t])  # one at a time: the output reads the grammar's state
            if out.add(t, False, rec.forced(t) if rec else None):
                return True
        return False
