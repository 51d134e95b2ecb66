"""Suffix drafting: model-free speculation from everything already seen this session.

After SuffixDecoding (arXiv 2411.04975): the longest suffix of the recent context
that occurred before, in this job's prompt and output or in earlier prompts and
outputs of the same model, predicts what comes next. The proposal follows the
most frequent continuation; its length adapts to how long the match is and how
sure the continuation is, up to a cap, so there is no k to tune.

The index keeps, for n-grams of a fixed set of lengths, where they ended. Adding
a token costs one update per length: O(new tokens). The session index holds
whole documents (a job's prompt, a job's output) in LRU order and forgets the
oldest when it exceeds its token budget.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .prefill import CancelCheck, Progress

LENGTHS = (32, 24, 16, 12, 8, 6, 4, 3)  # longest first: the search order
KEEP = 16  # occurrences remembered per n-gram (the most recent)


class SuffixIndex:
    """Where each n-gram (of the lengths in `LENGTHS`) ended, across documents.

    Args:
        max_tokens: Tokens kept over all documents; the least recently used
            documents go first. None: unbounded (a job's own index).
    """

    def __init__(self, max_tokens: int | None = None) -> None:
        self.max_tokens = max_tokens
        self.docs: OrderedDict[int, list[int]] = OrderedDict()
        # Keyed by the n-gram's hash: small keys; a collision is caught in `match`.
        self._grams: dict[int, list[tuple[int, int]]] = {}
        self._next_id = 0
        self.tokens = 0

    def __len__(self) -> int:
        return self.tokens

    @property
    def entries(self) -> int:
        """Distinct n-grams indexed (what the index's memory grows with)."""
        return len(self._grams)

    def add(self, tokens: Sequence[int]) -> int:
        """Index a new document; return its id (evicting old ones over the budget)."""
        doc = self._next_id
        self._next_id += 1
        self.docs[doc] = []
        self.extend(doc, tokens)
        return doc

    def extend(self, doc: int, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to document ``doc``, indexing only the new n-grams."""
        seq = self.docs[doc]
        self.docs.move_to_end(doc)
        for t in tokens:
            seq.append(t)
            end = len(seq)
            for n in LENGTHS:
                if n <= end:
                    occ = self._grams.setdefault(hash(tuple(seq[end - n :])), [])
                    occ.append((doc, end))
                    if len(occ) > KEEP:
                        del occ[0]
        self.tokens += len(tokens)
        self._evict(keep=doc)

    def touch(self, doc: int) -> None:
        """Mark ``doc`` as recently used."""
        if doc in self.docs:
            self.docs.move_to_end(doc)

    def remove(self, doc: int) -> None:
        """Forget document ``doc`` (O(its tokens))."""
        seq = self.docs.pop(doc, None)
        if seq is None:
            return
        self.tokens -= len(seq)
        for end in range(1, len(seq) + 1):
            for n in LENGTHS:
                if n <= end:
                    key = hash(tuple(seq[end - n : end]))
                    occ = self._grams.get(key)
                    if occ is None:
                        continue
                    occ[:] = [o for o in occ if o[0] != doc]
                    if not occ:
                        del self._grams[key]

    def _evict(self, keep: int) -> None:
        if self.max_tokens is None:
            return
        while self.tokens > self.max_tokens and len(self.docs) > 1:
            oldest = next(iter(self.docs))
            if oldest == keep:
                break
            self.remove(oldest)

    def match(self, context: Sequence[int], exclude: tuple[int, int] | None = None):
        """The longest suffix of ``context`` seen before, with its occurrences.

        Args:
            context: The tokens so far.
            exclude: ``(doc, end)`` of the context itself, when it is indexed.

        Returns:
            ``(length, [(doc, end), ...])`` for occurrences that have a following
            token, or ``(0, [])``.
        """
        for n in LENGTHS:
            if n > len(context):
                continue
            gram = list(context[len(context) - n :])
            occ = self._grams.get(hash(tuple(gram)))
            if not occ:
                continue
            live = [
                (d, e)
                for d, e in occ
                if (d, e) != exclude
                and e < len(self.docs.get(d, ()))
                and self.docs[d][e - n : e] == gram  # not a hash collision
            ]
            if live:
                return n, live
        return 0, []

    def continuation(self, occurrences, limit: int, min_prob: float) -> tuple[list[int], float]:
        """The most frequent path after the occurrences, while it stays likely enough.

        Returns:
            ``(tokens, probability)``: the path and its empirical probability.
        """
        path: list[int] = []
        prob = 1.0
        live = list(occurrences)
        while live and len(path) < limit:
            counts: dict[int, int] = {}
            for d, e in live:
                seq = self.docs[d]
                t = seq[e + len(path)] if e + len(path) < len(seq) else None
                if t is not None:
                    counts[t] = counts.get(t, 0) + 1
            if not counts:
                break
            tok, c = max(counts.items(), key=lambda kv: kv[1])
            p = prob * c / sum(counts.values())
            if p < min_prob:
                break
            prob = p
            path.append(tok)
            live = [
                (d, e) for d, e in live if e + len(path) - 1 < len(self.docs[d])
                and self.docs[d][e + len(path) - 1] == tok
            ]  # fmt: skip
        return path, prob


@dataclass
class SuffixOptions:
    """How suffix drafts are sized.

    Attributes:
        min_match: Shortest suffix match worth a draft (shorter ones guess too often).
        factor: Draft tokens per matched token (a long match earns a long draft;
            2 measured better than 1 on copied lists, code and prose here).
        min_prob: Stop the path where its empirical probability falls below this.
    """

    min_match: int = 3
    factor: float = 2.0
    min_prob: float = 0.1


class SuffixDraft:
    """A `DraftSource` proposing from this job's text and the session's earlier jobs.

    Args:
        session: The model's index of earlier prompts and outputs (shared, bounded).
        options: Draft sizing.
    """

    needs_prefill = False
    label = "suffix"

    def __init__(self, session: SuffixIndex | None, options: SuffixOptions | None = None):
        self.session = session
        self.options = options or SuffixOptions()
        self.local = SuffixIndex()
        self._doc = self.local.add([])
        self.proposed_from = {"job": 0, "session": 0}

    def prefill(self, prompt: Sequence[int], check: CancelCheck, progress: Progress) -> None:
        """Nothing to compute: the job's index grows as the history does."""

    def propose(self, history: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` tokens following the longest earlier match of the history's suffix."""
        seen = self.local.docs[self._doc]
        if seen and (len(history) < len(seen) or history[len(seen) - 1] != seen[-1]):
            self.local.remove(self._doc)  # not a continuation of what we indexed: start over
            self._doc = self.local.add([])
            seen = self.local.docs[self._doc]
        if len(history) > len(seen):
            self.local.extend(self._doc, history[len(seen) :])
        if k <= 0:
            return []
        o = self.options
        best, where = ([], 0.0), None
        for name, index, exclude in (
            ("job", self.local, (self._doc, len(history))),
            ("session", self.session, None),
        ):
            if index is None or not len(index):
                continue
            n, occ = index.match(history, exclude)
            if n < o.min_match:
                continue
            limit = min(k, max(1, int(n * o.factor)))
            path, prob = index.continuation(occ, limit, o.min_prob)
            if len(path) * prob > len(best[0]) * best[1]:  # expected accepted tokens
                best, where = (path, prob), name
        if where is not None:
            self.proposed_from[where] += 1
        return best[0]
