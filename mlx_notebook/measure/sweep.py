"""Sweep: speculative decoding at several k, each repeated, against interleaved normal runs.

The k values run in rounds, in a shuffled order in every round, with a normal
run after every two speculative ones. Each speculative run is compared with the
normal runs on either side of it, so slow drift of the machine cancels out.
"Best k" is the k with the highest median speedup among those whose interval
lies above normal decoding (above 1): the figure the view shows beside each k,
and the one its chart draws. From the second round on, a k whose interval lies
wholly below another k's is clearly worse and is dropped, so the rounds get
shorter.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace

from ..display import LiveDisplay, RichDisplay
from ..engine.job import Result
from ..engine.request import Request
from ..frames import to_frame
from .compare_result import METRICS, OK, speed
from .runs import PacedRuns, measured_request, timed_spec
from .stats import Ratio, geomean, ratio, spread

GROUP = 2  # speculative runs between two normal runs


def round_order(ks: list[int], rng: random.Random, first: bool) -> list[int | None]:
    """One round: the k values shuffled, a normal run (None) after every `GROUP`.

    The round ends with a normal run, which the next round's first runs lean on;
    the first round also starts with one.
    """
    block = list(ks)
    rng.shuffle(block)
    order: list[int | None] = [None] if first else []
    for i, k in enumerate(block):
        order.append(k)
        if (i + 1) % GROUP == 0:
            order.append(None)
    if order[-1] is not None:
        order.append(None)
    return order


def schedule(ks: list[int], repeats: int, seed: int | None = None) -> list[int | None]:
    """The whole run order when no k is dropped: `round_order` ``repeats`` times."""
    rng = random.Random(seed)
    order: list[int | None] = []
    for r in range(repeats):
        order += round_order(ks, rng, r == 0)
    return order


@dataclass
class SweepResult(RichDisplay):
    """Runs of a sweep.

    Attributes:
        runs: ``(k or None, result or None)`` per planned run, in run order
            (None for normal decoding; None result while unfinished).
        ks: The k values swept.
        metric: ``"e2e"`` or ``"decode"``.
        dropped: k -> the round after which it was dropped as clearly worse.
    """

    runs: list[tuple[int | None, Result | None]] = field(default_factory=list)
    ks: list[int] = field(default_factory=list)
    metric: str = "e2e"
    dropped: dict[int, int] = field(default_factory=dict)

    def _ok(self, r: Result | None) -> bool:
        return r is not None and r.finish_reason in OK and speed(r, self.metric) > 0

    @property
    def baseline(self) -> list[float]:
        """The normal runs' speeds (by `metric`)."""
        return [speed(r, self.metric) for k, r in self.runs if k is None and self._ok(r)]

    def _ratios(self, k: int) -> list[float]:
        out = []
        for i, (kk, r) in enumerate(self.runs):
            if kk != k or not self._ok(r):
                continue
            near = [self._neighbour(i, -1), self._neighbour(i, 1)]
            near = [n for n in near if n is not None]
            if near:
                out.append(speed(r, self.metric) / geomean(near))
        return out

    def _neighbour(self, i: int, step: int) -> float | None:
        j = i + step
        while 0 <= j < len(self.runs):
            k, r = self.runs[j]
            if k is None:
                return speed(r, self.metric) if self._ok(r) else None
            j += step
        return None

    def speedup(self, k: int) -> Ratio | None:
        """Speed at ``k`` over the bracketing normal runs, or None before a run finished."""
        values = self._ratios(k)
        return ratio(values) if values else None

    def _spec(self, k: int) -> list[Result]:
        return [r for kk, r in self.runs if kk == k and self._ok(r)]

    @property
    def rows(self) -> list[dict]:
        """One dict per k: speed, speedup with its interval, acceptance by position.

        ``clears`` says whether the k's interval lies above normal decoding (its
        ``low`` above 1) with drafts accepted, or not reported (a server's): the
        k values `best_k` chooses among.
        """
        out = []
        for k in self.ks:
            runs = self._spec(k)
            sp = self.speedup(k)
            prop = sum(r.stats.draft_tokens_proposed for r in runs)
            acc = sum(r.stats.draft_tokens_accepted for r in runs)
            known = all(r.stats.drafts_known for r in runs)
            speeds = [speed(r, self.metric) for r in runs]
            med, lo, hi = spread(speeds) if speeds else (None, None, None)
            clears = sp is not None and sp.low is not None and sp.low > 1 and (acc or not known)
            out.append(
                {
                    "k": k,
                    "runs": len(runs),
                    "tps": med,
                    "tps_min": lo,
                    "tps_max": hi,
                    "speedup": None if sp is None else sp.median,
                    "low": None if sp is None else sp.low,
                    "high": None if sp is None else sp.high,
                    "clears": bool(clears),
                    "acceptance": acc / prop if prop else 0.0,
                    "accepted": acc,
                    "by_position": _by_position(runs, k),
                }
            )
        return out

    def clearly_worse(self) -> list[int]:
        """The k values whose interval lies wholly below another k's interval.

        A k is clearly worse when its upper end is under the highest lower end
        among the k values; the k `best_k` names is never dropped.
        """
        rows = self.rows
        rated = [r for r in rows if r["low"] is not None]
        if len(rated) < 2:
            return []
        floor, best = max(r["low"] for r in rated), _best(rows)
        return [r["k"] for r in rated if r["high"] < floor and r["k"] != best]

    def estimate_s(self, planned: int | None = None) -> float | None:
        """Seconds the runs not yet finished will take, from the mean of those so far.

        Args:
            planned: Runs planned in all (default: those in `runs`).
        """
        done = [r.stats.total_s for _, r in self.runs if r is not None and r.stats.total_s > 0]
        finished = sum(1 for _, r in self.runs if r is not None)
        left = (len(self.runs) if planned is None else planned) - finished
        return None if not done else max(0, left) * sum(done) / len(done)

    @property
    def best_k(self) -> int | None:
        """The k with the highest median speedup among those whose interval clears 1, or None.

        The median speedup is the figure shown beside each k; a k whose interval
        reaches down to 1 is not beyond noise, however high its median.
        """
        return _best(self.rows)

    def verdict_line(self) -> str:
        """One line naming the best k, or saying that none is beyond noise."""
        rows = self.rows
        best = _best(rows)
        metric = "end to end" if self.metric == "e2e" else "decode tok/s"
        if best is None:
            return (
                "best k: none beyond noise (no k beat normal decoding here: "
                "no interval lay above 1)" + self._dropped()
            )
        r = next(r for r in rows if r["k"] == best)
        higher = [
            o for o in rows if o["speedup"] is not None and o["speedup"] > r["speedup"]
        ]  # medians above the best's whose intervals reach down to normal decoding
        noisy = "; higher medians within noise: " + ", ".join(
            f"k = {o['k']} at {o['speedup']:.2f}×" for o in higher
        )
        return (
            f"best k = {best}: {r['speedup']:.2f}× {metric} "
            f"(95% CI {r['low']:.2f}–{r['high']:.2f}×, acceptance {r['acceptance']:.0%})"
            + (noisy if higher else "")
            + self._dropped()
        )

    def _dropped(self) -> str:
        if not self.dropped:
            return ""
        ks = ", ".join(str(k) for k in sorted(self.dropped))
        return f"; dropped early as clearly worse: k = {ks}"

    def run_rows(self) -> list[dict]:
        """One dict per finished run."""
        return [
            {
                "run": i + 1,
                "k": k,
                "role": "normal" if k is None else "speculative",
                "decode_tps": r.stats.generation_tps,
                "e2e_s": r.stats.total_s,
                "e2e_tps": r.stats.e2e_tps,
                "ttft_s": r.stats.ttft_s,
                "tokens": r.stats.generation_tokens,
                "proposed": r.stats.draft_tokens_proposed,
                "accepted": r.stats.draft_tokens_accepted,
                "finish_reason": r.finish_reason,
            }
            for i, (k, r) in enumerate(self.runs)
            if r is not None
        ]

    def to_frame(self, per: str = "k"):
        """A pandas DataFrame: one row per k (``per="k"``) or per run (``per="run"``)."""
        return to_frame(self.rows if per == "k" else self.run_rows())


