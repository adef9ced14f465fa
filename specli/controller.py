"""Cost-aware choice of drafter and draft length (pure decisions, online estimates).

Expected speed of one step that drafts k tokens with conditional acceptance
a_1..a_k (a_i = P(token i accepted | tokens < i accepted)):

    E[tokens] = 1 + a_1 + a_1 a_2 + ... + a_1...a_k      (the target always adds one)
    cost      = draft_cost(k) + verify_cost(k)           (verify_cost(0) = a plain step)
    speed     = E[tokens] / cost

The controller picks, each step, the (drafter, k) with the highest expected speed;
k = 0 is plain decoding, so speculation turns itself off where it does not pay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


def expected_tokens(acceptance: Sequence[float], k: int) -> float:
    """1 + sum_{i<=k} prod_{j<=i} a_j; positions past the known ones reuse the last rate."""
    total, run = 1.0, 1.0
    for i in range(k):
        a = acceptance[i] if i < len(acceptance) else (acceptance[-1] if acceptance else 0.0)
        run *= a
        total += run
    return total


def best_k(
    verify_cost: Sequence[float],
    draft_cost: Sequence[float],
    acceptance: Sequence[float],
    k_max: int,
) -> tuple[int, float]:
    """The k in 0..k_max maximising expected tokens per second, and that speed.
    verify_cost[k]: seconds to verify a batch of k + 1 tokens (k = 0: a plain step);
    draft_cost[k]: seconds to draft k tokens (draft_cost[0] = 0)."""
    k_max = min(k_max, len(verify_cost) - 1, len(draft_cost) - 1)
    best = (0, 1.0 / verify_cost[0] if verify_cost[0] > 0 else 0.0)
    for k in range(1, k_max + 1):
        cost = verify_cost[k] + draft_cost[k]
        if cost <= 0:
            continue
        speed = expected_tokens(acceptance, k) / cost
        if speed > best[1] * (1 + 1e-9):
            best = (k, speed)
    return best


class Ema:
    """Exponential moving average with a prior weight (so early samples move it)."""

    def __init__(self, value: float, alpha: float = 0.1) -> None:
        self.value, self.alpha = value, alpha

    def add(self, x: float) -> None:
        self.value += self.alpha * (x - self.value)


@dataclass
class AcceptanceStats:
    """Per-position conditional acceptance, decayed so it follows the text."""

    prior: float = 0.6
    prior_weight: float = 2.0
    decay: float = 0.97
    accepted: list[float] = field(default_factory=list)
    drafted: list[float] = field(default_factory=list)

    def update(self, n_drafted: int, n_accepted: int) -> None:
        grow = n_drafted - len(self.drafted)
        if grow > 0:
            self.drafted += [0.0] * grow
            self.accepted += [0.0] * grow
        for i in range(len(self.drafted)):
            self.drafted[i] *= self.decay
            self.accepted[i] *= self.decay
        # position i was tried when all before it were accepted
        for i in range(min(n_drafted, n_accepted + 1)):
            self.drafted[i] += 1.0
            if i < n_accepted:
                self.accepted[i] += 1.0

    def rates(self, k: int) -> list[float]:
        out: list[float] = []
        for i in range(k):
            d = self.drafted[i] if i < len(self.drafted) else 0.0
            a = self.accepted[i] if i < len(self.accepted) else 0.0
            prior = out[-1] if out else self.prior
            out.append((a + prior * self.prior_weight) / (d + self.prior_weight))
        return out


@dataclass
class Costs:
    """Seconds per operation on this machine, refined online.
    verify[k]: target batch of k + 1 tokens; draft_step: one draft-model token."""

    verify: list[Ema]
    draft_step: Ema
    ngram_step: Ema = field(default_factory=lambda: Ema(2e-5))

    @classmethod
    def from_measured(cls, verify: Sequence[float], draft_step: float) -> Costs:
        return cls([Ema(v) for v in verify], Ema(draft_step))

    def verify_costs(self) -> list[float]:
        return [e.value for e in self.verify]

    def observe_verify(self, k: int, seconds: float) -> None:
        if k < len(self.verify):
            self.verify[k].add(seconds)

    def draft_costs(self, kind: str, k_max: int, pending: int = 1) -> list[float]:
        """Cost of drafting k tokens: the draft model decodes `pending` catch-up
        tokens in one batch for the first, then one token each."""
        if kind == "ngram":
            return [0.0] + [self.ngram_step.value] * k_max
        step = self.draft_step.value
        # the first token needs the tokens the draft cache lacks, decoded in one batch;
        # assume the draft's batches scale like the target's
        v = self.verify
        batch_ratio = v[min(pending, len(v)) - 1].value / v[0].value if v[0].value > 0 else 1.0
        catch_up = step * max(1.0, batch_ratio)
        return [0.0] + [catch_up + step * (k - 1) for k in range(1, k_max + 1)]


@dataclass(frozen=True)
class Choice:
    drafter: str  # "none" | "ngram" | "draft"
    k: int
    speed: float  # expected tokens/s


def choose(
    costs: Costs,
    acceptance: dict[str, AcceptanceStats],
    available: dict[str, int],
    pending: int = 1,
) -> Choice:
    """Best (drafter, k) among `available` (name -> most tokens it can offer now)."""
    verify = costs.verify_costs()
    best = Choice("none", 0, 1.0 / verify[0] if verify[0] > 0 else 0.0)
    for name, k_avail in available.items():
        if k_avail <= 0:
            continue
        k_max = min(k_avail, len(verify) - 1)
        k, speed = best_k(verify, costs.draft_costs(name, k_max, pending), acceptance[name].rates(k_max), k_max)
        if k > 0 and speed > best.speed:
            best = Choice(name, k, speed)
    return best
