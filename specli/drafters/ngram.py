"""Prompt-lookup drafting: continue the longest recent n-gram match in the history.

The index maps each n-gram (n_min..n_max) to where its most recent earlier
occurrence continues, and whether every earlier occurrence went on with the same token;
it is updated incrementally as tokens arrive, never rebuilt.
Drafts carry no probabilities (a one-hot q), so both verifications stay lossless.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specli.types import Draft, Drafter


class NgramIndex:
    def __init__(self, n_min: int = 2, n_max: int = 4) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got {n_min}, {n_max}")
        self.n_min, self.n_max = n_min, n_max
        self._maps: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(n_min, n_max + 1)}
        self._mixed: set[tuple[int, ...]] = set()  # n-grams seen going on in different ways
        self._n_indexed = 0  # n-grams ending before this position are in the maps

    def reset(self) -> None:
        for m in self._maps.values():
            m.clear()
        self._mixed.clear()
        self._n_indexed = 0

    def update(self, history: Sequence[int]) -> None:
        """Index every n-gram that ends before the last token (it has a continuation)."""
        end = len(history) - 1
        for j in range(self._n_indexed, end):
            nxt = history[j + 1]
            for n, m in self._maps.items():
                if j + 1 >= n:
                    gram = tuple(history[j + 1 - n : j + 1])
                    old = m.get(gram)
                    if old is not None and history[old] != nxt:
                        self._mixed.add(gram)
                    m[gram] = j + 1
        self._n_indexed = max(self._n_indexed, end)

    def lookup(self, history: Sequence[int]) -> tuple[int, int, bool]:
        """(start of the continuation, n of the match, whether every earlier occurrence
        went on alike) for the longest n-gram suffix of `history` seen before;
        (-1, 0, True) when none."""
        for n in range(self.n_max, self.n_min - 1, -1):
            if len(history) < n:
                continue
            gram = tuple(history[len(history) - n :])
            pos = self._maps[n].get(gram)
            if pos is not None:
                return pos, n, gram not in self._mixed
        return -1, 0, True


PREDICTION = "prediction"  # the source of drafts taken from a request's predicted output


class NgramDrafter(Drafter):
    """`reference`: text the output is expected to repeat (OpenAI's predicted output),
    looked up before the history, so a match in the prompt or output still wins; drafts
    from it are marked with the source PREDICTION."""

    name = "ngram"

    def __init__(self, n_min: int = 2, n_max: int = 4, is_eog: Callable[[int], bool] | None = None,
                 reference: Sequence[int] = ()) -> None:
        self.index = NgramIndex(n_min, n_max)
        self.is_eog = is_eog or (lambda t: False)
        self.last_match_n = 0
        self.last_agreed = True  # every earlier occurrence of the last match went on alike
        self.reference = list(reference)
        self._seq: list[int] = []  # reference + history, where there is a reference

    def begin(self, history: Sequence[int]) -> None:
        # history may have been rewritten (a new chat turn): rebuild from scratch
        self.index.reset()
        self._seq = [*self.reference, *history] if self.reference else []
        self.index.update(self._text(history))

    def _text(self, history: Sequence[int]) -> Sequence[int]:
        if not self.reference:
            return history
        n_ref, seq = len(self.reference), self._seq
        if len(seq) - n_ref > len(history):
            del seq[n_ref:]
        seq.extend(history[len(seq) - n_ref :])
        return seq

    def propose(self, history: Sequence[int], k: int) -> Draft:
        text = self._text(history)
        self.index.update(text)
        pos, n, agreed = self.index.lookup(text)
        self.last_match_n, self.last_agreed = n, agreed
        if pos < 0 or k <= 0:
            return Draft(source=self.name)
        predicted = pos < len(self.reference)
        end = min(pos + k, len(self.reference)) if predicted else pos + k
        tokens: list[int] = []
        for t in text[pos:end]:
            tokens.append(t)
            if self.is_eog(t):
                break
        return Draft(tokens, None, PREDICTION if predicted else self.name)

