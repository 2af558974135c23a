"""The expert-parallel target's routing plan: how many tokens each rank sends to each expert.

Pure arithmetic (no torch): the tokens of every rank are routed by the same seeded plan, so each
rank knows, before anything runs, what every rank will send and receive. The run itself exchanges
the counts and then the tokens with real all-to-alls, and checks that the counts it received are
the plan's (:mod:`memaudit.te.targets.ep_model`).

A rank routes its ``T`` tokens to ``k`` distinct experts each (top-k), so ``T * k`` token copies go
to ``E = G * EP`` experts. How many each expert gets is the skew:

* ``uniform``: the same for every expert;
* ``zipf[:S]``: in proportion to ``1 / r**S`` for the expert of popularity rank ``r`` (1, 2, ...;
  S = 1 by default);
* ``hot[:P]``: one expert is chosen by a fraction P of the tokens (P = 1 by default: every token),
  the others share the rest evenly.

Popularity order is a seeded permutation of the experts (so the hot expert is not always on rank
0). No expert gets more than ``T`` copies (a token picks an expert once): what would exceed it is
shared among the others (water-filling). Counts are multiples of the recipe's alignment, as
Megatron pads each expert's tokens for quantized recipes, found by largest remainder (ties to the
lower expert) in exact rational arithmetic, so the plan is the same on every machine. Every rank
sends the same counts; ranks differ in which of their tokens go where.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

from memaudit.errors import UsageError

SKEWS = ("uniform", "zipf", "hot")
DEFAULT_PARAM = {"zipf": Fraction(1), "hot": Fraction(1)}


def parse_routing(text: str, *, key: str = "--routing") -> tuple[str, Fraction | None]:
    """``uniform`` | ``zipf[:S]`` (S > 0) | ``hot[:P]`` (0 < P <= 1) -> (skew, parameter)."""
    name, colon, value = str(text).partition(":")
    if name not in SKEWS:
        raise UsageError(f"unknown routing {text!r}; use uniform, zipf[:S] or hot[:P]", key=key)
    if name == "uniform":
        if colon:
            raise UsageError(f"uniform routing takes no parameter, got {text!r}", key=key)
        return name, None
    if not colon:
        return name, DEFAULT_PARAM[name]
    try:
        param = Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise UsageError(f"expected a number after {name}:, got {value!r}", key=key) from None
    if name == "zipf" and not 0 < param <= 8:
        raise UsageError(f"a Zipf exponent is above 0 and at most 8, got {value}", key=key)
    if name == "hot" and not 0 < param <= 1:
        raise UsageError(f"the hot expert's share of tokens is above 0 and at most 1, got {value}", key=key)
    return name, param


def routing_name(skew: str, param: Fraction | None) -> str:
    """The canonical spelling (``zipf:1.2``), as case ids record it."""
    if param is None:
        return skew
    return f"{skew}:{_decimal(param)}"


def _decimal(x: Fraction) -> str:
    if x.denominator == 1:
        return str(x.numerator)
    return format(float(x), ".12g")


def _weight(r: int, s: Fraction) -> Fraction:
    """1 / r**s, exact for integer s, else rounded to 12 significant digits (the same on every machine)."""
    if s.denominator == 1:
        return Fraction(1, r**s.numerator)
    return Fraction(format(r ** -float(s), ".12g"))


def _fill(weights: list[Fraction], total: int, cap: int) -> list[int]:
    """Integers, each at most ``cap``, summing to ``total``, in proportion to ``weights``: experts
    whose share would pass the cap get the cap, the rest share what is left (repeated until none
    passes it); then floors, plus one for the largest remainders (ties to the lower index)."""
    n = len(weights)
    assert 0 <= total <= n * cap, (total, n, cap)
    fixed: dict[int, Fraction] = {}
    while True:
        free = [i for i in range(n) if i not in fixed]
        left = total - sum(fixed.values())
        wsum = sum((weights[i] for i in free), Fraction(0))
        over = [i for i in free if wsum and left * weights[i] / wsum > cap]
        if not over:
            break
        for i in over:
            fixed[i] = Fraction(cap)
    share = [fixed.get(i, (left * weights[i] / wsum) if wsum else Fraction(0)) for i in range(n)]
    out = [int(s) for s in share]  # floors (shares are >= 0)
    rest = total - sum(out)
    for i in sorted(range(n), key=lambda i: (-(share[i] - out[i]), i))[:rest]:
        out[i] += 1
    return out


@dataclass(frozen=True)
class RoutingPlan:
    """Tokens per expert for one expert-parallel group: ``ep`` ranks of ``local`` experts each,
    ``tokens`` per rank routed to ``topk`` experts, counts in multiples of ``align``."""

    ep: int
    local: int
    tokens: int
    topk: int
    align: int
    skew: str
    param: Fraction | None
    seed: int

    @property
    def experts(self) -> int:
        return self.ep * self.local

    def check(self) -> None:
        """UsageError for a plan that cannot be routed (named by the flag that would fix it)."""
        if self.topk < 1:
            raise UsageError(f"must be >= 1, got {self.topk}", key="--topk")
        if self.topk > self.experts:
            raise UsageError(
                f"top-{self.topk} routing needs at least {self.topk} experts; {self.ep} rank(s) x "
                f"{self.local} local expert(s) are {self.experts}",
                key="--topk",
            )
        if self.tokens % self.align:
            raise UsageError(
                f"{self.tokens} tokens per rank: each expert's tokens are a multiple of the recipe's "
                f"alignment {self.align}, so the tokens are too; use a multiple of {self.align}",
                key="--tokens",
            )

    def popularity(self) -> list[int]:
        """The experts from most to least popular (a seeded permutation)."""
        order = list(range(self.experts))
        random.Random(self.seed).shuffle(order)
        return order

    def counts(self) -> list[int]:
        """Tokens each rank sends to each expert (index = global expert id); they sum to tokens x topk."""
        self.check()
        units, cap = self.tokens * self.topk // self.align, self.tokens // self.align
        n = self.experts
        order = self.popularity()
        if self.skew == "uniform":
            by_rank = [Fraction(1)] * n
            per = _fill(by_rank, units, cap)
        elif self.skew == "zipf":
            assert self.param is not None
            per = _fill([_weight(r + 1, self.param) for r in range(n)], units, cap)
        else:  # hot: one expert gets P of the tokens, the others share the rest evenly
            assert self.param is not None
            hot = min(cap, int(self.param * cap + Fraction(1, 2)), units)
            hot = max(hot, units - (n - 1) * cap)  # what the others cannot take (each at most T), the hot one does
            per = [hot, *_fill([Fraction(1)] * (n - 1), units - hot, cap)]
        out = [0] * n
        for r, e in enumerate(order):
            out[e] = per[r] * self.align
        return out

    def send_splits(self) -> list[int]:
        """Tokens a rank sends to each expert-parallel peer (the peers' experts are contiguous)."""
        c = self.counts()
        return [sum(c[p * self.local : (p + 1) * self.local]) for p in range(self.ep)]

    def recv_splits(self, ep_rank: int) -> list[int]:
        """Tokens expert-parallel rank ``ep_rank`` receives from each peer (every peer sends the same counts)."""
        return [self.send_splits()[ep_rank]] * self.ep

    def local_splits(self, ep_rank: int) -> list[int]:
        """Tokens each local expert of ``ep_rank`` runs: what every peer sent it, added up."""
        c = self.counts()
        return [self.ep * c[ep_rank * self.local + g] for g in range(self.local)]
