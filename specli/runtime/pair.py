"""Can this draft model speculate for this target? (Same rules as llama.cpp's
common_speculative_are_compatible.) Works on any object with `info()` and `token_text()`."""

from __future__ import annotations

from typing import Protocol

from specli.errors import PairError
from specli.types import VocabInfo

MAX_VOCAB_DIFF = 128
FIRST_COMPARED_TOKEN = 5


class VocabLike(Protocol):
    def info(self) -> VocabInfo: ...

    def token_text(self, token: int) -> bytes: ...


def check_pair(target: VocabLike, draft: VocabLike) -> int:
    """Raise PairError saying what differs; return the common vocabulary size."""
    t, d = target.info(), draft.info()
    hint = "pick a draft model of the same family, or use --drafter ngram (no draft model)"
    if t.vocab_type != d.vocab_type:
        raise PairError(f"draft and target tokenizers differ: {d.vocab_type} vs {t.vocab_type}", hint)
    if (t.bos, t.eos, t.add_bos, t.add_eos) != (d.bos, d.eos, d.add_bos, d.add_eos):
        raise PairError(
            "draft and target special tokens differ: "
            f"target BOS={t.bos} EOS={t.eos} add_bos={t.add_bos}, "
            f"draft BOS={d.bos} EOS={d.eos} add_bos={d.add_bos}",
            hint,
        )
    if abs(t.n_vocab - d.n_vocab) > MAX_VOCAB_DIFF:
        raise PairError(
            f"draft and target vocabularies differ in size: {d.n_vocab} vs {t.n_vocab} "
            f"(at most {MAX_VOCAB_DIFF} padded ids allowed)",
            hint,
        )
    n_common = min(t.n_vocab, d.n_vocab)
    for tok in range(FIRST_COMPARED_TOKEN, n_common):
        tt, dt = target.token_text(tok), draft.token_text(tok)
        if tt != dt:
            raise PairError(
                f"draft and target token {tok} differ: {dt!r} vs {tt!r}", hint
            )
    return n_common
