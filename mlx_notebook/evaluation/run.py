"""An evaluation running: one model after another, each model's cells batched, scored.

A driver thread of its own submits each model's cells together (the local engine
decodes them in one batch, so rows share steps), scores each cell as it ends, has
a `judge` grade a model's outputs once they all ended, and only then moves to
the next model: each model is loaded once and never thrashes with another. The
scorer, user code, runs on the driver thread, never on the engine's worker. The
first cell runs and is scored alone, before anything else is submitted: a scorer
that raises stops the evaluation there, with its message.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from ..display import RichDisplay
from ..engine.events import Finished
from ..engine.request import Request
from .plan import Cell, Plan
from .result import EvalResult
from .scorers import VERDICT, Output, judge_prompt, normalize

log = logging.getLogger("mlx_notebook")

CHOICE_ROWS = 16  # questions per worker call: Stop waits at most one such call


class ScorerError(ValueError):
    """The scorer raised on the first cell; nothing else ran."""


class EvalRun(RichDisplay):
    """Runs a `Plan`: `start`, then watch `cells`, `cancel` or `cancel_column`, `wait`.

    Args:
        plan: What to run (`plan.build`).
        on_submit: Called with each job as it is submitted (a view follows it).
        on_change: Called after a cell ended or was scored (a view redraws).
    """

    def __init__(
        self,
        plan: Plan,
        on_submit: Callable | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.plan = plan
        self.cells = plan.cells
        self.on_submit = on_submit or (lambda job: None)
        self.on_change = on_change or (lambda: None)
        self.stopped: set[int] = set()  # columns stopped
        self.current: str | None = None  # the model running now
        self.error: str | None = None  # why the run ended early
        self.t0: float | None = None
        self.t_end: float | None = None
        self._ended: queue.Queue[Cell] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._futures: list = []  # choice calls on the worker, while they run
        self._judging: list = []  # (cell, judge job), while a judge grades

    # -- control ------------------------------------------------------------------
    def start(self) -> EvalRun:
        """Run and score the first cell alone, then go on in the background.

        Raises:
            ScorerError: The scorer raised on the first cell (nothing else ran).
            KeyboardInterrupt: Ctrl-C during the first cell (it is stopped).
        """
        self.t0 = time.monotonic()
        first = self.cells[0]
        self.current = self.plan.columns[first.column].model
        try:
            self._run_cells([first])
        except BaseException:  # Ctrl-C, or a backend that refused: the run ends here
            self.cancel()
            self._finish()
            raise
        if first.error is not None and first.error.startswith("scorer: "):
            self.error = first.error
            self._finish()
            raise ScorerError(f"{first.error} (on row 0; nothing else ran)")
        self._thread = threading.Thread(target=self._drive, name="mlxnb-evaluate", daemon=True)
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Stop everything: running cells end as stopped, the rest are skipped."""
        for col in range(len(self.plan.columns)):
            self.cancel_column(col)

    def cancel_column(self, column: int) -> None:
        """Stop one column: its running cells end as stopped, the rest are skipped."""
        self.stopped.add(column)
        for cell in self.cells:
            if cell.column == column and cell.job is not None:
                cell.job.cancel()
        for cell, job in list(self._judging):
            if cell.column == column:
                job.cancel()
        for fut in list(self._futures):
            fut.cancel()

    @property
    def done(self) -> bool:
        """Whether every cell ended and the run has finished."""
        return self.t_end is not None

    def wait(self, timeout: float | None = None) -> EvalResult:
        """Block until done (Ctrl-C stops everything, waits, and re-raises)."""
        try:
            if self._thread is not None:
                self._thread.join(timeout)
        except KeyboardInterrupt:
            self.cancel()
            if self._thread is not None:
                self._thread.join()
            raise
        return self.result()

    def result(self) -> EvalResult:
        """The cells so far, as an `EvalResult`."""
        return EvalResult(self.plan, list(self.cells), self.elapsed(), self.error)

    # What ``-o NAME`` users call on the run: each waits for the end first.
    def summary(self):
        """`EvalResult.summary` once every cell ended."""
        return self.wait().summary()

    def to_frame(self):
        """`EvalResult.to_frame` once every cell ended."""
        return self.wait().to_frame()

    def table(self):
        """`EvalResult.table` once every cell ended."""
        return self.wait().table()

    def disagreements(self, n: int = 10):
        """`EvalResult.disagreements` once every cell ended."""
        return self.wait().disagreements(n)

    def elapsed(self) -> float:
        """Seconds since `start` (until the end, once done)."""
        if self.t0 is None:
            return 0.0
        return (self.t_end or time.monotonic()) - self.t0

    # -- the driver -------------------------------------------------------------------
    def _drive(self) -> None:
        try:
            for model in self.plan.models:
                self.current = model
                cells = [
                    c for c in self.cells
                    if not c.ended and self.plan.columns[c.column].model == model
                ]  # fmt: skip
                self._run_cells(cells)
        except Exception as exc:  # never a silent end: the view and result say why
            log.exception("mlx_notebook: the evaluation stopped")
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._finish()

    def _finish(self) -> None:
        for cell in self.cells:
            if not cell.ended:
                cell.finish_reason = "skipped"
        self.current = None
        self.t_end = time.monotonic()
        self.on_change()

    def _run_cells(self, cells: list[Cell]) -> None:
        """One model's cells: generated (or their options scored), then judged."""
        cells = [c for c in cells if c.column not in self.stopped]
        if not cells:
            return
        scorer = self.plan.scorer
        if scorer is not None and scorer.kind == "choice":
            self._choose(cells)
            return
        self._generate(cells)
        if scorer is not None and scorer.kind == "judge":
            self._judge([c for c in cells if c.finish_reason in ("stop", "length")])

    def _generate(self, cells: list[Cell]) -> None:
        route = self.plan.routes[self.plan.columns[cells[0].column].model]
        requests = [self.plan.request(c) for c in cells]
        many = getattr(route.backend, "submit_many", None)
        jobs = many(requests, "row") if many else [route.backend.submit(r) for r in requests]
        for cell, job in zip(cells, jobs):
            cell.job = job
            if cell.column in self.stopped:
                job.cancel()
            self.on_submit(job)
            job.add_listener(lambda ev, c=cell: ev.__class__ is Finished and self._ended.put(c))
        for _ in cells:
            cell = self._ended.get()
            self._settle(cell)

    def _settle(self, cell: Cell) -> None:
        """A generated cell ended: keep its outcome and score it (not a judge's)."""
        res = cell.job.result(raise_on_error=False)
        cell.text, cell.finish_reason, cell.error = res.text, res.finish_reason, res.error
        cell.stats = res.stats
        scorer = self.plan.scorer
        if scorer is not None and scorer.kind == "text" and res.finish_reason != "error":
            value = None
            if res.schema is not None and res.finish_reason == "stop":
                try:
                    value = res.value
                except ValueError:
                    value = None
            self._score(cell, value)
        self.on_change()

    def _output(self, cell: Cell, value) -> Output:
        col = self.plan.columns[cell.column]
        return Output(
            cell.text, cell.finish_reason, value, cell.prompt, col.model, col.variant, cell.epoch
        )

    def _score(self, cell: Cell, value) -> None:
        try:
            cell.score, cell.extra = normalize(
                self.plan.scorer(self.plan.rows[cell.row], self._output(cell, value))
            )
        except Exception as exc:  # the scorer is user code: its error stays in its cell
            cell.error = f"scorer: {type(exc).__name__}: {exc}"

    def _choose(self, cells: list[Cell]) -> None:
        col = self.plan.columns[cells[0].column]
        route = self.plan.routes[col.model]
        opts = self.plan.scorer.options
        fields = self.plan.fields
        for i in range(0, len(cells), CHOICE_ROWS):
            part = [c for c in cells[i : i + CHOICE_ROWS] if c.column not in self.stopped]
            if not part:
                continue
            questions = [(c.prompt, list(self.plan.rows[c.row][opts])) for c in part]
            fut = route.backend.option_logprobs(
                questions, model=route.model, chat=fields.get("chat"),
                system=fields.get("system"),
            )  # fmt: skip
            self._futures.append(fut)
            try:
                lls = fut.result()
            except Exception:  # cancelled by Stop (or failed): those cells end so
                if fut.cancelled():
                    for c in part:
                        c.finish_reason = "cancelled"
                    continue
                raise
            finally:
                self._futures.remove(fut)
            for cell, (_, options), ll in zip(part, questions, lls):
                best = max(range(len(options)), key=lambda k: ll[k])
                cell.text, cell.finish_reason = options[best], "stop"
                self._score(cell, ll)
                cell.extra = {**cell.extra, "loglik": ll}
            self.on_change()

    def _judge(self, cells: list[Cell]) -> None:
        """Grade ``cells`` with the judge model, batched; each verdict scores its cell."""
        scorer, route = self.plan.scorer, self.plan.judge_route
        cells = [c for c in cells if c.column not in self.stopped]
        if not cells:
            return
        reqs = [
            Request(
                judge_prompt(scorer, self.plan.rows[c.row], self._output(c, None)),
                model=route.model,
                schema=VERDICT,
                temperature=0.0,
                max_tokens=400,
            )  # fmt: skip
            for c in cells
        ]
        many = getattr(route.backend, "submit_many", None)
        jobs = many(reqs, "row") if many else [route.backend.submit(r) for r in reqs]
        self._judging = list(zip(cells, jobs))
        for cell, job in self._judging:
            if cell.column in self.stopped:
                job.cancel()
            res = job.result(raise_on_error=False)
            if res.finish_reason != "stop":
                cell.error = f"judge: the verdict ended ({res.finish_reason}) {res.error or ''}"
                continue
            self._score(cell, res.value)
            self.on_change()
        self._judging = []
