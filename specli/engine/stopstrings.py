"""Stop strings that may span tokens: hold back text that could still become one."""

from __future__ import annotations

from collections.abc import Sequence


class StopStrings:
    """Feed text deltas; get back what is safe to show and whether a stop string hit."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._pending = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the text

    def push(self, delta: str) -> str:
        if not self.stops or self.stopped:
            return "" if self.stopped else delta
        text = self._pending + delta
        hits = [(i, s) for s in self.stops if (i := text.find(s)) >= 0]
        if hits:
            self.stopped = True
            self._pending = ""
            at, self.matched = min(hits)
            return text[:at]
        hold = self._longest_partial(text)
        self._pending = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold]

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return "" if self.stopped else out

    def _longest_partial(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
        best = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:n]):
                    best = n
                    break
        return best
