"""The prefill phase: reuse what the target's KV cache already holds of the prompt,
decode the rest but its last token (the first step decodes that one alone)."""

from __future__ import annotations

from collections.abc import Sequence

from specli.errors import ContextError, UsageError
from specli.types import Drafter, LanguageModel


def common_prefix_len(cached: Sequence[int], tokens: Sequence[int]) -> int:
    """Number of leading tokens two sequences share."""
    n = min(len(cached), len(tokens))
    i = 0
    while i < n and cached[i] == tokens[i]:
        i += 1
    return i


def check_prompt(prompt: Sequence[int], n_ctx: int) -> None:
    """Refuse an empty prompt, or one the context cannot hold with a token to spare."""
    if not prompt:
        raise UsageError("the prompt is empty", "give some text to continue")
    if len(prompt) >= n_ctx:
        over = len(prompt) - n_ctx + 1
        raise ContextError(
            f"the prompt is {len(prompt)} tokens, {over} more than the {n_ctx}-token context allows",
            "shorten the prompt or raise --ctx",
        )


def prefill(target: LanguageModel, prompt: Sequence[int], drafter: Drafter | None, history: list[int]) -> int:
    """Decode all of `prompt` but its last token on top of the longest prefix the cache
    holds; returns how many tokens were reused. The drafter begins its generation here,
    from `history` (the prompt, the list the generation grows).
    The last prompt token is decoded alone by the caller, so its logits (and the first
    token) do not depend on how much was cached: large batches take other kernels."""
    n_reuse = min(common_prefix_len(target.tokens, prompt), len(prompt) - 1)
    target.rollback(n_reuse)
    if drafter is not None:
        drafter.begin(history)
    target.decode(prompt[n_reuse:-1])
    return n_reuse
