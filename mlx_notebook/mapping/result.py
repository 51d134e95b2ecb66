"""What `map` gives back: one `MapRow` per input row, in a `MapResult` list."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..display import LiveDisplay
from ..engine.events import Stats
from ..frames import to_frame


def aggregate(stats: list[Stats]) -> tuple[int, float] | None:
    """Tokens generated and the seconds of work they took, from rows' own stats.

    The seconds run from the earliest row's start to the latest row's end
    (``ended_at - total_s`` to ``ended_at``), over the rows generated now, or over
    every row when all were replayed: a replayed table then says the figures of
    the run that made it, so its saved view is the same byte for byte.

    Returns:
        ``(tokens, seconds)``, or None when no row has its times (none made a token).
    """
    fresh = [s for s in stats if s.replayed is None]
    rows = fresh or stats
    timed = [s for s in rows if s.ended_at is not None]
    if not timed:
        return None
    start = min(s.ended_at - s.total_s for s in timed)
    end = max(s.ended_at for s in timed)
    return sum(s.generation_tokens for s in rows), end - start


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
class MapResult(LiveDisplay):
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
        run = self.run  # once: a view's refresh thread may settle it meanwhile
        if run is None:
            return MapResult(list(self.rows), self.elapsed_s, self.source, schema=self.schema)
        now = run.result()
        return MapResult(now.rows, now.elapsed_s, self.source, schema=self.schema)

    def cancel(self) -> None:
        """Stop the rows still running (finished rows are kept); nothing once ended."""
        run = self.run  # once: a view's refresh thread may settle it meanwhile
        if run is not None:
            run.cancel()

    @property
    def done(self) -> bool:
        """Whether every row has ended (reading a final value would not wait)."""
        run = self.run  # once: a view's refresh thread may settle it meanwhile
        return run is None or run.done

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
        from ..engine.token_records import TokenTable

        row = self._settle().rows[i]
        if not row.records and row.text:
            raise ValueError("tokens: ask for them with logprobs=K (0..20) or --logprobs K")
        return TokenTable(row.records)

    @property
    def valid(self) -> list[bool]:
        """Per row: whether its structured value is complete and follows the schema."""
        return [c.valid for c in self._checked()]

    @property
    def problems(self) -> list[str | None]:
        """Per row: why it is not `valid`, in one line (None where it is)."""
        return [c.problem for c in self._checked()]

    @property
    def values(self) -> list:
        """Per row: the parsed value (see `value_check.check_value`), None where there is none."""
        return [c.value if c.parsed else None for c in self._checked()]

    def _checked(self) -> list:
        from ..value_check import check_value

        if self.schema is None:
            raise ValueError("values: these rows had no schema (pass schema=...)")
        return [check_value(self.schema, r.text, r.finish_reason) for r in self._settle().rows]

    @property
    def completed(self) -> int:
        """Rows that ran to their end (``"stop"`` or ``"length"``)."""
        return sum(r.finish_reason in ("stop", "length") for r in self._settle().rows)

    @property
    def generated_tokens(self) -> int:
        """Tokens generated over all rows."""
        return sum(r.stats.generation_tokens for r in self._settle().rows)

    def _aggregate(self) -> tuple[int, float]:
        found = aggregate([r.stats for r in self._settle().rows])
        return found if found is not None else (self.generated_tokens, self.elapsed_s)

    @property
    def tps(self) -> float:
        """Aggregate generated tokens per second of the rows' work (prefill included).

        Over the rows generated now (`aggregate`); a table replayed whole says the
        figure of the run that made it.
        """
        tokens, seconds = self._aggregate()
        return tokens / seconds if seconds > 0 else 0.0

    def summary(self) -> str:
        """``6 rows: 6 done · 384 tokens in 5.1 s · 75.3 tok/s aggregate``.

        With replayed rows: ``6 rows: 6 done (4 replayed) · ...``, the tokens,
        time and speed those of the rows generated now.
        """
        counts: dict[str, int] = {}
        for r in self._settle().rows:
            word = {"length": "done", "stop": "done", "cancelled": "stopped"}.get(
                r.finish_reason, r.finish_reason
            )
            counts[word] = counts.get(word, 0) + 1
        states = ", ".join(f"{n} {w}" for w, n in counts.items())
        replayed = sum(r.stats.replayed is not None for r in self.rows)
        if replayed:
            states += f" ({replayed} replayed)"
        tokens, seconds = self._aggregate()
        return (
            f"{len(self.rows)} rows: {states} · {tokens} tokens in "
            f"{seconds:.1f} s · {self.tps:.1f} tok/s aggregate"
        )

    def to_frame(self, sep: str | None = None):
        """A pandas DataFrame, one row per prompt (pandas is optional).

        From a DataFrame, the result is that DataFrame's columns and index with the
        results beside them (a result column whose name is taken gets ``gen_`` in
        front), so ``df.join`` and ``assign`` line up; otherwise the prompt is a column.
        With a schema, the parsed values come first, as typed columns (one per field
        of an object schema, see `frames.typed_columns`; nested objects flattened
        into ``a.b`` columns with ``sep="."``), then ``valid`` and ``problem`` columns.
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
            from ..frames import typed_columns

            checked = self._checked()
            parsed = [c.parsed for c in checked]
            typed = typed_columns(self.schema, [c.value for c in checked], parsed, sep)
            valid, problems = [c.valid for c in checked], [c.problem for c in checked]
            results = {**typed, "valid": valid, "problem": problems, **results}
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
