"""``map``: one prompt template over many rows, generated together in the engine's batch.

Every row is its own job, so rows keep their own stop strings, budgets, events
and stats; the local engine decodes them together (continuous batching, see
`engine.batch`), and a server backend queues them. Results come back in input
order. No IPython here: ``%%generate --over`` is a view over the same `MapRun`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..engine.events import Finished
from ..engine.job import Job
from ..engine.request import Request
from ..measure.runs import RunSet
from .result import MapResult, MapRow, aggregate


def rows_of(data) -> tuple[list[dict], list[str]]:
    """Each row's template values from a list, tuple, Series (``item``) or DataFrame.

    Returns:
        ``(rows, names)``: one dict per row, and the names a template may use
        (the DataFrame's columns, or ``item``).

    Raises:
        ValueError: Another kind of value, or no rows.
    """
    kind = type(data).__name__
    if kind == "DataFrame" and hasattr(data, "to_dict"):
        names = [str(c) for c in data.columns]
        rows = [{str(k): v for k, v in r.items()} for r in data.to_dict("records")]
    elif isinstance(data, (list, tuple)) or kind == "Series":
        names = ["item"]
        rows = [{"item": v} for v in (data.tolist() if kind == "Series" else data)]
    else:
        raise ValueError(f"a {kind}; it must be a list, tuple, pandas Series or DataFrame")
    if not rows:
        raise ValueError("empty; nothing to generate")
    return rows, names


def fill_rows(template: str, rows: list[dict], names: list[str], variables=None) -> list[str]:
    """One prompt per row: ``{column}`` (or ``{item}``) from the row, else a variable.

    Raises:
        ValueError: A ``{name}`` that is neither a column nor a variable, in one line
            listing the columns (nothing should run), or a value whose ``str()`` raised.
    """
    from ..template import fill

    prompts = []
    for row in rows:
        text, missing = fill(template, {**(variables or {}), **row})
        if missing:
            listed = ", ".join("{" + n + "}" for n in missing)
            raise ValueError(
                f"{listed} is not a column; the columns are {', '.join(names)} "
                "(nothing was started; use {{ }} for literal braces)"
            )
        prompts.append(text)
    return prompts


def as_prompts(prompts) -> list:
    """A list of prompts from a list, tuple, pandas Series or other iterable.

    Raises:
        ValueError: A single prompt instead of several, or no prompts at all.
    """
    if isinstance(prompts, (str, bytes, dict)):
        raise ValueError("prompts: pass a list (or Series) of prompts, not a single prompt")
    values = getattr(prompts, "tolist", None)  # pandas and numpy: plain Python values
    try:
        items = list(values() if callable(values) else prompts)
    except TypeError:
        raise ValueError(
            f"prompts: must be a list or Series of prompts (got {type(prompts).__name__})"
        ) from None
    if not items:
        raise ValueError("prompts: the list is empty; nothing to generate")
    return items


class MapRun:
    """Rows submitted together: progress while they run, a `MapResult` at the end.

    Args:
        backend: Where to run (``check``/``submit``).
        prompts: The prompts, in order.
        fields: `Request` fields shared by every row.

    Raises:
        ValueError: No prompts (a bad row is refused by `start`).
    """

    def __init__(self, backend, prompts: Sequence, *, label: str | None = None, **fields) -> None:
        self.prompts = as_prompts(prompts)
        self.label = label or fields.get("model") or "default"  # the model, as views name it
        self.schema = None
        if fields.get("schema") is not None:  # normalized once, shared by every row
            from ..schema import Schema

            self.schema = fields["schema"] = Schema.of(fields["schema"])
        requests = [Request(p, **fields) for p in self.prompts]
        self.runs = RunSet(backend, requests, label="row")
        self.t0: float | None = None
        self.t_end: float | None = None  # set by the last row's Finished

    @property
    def jobs(self) -> list[Job]:
        """The rows' jobs, in input order."""
        return self.runs.jobs

    def start(self) -> MapRun:
        """Check every row, then submit them all.

        Raises:
            ValueError: A row is invalid (the message names it); nothing was submitted.
        """
        self.t0 = time.monotonic()
        self.runs.start()
        for job in self.jobs:
            job.add_listener(self._ended)
        return self

    def _ended(self, ev) -> None:
        # Listener on the producing thread: note when the last row has finished.
        if isinstance(ev, Finished) and self.runs.done and self.t_end is None:
            self.t_end = time.monotonic()

    @property
    def done(self) -> bool:
        """Whether every row has ended."""
        return self.runs.done

    def elapsed(self) -> float:
        """Seconds since `start` (until the last row ended, once done)."""
        if self.t0 is None:
            return 0.0
        return (self.t_end or time.monotonic()) - self.t0

    def progress(self) -> tuple[int, int, int, float, float | None]:
        """``(rows done, rows, tokens so far, aggregate tok/s, ETA seconds or None)``."""
        jobs = self.jobs
        done = sum(j.done for j in jobs)
        tokens = sum(j.token_count for j in jobs)
        t = self.elapsed()
        tps = tokens / t if t > 0 else 0.0
        ended = [j.finished for j in jobs]
        if all(ended):  # the final figure: from the rows' stats, as a replay has it
            found = aggregate([f.stats for f in ended])
            if found is not None:
                tps = found[0] / found[1] if found[1] > 0 else 0.0
        eta = None
        if 0 < done < len(jobs):
            eta = t / done * (len(jobs) - done)
        return done, len(self.prompts), tokens, tps, eta

    def cancel(self) -> None:
        """Stop every row that has not ended; finished rows are kept."""
        self.runs.cancel()

    def future(self, source=None) -> MapResult:
        """A `MapResult` that waits for these rows when a final value is read."""
        return MapResult(self.result().rows, self.elapsed(), source, run=self, schema=self.schema)

    def result(self) -> MapResult:
        """The rows so far (a row still running shows its text so far)."""
        rows = []
        for i, (prompt, job) in enumerate(zip(self.prompts, self.jobs)):
            fin = job.finished
            if fin is None:
                rows.append(MapRow(i, prompt, job.text, "running"))
            else:
                asked = job.request.logprobs is not None
                records = job.result(raise_on_error=False).records if asked else []
                rows.append(
                    MapRow(i, prompt, fin.text, fin.finish_reason, fin.error, fin.stats, records)
                )
        return MapResult(rows, self.elapsed(), schema=self.schema)

    def wait(self, timeout: float | None = None) -> MapResult:
        """Block until every row ended (Ctrl-C stops them all and re-raises)."""
        self.runs.wait(timeout)
        return self.result()


def map(  # noqa: A001
    data,
    template: str | None = None,
    *,
    model: str = "default",
    backend=None,
    wait: bool = True,
    **fields,
) -> MapResult:
    """Generate for every row, batched, and block for the results in input order.

    Args:
        data: Prompts (a list, Series or iterable of strings or chat message lists);
            or, with ``template``, a DataFrame, list or Series to fill it from.
        template: ``"Summarize: {text}"``: ``{column}`` from each DataFrame row, or
            ``{item}`` from each element. `to_frame` then keeps a DataFrame's columns.
        model: Model spec, or an ``http(s)://…/v1`` server.
        backend: Where to run; routed from ``model`` by default.
        wait: False: return at once with the result as a future (shown in a notebook,
            it is the live table with Stop; reading a final value waits).
        **fields: `Request` fields shared by every row (``max_tokens``, ``stop``, ...).

    Returns:
        The `MapResult`. Rows that fail keep their error; the others are unaffected.

    Raises:
        ValueError: No prompts, a ``{name}`` that is not a column, or an invalid row
            (nothing runs then).
        KeyboardInterrupt: Ctrl-C stops every row, waits for the engine, re-raises.
    """
    source = None
    if template is not None:
        try:
            rows, names = rows_of(data)
        except ValueError as exc:
            raise ValueError(f"data: {exc}") from None
        prompts = fill_rows(template, rows, names)
        source = data if type(data).__name__ == "DataFrame" else None
    else:
        prompts = data
    label = model
    if backend is None:
        from ..engine.backend import backend_for

        route = backend_for(model)
        backend, model, label = route.backend, route.model, route.label
    future = MapRun(backend, prompts, model=model, label=label, **fields).start().future(source)
    return future._settle() if wait else future
