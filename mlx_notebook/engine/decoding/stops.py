"""Stop strings matched on decoded text, across token boundaries.

Text is released only once it cannot be the start of a stop string, so a stop
string never leaks into the stream, even one spread over several tokens.

All stop strings go into one Aho-Corasick automaton, so each character costs
O(1) amortized however many stop strings there are. The automaton's state is
the longest suffix of the text seen that is a prefix of some stop string:
exactly the text to withhold.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class _Automaton:
    """Aho-Corasick over the stop strings: goto, failure and output per state."""

    def __init__(self, words: list[str]) -> None:
        self.goto: list[dict[str, int]] = [{}]
        self.fail: list[int] = [0]
        self.depth: list[int] = [0]
        self.out: list[str | None] = [None]  # the longest stop string ending here
        for w in words:
            s = 0
            for ch in w:
                nxt = self.goto[s].get(ch)
                if nxt is None:
                    nxt = len(self.goto)
                    self.goto.append({})
                    self.fail.append(0)
                    self.depth.append(self.depth[s] + 1)
                    self.out.append(None)
                    self.goto[s][ch] = nxt
                s = nxt
            self.out[s] = w
        queue = deque(self.goto[0].values())
        while queue:
            s = queue.popleft()
            for ch, t in self.goto[s].items():
                queue.append(t)
                f = self.fail[s]
                while f and ch not in self.goto[f]:
                    f = self.fail[f]
                self.fail[t] = self.goto[f].get(ch, 0) if self.goto[f].get(ch) != t else 0
                if self.out[t] is None:
                    self.out[t] = self.out[self.fail[t]]  # a shorter stop ending here

    def step(self, s: int, ch: str) -> int:
        while s and ch not in self.goto[s]:
            s = self.fail[s]
        return self.goto[s].get(ch, 0)


class StopMatcher:
    """Streaming matcher for a set of stop strings.

    Generation stops where the first stop string completes; when several complete
    at the same character, the longest (earliest-starting) one is reported. The
    result does not depend on how the text is split into pieces.

    Args:
        stops: The stop strings. Empty strings are ignored.
    """

    def __init__(self, stops: Iterable[str]) -> None:
        self.stops = sorted({s for s in stops if s}, key=len)
        self._ac = _Automaton(self.stops) if self.stops else None
        self._state = 0
        self._held = ""

    @property
    def held(self) -> str:
        """Text withheld because it may still begin a stop string."""
        return self._held

    def feed(self, text: str) -> tuple[str, str | None]:
        """Add decoded text.

        Args:
            text: The next piece of decoded text.

        Returns:
            ``(releasable_text, matched_stop)``. On a match, the text before the
            match is released and the matcher must not be fed again.
        """
        ac = self._ac
        if ac is None:
            return text, None
        buf = self._held + text
        s = self._state
        base = len(self._held)
        for i, ch in enumerate(text):
            s = ac.step(s, ch)
            hit = ac.out[s]
            if hit is not None:
                end = base + i + 1
                self._held, self._state = "", 0
                return buf[: end - len(hit)], hit
        self._state = s
        keep = ac.depth[s]
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], None

    def flush(self) -> str:
        """Release the withheld text at the end of generation."""
        out, self._held, self._state = self._held, "", 0
        return out
