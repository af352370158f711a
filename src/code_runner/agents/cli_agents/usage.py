"""The token usage and cost an agent CLI reports, summed over a run's rounds.

What each CLI prints (the pinned versions, Codex 0.171 and Claude Code 2.1.197):

- Codex `exec --json`: `turn.completed` carries `usage` with `input_tokens` (cached ones
  included), `cached_input_tokens`, `output_tokens` (reasoning included) and
  `reasoning_output_tokens`. No cost, and no count of model calls.
- Claude Code `--output-format stream-json` / `json`: the final `result` carries `usage`
  (`input_tokens` without the cache, `cache_creation_input_tokens`,
  `cache_read_input_tokens`, `output_tokens`), `num_turns` (its model calls) and
  `total_cost_usd` (Claude Code's own figure at its list prices).

The run's usage has the shape of a model backend's (`record.RunUsage`): what a CLI does not
report stays unknown (`None`), never 0, and a round whose CLI never printed its usage (it was
killed, or timed out) makes the run's tokens a lower bound and its cost unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReportedUsage:
    """One report of a CLI: tokens in and out, and what else it said (None: not said)."""

    prompt_tokens: int
    completion_tokens: int
    model_calls: int | None = None
    cost_usd: float | None = None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _sum(first: float | None, second: float | None) -> float | None:
    return None if first is None or second is None else first + second


def _count(usage: Mapping[str, Any], *keys: str) -> int | None:
    values = [found for key in keys if (found := _int(usage.get(key))) is not None]
    return sum(max(v, 0) for v in values) if values else None


def codex_usage(usage: object) -> ReportedUsage | None:
    """`turn.completed`'s usage; None when it carries no token counts."""
    if not isinstance(usage, Mapping):
        return None
    prompt, completion = _count(usage, "input_tokens"), _count(usage, "output_tokens")
    if prompt is None and completion is None:
        return None
    return ReportedUsage(prompt or 0, completion or 0)


def claude_usage(result: Mapping[str, Any]) -> ReportedUsage | None:
    """The `result` event's usage, turns and cost; None when it carries no token counts."""
    usage = result.get("usage")
    if not isinstance(usage, Mapping):
        return None
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    prompt, completion = _count(usage, *keys), _count(usage, "output_tokens")
    if prompt is None and completion is None:
        return None
    turns = result.get("num_turns")
    cost = result.get("total_cost_usd")
    return ReportedUsage(
        prompt or 0,
        completion or 0,
        model_calls=turns if isinstance(turns, int) and not isinstance(turns, bool) else None,
        cost_usd=float(cost)
        if isinstance(cost, int | float) and not isinstance(cost, bool)
        else None,
    )


def add(first: ReportedUsage | None, second: ReportedUsage | None) -> ReportedUsage | None:
    """Two reports of one round (a CLI that printed more than one), summed."""
    if first is None or second is None:
        return first or second
    calls = (
        None
        if first.model_calls is None or second.model_calls is None
        else first.model_calls + second.model_calls
    )
    cost = (
        None
        if first.cost_usd is None or second.cost_usd is None
        else first.cost_usd + second.cost_usd
    )
    return ReportedUsage(
        first.prompt_tokens + second.prompt_tokens,
        first.completion_tokens + second.completion_tokens,
        calls,
        cost,
    )


class RunTally:
    """A run's usage so far, one round at a time, as `record.RunUsage` reads it."""

    def __init__(self, reported_by: str) -> None:
        self.reported_by = reported_by
        self.total: ReportedUsage | None = None
        self.rounds_reported = 0
        self.rounds_unreported = 0

    def add_round(self, found: ReportedUsage | None) -> None:
        if found is None:
            self.rounds_unreported += 1
            return
        self.rounds_reported += 1
        if self.total is None:
            self.total = found
        else:
            self.total = add(self.total, found)

    def summary(self) -> dict[str, Any]:
        """The run's usage so far (`RunUsage`'s fields); empty when no round reported any."""
        total = self.total
        if total is None:
            return {}
        complete = self.rounds_unreported == 0
        cost = total.cost_usd if complete else None
        return {
            "model_calls": total.model_calls if complete else None,
            "prompt_tokens": total.prompt_tokens,
            "completion_tokens": total.completion_tokens,
            "total_tokens": total.prompt_tokens + total.completion_tokens,
            "usage_reported": complete,
            "price_known": total.cost_usd is not None,
            "cost_usd": None if cost is None else round(cost, 6),
            "reported_by": self.reported_by,
        }


__all__ = ["ReportedUsage", "RunTally", "add", "claude_usage", "codex_usage"]