def _best(rows: list[dict]) -> int | None:
    """The k of the row with the highest median speedup among those that clear 1."""
    good = [r for r in rows if r["clears"]]
    return max(good, key=lambda r: r["speedup"])["k"] if good else None


def _by_position(runs: list[Result], k: int) -> list[float]:
    prop, acc = [0] * k, [0] * k
    for r in runs:
        for i, n in enumerate(r.stats.proposed_by_position[:k]):
            prop[i] += n
        for i, n in enumerate(r.stats.accepted_by_position[:k]):
            acc[i] += n
    return [a / p if p else 0.0 for a, p in zip(acc, prop)]


class Sweep(LiveDisplay):
    """A running sweep: its jobs, and the result so far.

    Shown in a notebook while it runs (``sweep(..., wait=False)``), it is the live
    view with Stop; once ended, its lines and chart.

    Rounds are submitted one at a time; after each round from the second on,
    the k values that are clearly worse than the best so far are dropped.

    Args:
        backend: Where to run.
        request: A speculative request; ``num_draft_tokens`` is what varies.
        ks: The k values (the cap, for adaptive draft sources).
        repeats: Rounds, i.e. runs per k that is not dropped. Default: 3.
        metric: ``"e2e"`` or ``"decode"``.
        seed: Seed of the shuffle (None: a new order each time).
        drop: Drop clearly worse k values early. Default True.
    """

    def __init__(
        self,
        backend,
        request: Request,
        ks=range(1, 9),
        repeats: int = 3,
        metric: str = "e2e",
        seed: int | None = None,
        drop: bool = True,
    ) -> None:
        ks = sorted(set(ks))
        if request.mode == "normal":
            raise ValueError("draft: Sweep needs a draft source ('lookup', 'suffix' or a model)")
        if not ks or any(not isinstance(k, int) or not 1 <= k <= 16 for k in ks):
            raise ValueError(f"ks: must be integers in 1..16 (got {ks!r})")
        if not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats: must be a positive integer (got {repeats!r})")
        if metric not in METRICS:
            raise ValueError(f"metric: must be one of {', '.join(METRICS)} (got {metric!r})")
        self.request, self.ks, self.metric = request, ks, metric
        self.repeats, self.drop = repeats, drop
        self._rng = random.Random(seed)
        base = timed_spec(request)
        self._normal = replace(base, draft=None, draft_kind="none")
        self._base = base
        self.order: list[int | None] = []
        self.rounds = 0
        self.dropped: dict[int, int] = {}
        self.runs = PacedRuns(backend, self._round(), self._next_round)
        self.started: float | None = None

    def _round(self) -> list[Request]:
        live = [k for k in self.ks if k not in self.dropped]
        order = round_order(live, self._rng, self.rounds == 0)
        self.rounds += 1
        self.order += order
        return [
            self._normal if k is None else replace(self._base, num_draft_tokens=k) for k in order
        ]

    def _next_round(self) -> list[Request] | None:
        if self.rounds >= self.repeats:
            return None
        if self.drop and self.rounds >= 2:
            for k in self.result().clearly_worse():
                self.dropped.setdefault(k, self.rounds)
        return self._round()

    def planned(self) -> int:
        """Runs planned: those submitted, plus the later rounds of the k values left."""
        live = len([k for k in self.ks if k not in self.dropped])
        per_round = live + (live + GROUP - 1) // GROUP
        return len(self.order) + max(0, self.repeats - self.rounds) * per_round

    @property
    def jobs(self):
        """The submitted jobs, in run order (later rounds are added as they start)."""
        return self.runs.jobs

    def start(self) -> Sweep:
        """Check and submit the first round; the others follow."""
        self.started = time.monotonic()
        self.runs.start()
        return self

    def result(self) -> SweepResult:
        """The sweep so far."""
        runs = list(zip(self.order, self.runs.results()))
        runs += [(k, None) for k in self.order[len(runs) :]]
        return SweepResult(runs, self.ks, self.metric, dict(self.dropped))

    @property
    def done(self) -> bool:
        """Whether every run has ended and no more will start."""
        return self.runs.done

    def cancel(self) -> None:
        """Stop every run and start no more; what finished is kept."""
        self.runs.cancel()

    def wait(self, timeout: float | None = None) -> SweepResult:
        """Block until every run ended (Ctrl-C stops them); return the result."""
        self.runs.wait(timeout)
        return self.result()


def sweep(
    prompt,
    *,
    ks=range(1, 9),
    repeats: int = 3,
    model: str = "default",
    draft: str | None = None,
    metric: str = "e2e",
    seed: int | None = None,
    backend=None,
    wait: bool = True,
    **fields,
) -> SweepResult | Sweep:
    """Sweep the draft length k against normal decoding, blocking (Ctrl-C stops it).

    Args:
        prompt: A string or chat messages.
        ks: The k values.
        repeats: Rounds: runs per k, unless a k is dropped early as clearly worse.
        model: Main model spec.
        draft: ``"lookup"`` (the default unless ``draft_kind`` is given),
            ``"suffix"`` or a draft model spec.
        metric: ``"e2e"`` (prefill included) or ``"decode"``.
        seed: Seed of the run order's shuffle.
        backend: Where to run; the process-wide engine by default.
        wait: False: return the running `Sweep` at once (shown in a notebook, it is
            the live view with Stop; ``.wait()`` gives the result).
        **fields: Other `Request` fields.
    """
    backend, req = measured_request(prompt, model, draft, backend, **fields)
    run = Sweep(backend, req, ks, repeats, metric, seed).start()
    return run.wait() if wait else run
