"""Budgets of a model backend: turns per round, tokens and cost per run, wall clock per
round and per run. Checked before every model call; the first one exceeded ends the run
with its own reason code.

Tokens and cost come from the usage the provider reports. An unknown price is never
counted as 0: the cost is reported as unknown (and a cost budget with an unknown price is
refused before the run starts); a provider that reports no usage while a token or cost
budget is set ends the run, because that budget can no longer be honoured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from code_runner.agents.base import BudgetKind
from code_runner.agents.model.transcript import Usage
from code_runner.config import BudgetConfig

Clock = Callable[[], float]


@dataclass(frozen=True)
class Exceeded:
    kind: BudgetKind
    message: str

    def to_record(self) -> dict[str, Any]:
        return {"budget": self.kind.value, "message": self.message}


class Budget:
    """Counts one run's model usage against its limits."""

    def __init__(
        self,
        limits: BudgetConfig,
        *,
        price_in_per_mtok: float | None,
        price_out_per_mtok: float | None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.limits = limits
        self.price_in = price_in_per_mtok
        self.price_out = price_out_per_mtok
        self.clock = clock
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.calls = 0
        self.unreported_calls = 0  # answers that came without usage
        self.run_started: float | None = None
        self.round_started = 0.0

    @property
    def price_known(self) -> bool:
        return self.price_in is not None and self.price_out is not None

    @property
    def cost_usd(self) -> float | None:
        if self.price_in is None or self.price_out is None or self.unreported_calls:
            return None
        return (self.prompt_tokens * self.price_in + self.completion_tokens * self.price_out) / 1e6

    def start_round(self) -> None:
        now = self.clock()
        if self.run_started is None:
            self.run_started = now
        self.round_started = now

    def add(self, usage: Usage | None) -> None:
        self.calls += 1
        if usage is None:
            self.unreported_calls += 1
            return
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens

    def deadline(self) -> float | None:
        """The monotonic time the current call must end by (the nearer wall-clock limit)."""
        ends = []
        if self.limits.round_wall_clock_s is not None:
            ends.append(self.round_started + self.limits.round_wall_clock_s)
        if self.limits.run_wall_clock_s is not None and self.run_started is not None:
            ends.append(self.run_started + self.limits.run_wall_clock_s)
        return min(ends) if ends else None

    def check(self, turns_this_round: int) -> Exceeded | None:
        """The budget that forbids another model call, if any."""
        limits, now = self.limits, self.clock()
        clocks = (
            ("run", limits.run_wall_clock_s, self.run_started),
            ("round", limits.round_wall_clock_s, self.round_started),
        )
        for whose, limit_s, started in clocks:
            if limit_s is not None and started is not None and now - started >= limit_s:
                return Exceeded(
                    BudgetKind.WALL_CLOCK,
                    f"the {whose}'s wall-clock budget of {limit_s:g} s is spent "
                    f"({now - started:.1f} s)",
                )
        if self.unreported_calls and (limits.tokens_per_run or limits.cost_per_run_usd):
            which = BudgetKind.TOKENS if limits.tokens_per_run else BudgetKind.COST
            return Exceeded(
                which,
                f"the provider reported no token usage for {self.unreported_calls} call(s), so "
                f"the {which.value} budget cannot be enforced; stopping rather than guessing",
            )
        total = self.prompt_tokens + self.completion_tokens
        if limits.tokens_per_run is not None and total >= limits.tokens_per_run:
            return Exceeded(
                BudgetKind.TOKENS,
                f"the run's token budget of {limits.tokens_per_run} is spent ({total} tokens)",
            )
        cost = self.cost_usd
        if limits.cost_per_run_usd is not None:
            if cost is None:
                return Exceeded(
                    BudgetKind.COST,
                    "the cost is unknown (no price configured), so the cost "
                    "budget cannot be enforced",
                )
            if cost >= limits.cost_per_run_usd:
                return Exceeded(
                    BudgetKind.COST,
                    f"the run's cost budget of ${limits.cost_per_run_usd:g} is spent (${cost:.4f})",
                )
        if turns_this_round >= limits.turns_per_round:
            return Exceeded(
                BudgetKind.TURNS,
                f"the round used its {limits.turns_per_round} model turns",
            )
        return None

    def summary(self) -> dict[str, Any]:
        """Usage so far, as recorded in round details and the transcript."""
        cost = self.cost_usd
        return {
            "model_calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "usage_reported": self.unreported_calls == 0,
            "price_known": self.price_known,
            "cost_usd": None if cost is None else round(cost, 6),
        }


__all__ = ["Budget", "Exceeded"]
