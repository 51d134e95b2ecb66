"""What a Compare measured: its runs in pairs, their speed ratio, acceptance and verdict.

The speedup is the median of the per-pair ratios with an interval over their
logs (at each look of a sequential comparison a 99% one, about 95% over all
looks; see `sequential`). The verdict is "faster" only when the whole interval
lies above 1, "same" only when it lies inside the equivalence band.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..display import RichDisplay
from ..engine.job import Result
from ..frames import to_frame
from .sequential import Decision, Rule, judge
from .stats import Ratio, counted, ratio

OK = ("stop", "length")
METRICS = ("e2e", "decode")


def speed(r: Result, metric: str) -> float:
    """Tokens per second of ``r`` by ``metric``: end to end or decode."""
    return r.stats.e2e_tps if metric == "e2e" else r.stats.generation_tps


@dataclass
class CompareResult(RichDisplay):
    """Normal and speculative runs side by side, in pairs.

    Attributes:
        runs: ``(pair, role, result)`` for every run that ended, in run order;
            ``role`` is ``"normal"`` or ``"speculative"``.
        repeats: Pairs planned (None: until the answer is clear).
        greedy: Whether sampling was greedy (texts must then be identical).
        metric: ``"e2e"`` (prefill included, the default) or ``"decode"``.
        k: Draft tokens per round (the cap, for adaptive sources).
        margin: Top-2 logit margin at the first differing token, if any.
        fork: Where the runs part: ``(run label, text, probability, rank)`` of
            each run's token there, under the model's distribution, if known.
        rule: When measuring stops (band, budget), and the interval's level.
        decision: Why measuring ended (None while it runs, or for fixed pairs).
    """

    runs: list[tuple[int, str, Result]] = field(default_factory=list)
    repeats: int | None = 3
    greedy: bool = True
    metric: str = "e2e"
    k: int = 0
    margin: float | None = None
    fork: list | None = None
    rule: Rule | None = None
    decision: Decision | None = None

    def __post_init__(self) -> None:
        if self.rule is None:
            self.rule = Rule(fixed=self.repeats) if self.repeats else Rule()

    # -- the runs ------------------------------------------------------------
    def _role(self, role: str) -> list[Result]:
        return [r for _, ro, r in self.runs if ro == role]

    @property
    def normal(self) -> list[Result]:
        """Normal-decoding results, in run order."""
        return self._role("normal")

    @property
    def speculative(self) -> list[Result]:
        """Speculative-decoding results, in run order."""
        return self._role("speculative")

    def pairs(self) -> list[tuple[Result, Result]]:
        """``(normal, speculative)`` for each pair whose two runs both completed."""
        by_pair: dict[int, dict[str, Result]] = {}
        for p, role, r in self.runs:
            if r.finish_reason in OK:
                by_pair.setdefault(p, {})[role] = r
        return [(d["normal"], d["speculative"]) for _, d in sorted(by_pair.items()) if len(d) == 2]

    @property
    def complete(self) -> bool:
        """Measuring ended by its rule (every fixed pair ran, or the answer was clear)."""
        if self.repeats:
            return len(self.pairs()) == self.repeats
        return self.decision is not None

    @property
    def normal_tps(self) -> list[float]:
        """Decode tok/s of each normal run."""
        return [r.stats.generation_tps for r in self.normal if r.finish_reason in OK]

    @property
    def speculative_tps(self) -> list[float]:
        """Decode tok/s of each speculative run."""
        return [r.stats.generation_tps for r in self.speculative if r.finish_reason in OK]

    # -- acceptance ------------------------------------------------------------
    def _sum(self, attr: str) -> int:
        return sum(getattr(r.stats, attr) for r in self.speculative)

    @property
    def proposed(self) -> int:
        """Draft tokens proposed over all speculative runs."""
        return self._sum("draft_tokens_proposed")

    @property
    def accepted(self) -> int:
        """Draft tokens accepted over all speculative runs."""
        return self._sum("draft_tokens_accepted")

    @property
    def drafts_known(self) -> bool:
        """Whether the draft counts were reported (a server may not report them)."""
        return all(r.stats.drafts_known for r in self.speculative)

    @property
    def acceptance(self) -> float:
        """Accepted / proposed draft tokens over all speculative runs (0 if none proposed)."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_accepted(self) -> float:
        """Mean accepted draft tokens per verify round that had drafts."""
        rounds = self._sum("draft_rounds")
        return self.accepted / rounds if rounds else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        """For draft position i+1: rounds that accepted it / rounds that proposed it."""
        width = max([self.k, *(len(r.stats.proposed_by_position) for r in self.speculative)])
        prop, acc = [0] * width, [0] * width
        for r in self.speculative:
            for i, n in enumerate(r.stats.proposed_by_position):
                prop[i] += n
            for i, n in enumerate(r.stats.accepted_by_position):
                acc[i] += n
        return [a / p if p else 0.0 for a, p in zip(acc, prop)]

    # -- speed -------------------------------------------------------------------
    def values(self, metric: str | None = None) -> list[float]:
        """Per-pair speed ratios (speculative / normal) by ``metric``."""
        metric = metric or self.metric
        return [
            speed(s, metric) / speed(n, metric)
            for n, s in self.pairs()
            if speed(n, metric) > 0 and speed(s, metric) > 0
        ]

    def ratio(self, metric: str | None = None) -> Ratio | None:
        """Speculative / normal speed over the completed pairs, or None before the first."""
        values = self.values(metric)
        return ratio(values, self.rule.level) if values else None

    def spread(self) -> float:
        """Run-to-run spread: the larger of the two roles' max / min speed (1.0: none)."""
        worst = 1.0
        for runs in (self.normal, self.speculative):
            xs = [speed(r, self.metric) for r in runs if r.finish_reason in OK]
            xs = [x for x in xs if x > 0]
            if len(xs) >= 2:
                worst = max(worst, max(xs) / min(xs))
        return worst

    @property
    def speedup(self) -> float | None:
        """Median per-pair speedup by `metric`, or None.

        None before a pair completed, and when no draft was accepted: then any
        difference is noise or the cost of rejected drafts.
        """
        r = self.ratio()
        return None if r is None or (self.drafts_known and not self.accepted) else r.median

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        """Interval of the speedup, or None (see `speedup`)."""
        r = self.ratio()
        return None if r is None or (self.drafts_known and not self.accepted) else r.interval

    @property
    def verdict(self) -> str | None:
        """``"faster"``, ``"slower"``, ``"same"`` or ``"undecided"``; None before a pair.

        "same" means inside the equivalence band (``rule.band``); "undecided" that
        the interval straddles 1 and the band (noise, or too few pairs). With no
        draft accepted it is never "faster": it is "same" (nothing was saved) or
        "slower".
        """
        r = self.ratio()
        if r is None:
            return None
        if self.drafts_known and not self.accepted:
            return "slower" if judge(r, self.rule.band) == "slower" else "same"
        return judge(r, self.rule.band) or "undecided"

    # -- text ------------------------------------------------------------------
    def _ids(self) -> list[tuple[str, list]]:
        # Token ids where known; a server's stream gives text only (ids are -1).
        return [
            (f"{role} run {i + 1}", r.token_ids if min(r.token_ids, default=0) >= 0 else r.text)
            for i, (_, role, r) in enumerate(self.runs)
            if r.finish_reason in OK
        ]

    @property
    def identical(self) -> bool | None:
        """Whether every completed run produced the same tokens (None before two did)."""
        ids = self._ids()
        return None if len(ids) < 2 else all(t == ids[0][1] for _, t in ids)

    @property
    def divergence(self) -> tuple[str, int] | None:
        """``(run label, token index)`` of the first run that differs from the first one."""
        ids = self._ids()
        if len(ids) < 2:
            return None
        ref = ids[0][1]
        for label, t in ids[1:]:
            if t != ref:
                at = next((i for i, (a, b) in enumerate(zip(ref, t)) if a != b), None)
                return label, min(len(ref), len(t)) if at is None else at
        return None

    @property
    def diverged_at(self) -> int | None:
        """Token index of the first divergence, if any."""
        d = self.divergence
        return None if d is None else d[1]

    def verdict_line(self) -> str:
        """One line: the verdict with its figure and interval, acceptance, identical text."""
        r, n = self.ratio(), len(self.pairs())
        metric = "end to end" if self.metric == "e2e" else "decode tok/s"
        if r is None:
            head = "no pair has completed yet"
        elif self.drafts_known and not self.accepted:
            head = "no draft token was accepted, so speculative decoding saved nothing here"
            if self.verdict == "slower":
                head += f"; it was slower ({metric}, {counted(n, 'pair')})"
        else:
            head = self._head(r, metric, n)
        parts = [head]
        if self.proposed:
            parts.append(
                f"acceptance {self.acceptance:.0%}, {self.mean_accepted:.2f} tokens per round"
            )
        elif not self.drafts_known:
            parts.append("acceptance not reported by the server")
        same = self.identical
        if same:
            parts.append(f"identical text in all {counted(len(self._ids()), 'run')}")
        elif same is False:
            label, at = self.divergence
            margin = "" if self.margin is None else f", top-2 logit margin there {self.margin:.3g}"
            unit = "token" if min(self.runs[0][2].token_ids, default=0) >= 0 else "character"
            tokens = ""
            if self.fork:
                tokens = (
                    " ("
                    + " vs ".join(f"{text!r} p {prob:.3f}" for _, text, prob, _ in self.fork)
                    + ")"
                )
            parts.append(f"{label} differs at {unit} {at}{tokens}{margin}")
        return " · ".join(parts)

    def _head(self, r: Ratio, metric: str, n: int) -> str:
        ci = f"CI {r.low:.2f}–{r.high:.2f}×, " if r.low is not None else ""
        figure = f"{r.median:.2f}× {metric} ({ci}{counted(n, 'pair')})"
        v, band = self.verdict, self.rule.band
        if v in ("faster", "slower"):
            head = f"{v}: {figure}"
        elif v == "same":
            head = f"no difference beyond ±{band:.0%}: {figure}"
        elif self.decision is not None and self.decision.limit in ("time", "pairs"):
            spent = (
                f"{self.decision.elapsed_s:.0f} s"
                if self.decision.limit == "time"
                else counted(n, "pair")
            )
            head = (
                f"undecided after {spent}: the machine was too noisy (run-to-run spread "
                f"{self.spread():.1f}×); try --metric decode or a longer budget · {figure}"
            )
        else:
            head = f"not clear yet: {figure}"
        other_metric = "decode" if self.metric == "e2e" else "e2e"
        other = self.ratio(other_metric)
        if other is None:
            return head
        name = "decode" if other_metric == "decode" else "end to end"
        said = judge(other, band)
        if v == "undecided" and said is not None:
            word = "no difference" if said == "same" else said
            why = "; end-to-end time varies with TTFT" if other_metric == "decode" else ""
            return (
                f"{head} · {name} alone decides: {word}, {other.median:.2f}× "
                f"(CI {other.low:.2f}–{other.high:.2f}×{why})"
            )
        return f"{head}; {name} {other.median:.2f}×"

    def figures_line(self) -> str:
        """Medians of each side: decode tok/s, end-to-end seconds and TTFT."""
        sides = [("normal", self.normal), ("speculative", self.speculative)]
        bits = []
        for what, get, fmt in (
            ("decode", lambda s: s.generation_tps, "{:.1f} tok/s"),
            ("end to end", lambda s: s.total_s, "{:.2f} s"),
            ("TTFT", lambda s: s.ttft_s, "{:.2f} s"),
        ):
            vals = []
            for name, runs in sides:
                xs = [get(r.stats) for r in runs if r.finish_reason in OK and get(r.stats)]
                if xs:
                    vals.append(f"{name} {fmt.format(statistics.median(xs))}")
            if vals:
                bits.append(f"{what}: " + ", ".join(vals))
        return "medians · " + " · ".join(bits) if bits else ""

    def summary(self) -> str:
        """The verdict line."""
        return self.verdict_line()

    def rows(self) -> list[dict]:
        """One dict per run, for tables and `to_frame`."""
        out = []
        for i, (p, role, r) in enumerate(self.runs):
            s = r.stats
            out.append(
                {
                    "run": i + 1,
                    "pair": p + 1,
                    "role": role,
                    "k": self.k if role == "speculative" else None,
                    "decode_tps": s.generation_tps,
                    "e2e_s": s.total_s,
                    "e2e_tps": s.e2e_tps,
                    "ttft_s": s.ttft_s,
                    "tokens": s.generation_tokens,
                    "proposed": s.draft_tokens_proposed,
                    "accepted": s.draft_tokens_accepted,
                    "finish_reason": r.finish_reason,
                }
            )
        return out

    def to_frame(self):
        """A pandas DataFrame, one row per run (pandas is optional)."""
        return to_frame(self.rows())
