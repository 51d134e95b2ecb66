"""An evaluation's outcome: cells as data (long and wide), a summary with verdicts.

`EvalResult.to_frame` is one row per cell (row, model, prompt, epoch, text, score,
tokens, tok/s, ...); `table` is one row per data row with a text and a score
column per model/prompt; `summary` gives each column's mean score with its 95%
interval and speed, and every pair of columns compared row by row.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from ..display import RichDisplay
from ..frames import to_frame
from ..mapping.result import aggregate
from .plan import Cell, Plan
from .verdicts import Mean, Paired, mean_interval, paired


@dataclass(frozen=True)
class ColumnSummary:
    """One column's figures.

    Attributes:
        label: The column's name.
        model: Its model.
        variant: Its prompt variant.
        score: Mean score over rows, with its interval.
        acc_norm: For `choice`: the length-normalized accuracy (else None).
        cells: Cells that ended; ``failed``: those in error; ``stopped``: stopped or skipped.
        tokens: Tokens generated.
        tps: Tokens per second of its generation (prefill included).
    """

    label: str
    model: str
    variant: str
    score: Mean
    acc_norm: Mean | None
    cells: int
    failed: int
    stopped: int
    tokens: int
    tps: float


@dataclass(frozen=True)
class Summary:
    """Per column figures and the paired comparisons of every two columns."""

    columns: list[ColumnSummary]
    pairs: list[Paired]
    scorer: str | None

    def __str__(self) -> str:
        lines = []
        for c in self.columns:
            norm = f" · acc_norm {c.acc_norm}" if c.acc_norm is not None else ""
            bad = f" · {c.failed} failed" if c.failed else ""
            bad += f" · {c.stopped} stopped" if c.stopped else ""
            lines.append(
                f"{c.label}: {self.scorer or 'score'} {c.score}{norm} · {c.tokens} tokens, "
                f"{c.tps:.1f} tok/s{bad}"
            )
        lines += [str(p) for p in self.pairs]
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def to_frame(self):
        """One row per column: mean, interval, n, tokens, tok/s (a DataFrame)."""
        return to_frame(
            [
                {
                    "column": c.label,
                    "model": c.model,
                    "prompt": c.variant,
                    "score": c.score.mean,
                    "low": c.score.low,
                    "high": c.score.high,
                    "n": c.score.n,
                    "acc_norm": c.acc_norm.mean if c.acc_norm else None,
                    "tokens": c.tokens,
                    "tok/s": c.tps,
                    "failed": c.failed,
                    "stopped": c.stopped,
                }  # fmt: skip
                for c in self.columns
            ]
        )


class EvalResult(RichDisplay):
    """Every cell of an evaluation, in plan order (column, epoch, row).

    Args:
        plan: The plan it ran.
        cells: The cells (running ones show their text so far).
        elapsed_s: Seconds from start to end.
        error: Why it ended early, if it did.
    """

    def __init__(self, plan: Plan, cells: list[Cell], elapsed_s: float, error: str | None):
        self.plan = plan
        self.cells = cells
        self.elapsed_s = elapsed_s
        self.error = error

    def __len__(self) -> int:
        return len(self.cells)

    def __repr__(self) -> str:
        p = self.plan
        return (
            f"<EvalResult: {len(p.rows)} rows × {len(p.columns)} columns × {p.epochs} "
            f"epochs, {sum(c.ended for c in self.cells)} cells ended>"
        )

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self) + "\n" + str(self.summary()))

    # -- scores per row -------------------------------------------------------------------
    def row_scores(self, column: int, key: str | None = None) -> dict[int, float]:
        """``{row: mean score over its epochs}`` for one column (rows with a score).

        Args:
            column: The column's index.
            key: An extra value to average instead of the score (``"acc_norm"``).
        """
        got: dict[int, list[float]] = {}
        for c in self.cells:
            v = c.score if key is None else c.extra.get(key)
            if c.column == column and isinstance(v, (int, float)):
                got.setdefault(c.row, []).append(float(v))
        return {r: sum(vs) / len(vs) for r, vs in got.items()}

    def summary(self) -> Summary:
        """Each column's mean score [95% interval] and speed; every pair compared."""
        cols = []
        per = [self.row_scores(i) for i in range(len(self.plan.columns))]
        choice = self.plan.scorer is not None and self.plan.scorer.kind == "choice"
        for i, col in enumerate(self.plan.columns):
            mine = [c for c in self.cells if c.column == i]
            stats = [c.stats for c in mine if c.stats is not None]
            found = aggregate(stats) if stats else None
            tokens = found[0] if found else 0
            tps = found[0] / found[1] if found and found[1] > 0 else 0.0
            cols.append(
                ColumnSummary(
                    col.label,
                    col.model,
                    col.variant,
                    mean_interval(list(per[i].values())),
                    mean_interval(list(self.row_scores(i, "acc_norm").values()))
                    if choice
                    else None,
                    sum(c.ended for c in mine),
                    sum(c.finish_reason == "error" for c in mine),
                    sum(c.finish_reason in ("cancelled", "skipped") for c in mine),
                    tokens,
                    tps,
                )  # fmt: skip
            )
        labels = [c.label for c in self.plan.columns]
        pairs = [
            paired(labels[a], per[a], labels[b], per[b])
            for a, b in combinations(range(len(labels)), 2)
        ]
        return Summary(cols, pairs, self.plan.scorer.name if self.plan.scorer else None)

    # -- as data ------------------------------------------------------------------------
    def records(self) -> list[dict]:
        """One dict per cell: its row's columns, then model, prompt, epoch, text, score..."""
        out = []
        for c in self.cells:
            col = self.plan.columns[c.column]
            st = c.stats
            rec = {
                "row": c.row, "model": col.model, "prompt": col.variant, "epoch": c.epoch,
                "text": c.live_text, "score": c.score, **c.extra,
                "finish": c.finish_reason, "error": c.error,
                "tokens": st.generation_tokens if st else None,
                "tok/s": st.generation_tps if st else None,
                "replayed": st.replayed is not None if st else None,
            }  # fmt: skip
            out.append(rec)
        return out

    def to_frame(self):
        """Long: one row per cell (needs pandas)."""
        return to_frame(self.records())

    def table(self):
        """Wide: one row per data row; per column its text and mean score (needs pandas)."""
        rows = [{"row": i} for i in range(len(self.plan.rows))]
        for i, col in enumerate(self.plan.columns):
            scores = self.row_scores(i)
            first = {c.row: c.live_text for c in self.cells if c.column == i and c.epoch == 0}
            for r, row in enumerate(rows):
                row[f"{col.label}: text"] = first.get(r, "")
                row[f"{col.label}: score"] = scores.get(r)
        return to_frame(rows)

    def disagreements(self, n: int = 10) -> list[dict]:
        """The rows whose columns' scores differ most: row, spread, and each column's text.

        Args:
            n: How many rows (the widest spreads first).
        """
        per = [self.row_scores(i) for i in range(len(self.plan.columns))]
        texts = {(c.column, c.row): c.live_text for c in self.cells if c.epoch == 0}
        found = []
        for r in range(len(self.plan.rows)):
            vals = [p[r] for p in per if r in p]
            if len(vals) < 2 or max(vals) == min(vals):
                continue
            rec = {"row": r, "spread": max(vals) - min(vals)}
            for i, col in enumerate(self.plan.columns):
                rec[col.label] = per[i].get(r)
                rec[f"{col.label}: text"] = texts.get((i, r), "")
            found.append(rec)
        found.sort(key=lambda d: (-d["spread"], d["row"]))
        return found[:n]
