"""``map``: one prompt template over many rows, generated together in the engine's batch.

Every row is its own job, so rows keep their own stop strings, budgets, events
and stats; the local engine decodes them together (continuous batching, see
`engine.batch`), and a server backend queues them. Results come back in input
order. No IPython here: ``%%generate --over`` is a view over the same `MapRun`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .engine.events import Finished, Stats
from .engine.job import Job
from .engine.request import Request
from .measure.frame import to_frame
from .measure.runs import RunSet


@dataclass
class MapRow:
    """One row's outcome.

    Attributes:
        index: Position in the input.
        prompt: The prompt (a string or chat messages).
        text: The generated text ("" for a row that never ran).
        finish_reason: ``"stop"``, ``"length"``, ``"cancelled"`` or ``"error"``.
        error: One-line error text, for ``"error"``.
        stats: Its timing and size figures.
        records: Its per-token records, when the rows asked for ``logprobs``.
    """

    index: int
    prompt: Any
    text: str
    finish_reason: str
    error: str | None = None
    stats: Stats = field(default_factory=Stats)
    records: list = field(default_factory=list, repr=False)


@dataclass
class MapResult:
    """Every row of a `map`, in input order: a future while the rows still run.

    Reading a final value (`texts`, `to_frame`, `summary`, ``len``, iteration,
    indexing, the totals) waits until every row has ended, so a notebook run
    top to bottom (Run All) gets finished rows; Ctrl-C or ■ while waiting stops
    the rows that are left and keeps what they wrote. `snapshot` is the rows as
    they stand, without waiting.

    Attributes:
        rows: One `MapRow` per prompt (as they stand: use `snapshot` or a final value).
        elapsed_s: Seconds from submitting the first row to the end of the last.
        source: The DataFrame the rows came from, if any: `to_frame` keeps its
            columns and index.
        schema: The rows' `mlx_notebook.schema.Schema`, if they had one: then
            `values` parses them and `to_frame` has typed columns.
    """

    rows: list[MapRow]
    elapsed_s: float = 0.0
    source: Any = field(default=None, repr=False)
    run: Any = field(default=None, repr=False, compare=False)  # a `MapRun` still going
    schema: Any = field(default=None, repr=False, compare=False)

    def _settle(self) -> MapResult:
        """Wait for the rows still running; take their final state."""
        run = self.run
        if run is not None:
            run.wait()
            final = run.result()
            self.rows[:] = final.rows
            self.elapsed_s = final.elapsed_s
            self.run = None
        return self

    def snapshot(self) -> MapResult:
        """The rows as they stand now (a row still running has ``"running"``), no waiting."""
        if self.run is None:
            return MapResult(list(self.rows), self.elapsed_s, self.source, schema=self.schema)
        now = self.run.result()
        return MapResult(now.rows, now.elapsed_s, self.source, schema=self.schema)

    @property
    def done(self) -> bool:
        """Whether every row has ended (reading a final value would not wait)."""
        return self.run is None or self.run.done

    def __len__(self) -> int:
        return len(self._settle().rows)

    def __iter__(self) -> Iterator[MapRow]:
        return iter(self._settle().rows)

    def __getitem__(self, i: int) -> MapRow:
        return self._settle().rows[i]

    @property
    def texts(self) -> list[str]:
        """Each row's text, in input order."""
        return [r.text for r in self._settle().rows]

    def tokens(self, i: int):
        """Row ``i``'s per-token records, a `TokenTable` (rows run with ``logprobs``).

        Raises:
            ValueError: The rows did not ask for ``logprobs``.
        """
        from .engine.token_records import TokenTable

        row = self._settle().rows[i]
        if not row.records and row.text:
            raise ValueError("tokens: ask for them with logprobs=K (0..20) or --logprobs K")
        return TokenTable(row.records)

    @property
    def valid(self) -> list[bool]:
        """Per row: whether it finished its structured value (``stop``) and it parses."""
        return [ok for ok, _ in self._parsed()]

    @property
    def values(self) -> list:
        """Per row: the parsed value (see `schema.value_of`), None where not `valid`."""
        return [v for _, v in self._parsed()]

    def _parsed(self) -> list[tuple[bool, Any]]:
        from .schema import value_of

        if self.schema is None:
            raise ValueError("values: these rows had no schema (pass schema=...)")
        out = []
        for r in self._settle().rows:
            try:
                out.append((True, value_of(self.schema, r.text, r.finish_reason)))
            except ValueError:
                out.append((False, None))
        return out

    @property
    def completed(self) -> int:
        """Rows that ran to their end (``"stop"`` or ``"length"``)."""
        return sum(r.finish_reason in ("stop", "length") for r in self._settle().rows)

    @property
    def generated_tokens(self) -> int:
        """Tokens generated over all rows."""
        return sum(r.stats.generation_tokens for r in self._settle().rows)

    @property
    def tps(self) -> float:
        """Aggregate generated tokens per second of wall time (prefill included)."""
        return self.generated_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> str:
        """``6 rows: 6 done · 384 tokens in 5.1 s · 75.3 tok/s aggregate``."""
        counts: dict[str, int] = {}
        for r in self._settle().rows:
            word = {"length": "done", "stop": "done", "cancelled": "stopped"}.get(
                r.finish_reason, r.finish_reason
            )
            counts[word] = counts.get(word, 0) + 1
        states = ", ".join(f"{n} {w}" for w, n in counts.items())
        return (
            f"{len(self.rows)} rows: {states} · {self.generated_tokens} tokens in "
            f"{self.elapsed_s:.1f} s · {self.tps:.1f} tok/s aggregate"
        )

    def to_frame(self, sep: str | None = None):
        """A pandas DataFrame, one row per prompt (pandas is optional).

        From a DataFrame, the result is that DataFrame's columns and index with the
        results beside them (a result column whose name is taken gets ``gen_`` in
        front), so ``df.join`` and ``assign`` line up; otherwise the prompt is a column.
        With a schema, the parsed values come first, as typed columns (one per field
        of an object schema, see `schema.typed_columns`; nested objects flattened
        into ``a.b`` columns with ``sep="."``), then a ``valid`` column.
        """
        rows = self._settle().rows
        results = {
            "text": [r.text for r in rows],
            "finish_reason": [r.finish_reason for r in rows],
            "error": [r.error for r in rows],
            "generation_tokens": [r.stats.generation_tokens for r in rows],
            "ttft_s": [r.stats.ttft_s for r in rows],
            "generation_tps": [r.stats.generation_tps for r in rows],
            "batch_rows": [r.stats.batch_rows for r in rows],
        }
        if self.schema is not None:
            from .schema import typed_columns

            parsed = self._parsed()
            valid = [ok for ok, _ in parsed]
            typed = typed_columns(self.schema, [v for _, v in parsed], valid, sep)
            results = {**typed, "valid": valid, **results}
        src = self.source
        if src is None or type(src).__name__ != "DataFrame":
            out = to_frame([{"prompt": r.prompt} for r in rows])
            taken = {"prompt"}
        else:
            out = src.copy()
            taken = {str(c) for c in src.columns}
        for name, column in results.items():
            if hasattr(column, "dtype"):  # a typed Series: keep its dtype, take the index
                column = column.set_axis(out.index)
            out["gen_" + name if name in taken else name] = column
        return out


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
    from .template import fill

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

    def __init__(self, backend, prompts: Sequence, **fields) -> None:
        self.prompts = as_prompts(prompts)
        self.schema = None
        if fields.get("schema") is not None:  # normalized once, shared by every row
            from .schema import Schema

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
    data, template: str | None = None, *, model: str = "default", backend=None, **fields
) -> MapResult:
    """Generate for every row, batched, and block for the results in input order.

    Args:
        data: Prompts (a list, Series or iterable of strings or chat message lists);
            or, with ``template``, a DataFrame, list or Series to fill it from.
        template: ``"Summarize: {text}"``: ``{column}`` from each DataFrame row, or
            ``{item}`` from each element. `to_frame` then keeps a DataFrame's columns.
        model: Model spec, or an ``http(s)://…/v1`` server.
        backend: Where to run; routed from ``model`` by default.
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
    if backend is None:
        from .engine.backend import backend_for

        route = backend_for(model)
        backend, model = route.backend, route.model
    return MapRun(backend, prompts, model=model, **fields).start().future(source)._settle()
