"""Stop strings matched on decoded text, across token boundaries.

Text is released only once it cannot be the start of a stop string, so a stop
string never leaks into the stream, even one spread over several tokens.
"""

from __future__ import annotations

from collections.abc import Iterable


class StopMatcher:
    """Streaming matcher for a set of stop strings.

    Args:
        stops: The stop strings. Empty strings are ignored.
    """

    def __init__(self, stops: Iterable[str]) -> None:
        self.stops = sorted({s for s in stops if s}, key=len)
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
        if not self.stops:
            return text, None
        buf = self._held + text
        hit: tuple[int, str] | None = None
        for s in self.stops:  # shortest first, so ties go to the shorter string
            i = buf.find(s)
            if i >= 0 and (hit is None or i < hit[0]):
                hit = (i, s)
        if hit is not None:
            self._held = ""
            return buf[: hit[0]], hit[1]
        keep = self._partial_len(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], None

    def flush(self) -> str:
        """Release the withheld text at the end of generation."""
        out, self._held = self._held, ""
        return out

    def _partial_len(self, buf: str) -> int:
        # Longest suffix of buf that is a proper prefix of some stop string.
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), best, -1):
                if buf.endswith(s[:k]):
                    best = k
                    break
        return best
