"""`ending()`: how a run ends is decided in one place, from what the round loop saw."""

from __future__ import annotations

import pytest

from code_runner.agents.base import AgentOutcome, AgentStop, BudgetKind
from code_runner.record import Reason, ResultStatus
from code_runner.runner.rounds import Ending, Progress, RoundResult, ending


def _round(stop: AgentStop = AgentStop.DONE, **kw: object) -> RoundResult:
    budget = kw.pop("budget", None)
    agent = AgentOutcome(stop, error="agent said why", budget=budget)  # type: ignore[arg-type]
    return RoundResult(1, agent, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seen", "expected"),
    [
        (
            Progress(base_passed=True),
            Ending(ResultStatus.ALREADY_SATISFIED, Reason.ALREADY_SATISFIED),
        ),
        (Progress(), None),  # round 0 failed, rounds are left: go on
        (Progress(last=_round()), None),
        (Progress(last=_round(passed=True)), Ending(ResultStatus.PASSED, Reason.DOD_PASSED)),
        (
            Progress(last=_round(passed=True, violations=("workspace HEAD changed",))),
            Ending(ResultStatus.FAILED, Reason.SAFETY_VIOLATION, "workspace HEAD changed"),
        ),
        (
            Progress(last=_round(AgentStop.BUDGET, budget=BudgetKind.TOKENS)),
            Ending(ResultStatus.FAILED, Reason.BUDGET_TOKENS, "agent said why"),
        ),
        (
            Progress(last=_round(AgentStop.BUDGET)),
            Ending(ResultStatus.FAILED, Reason.BUDGET_EXHAUSTED, "agent said why"),
        ),
        (
            Progress(last=_round(AgentStop.ERROR)),
            Ending(ResultStatus.FAILED, Reason.AGENT_ERROR, "agent said why"),
        ),
        (
            Progress(last=_round(AgentStop.BLOCKED)),
            Ending(ResultStatus.FAILED, Reason.BLOCKED_NEEDS_DECISION, "agent said why"),
        ),
        (
            Progress(last=_round(AgentStop.TIMEOUT)),
            Ending(ResultStatus.FAILED, Reason.AGENT_TIMEOUT, "agent said why"),
        ),
        (
            Progress(last=_round(), out_of_time=True, timeout_s=30),
            Ending(ResultStatus.FAILED, Reason.RUN_TIMEOUT, "the run exceeded its timeout of 30 s"),
        ),
        # an agent stopped by the run's deadline, or a DoD cut by it: the run timed out
        (
            Progress(last=_round(AgentStop.TIMEOUT), out_of_time=True, timeout_s=5),
            Ending(ResultStatus.FAILED, Reason.RUN_TIMEOUT, "the run exceeded its timeout of 5 s"),
        ),
        (
            Progress(last=_round(changed=True), out_of_time=True, rounds_left=False, timeout_s=5),
            Ending(ResultStatus.FAILED, Reason.RUN_TIMEOUT, "the run exceeded its timeout of 5 s"),
        ),
        (
            Progress(last=_round(), rounds_left=False),
            Ending(ResultStatus.FAILED, Reason.NO_ALLOWED_CHANGES),
        ),
        (
            Progress(last=_round(), rounds_left=False, changed=True),
            Ending(ResultStatus.FAILED, Reason.DOD_FAILED),
        ),
        (
            Progress(last=_round(), rounds_left=False, best_round=1, changed=True),
            Ending(ResultStatus.FAILED, Reason.DOD_FAILED),
        ),
        # a passing last round wins over the deadline and the end of the rounds
        (
            Progress(last=_round(passed=True), out_of_time=True, rounds_left=False),
            Ending(ResultStatus.PASSED, Reason.DOD_PASSED),
        ),
    ],
)
def test_the_ending_follows_from_what_the_loop_saw(seen: Progress, expected: Ending | None) -> None:
    assert ending(seen) == expected


def test_only_a_pass_is_passed() -> None:
    assert Ending(ResultStatus.ALREADY_SATISFIED, Reason.ALREADY_SATISFIED).passed
    assert not Ending(ResultStatus.FAILED, Reason.DOD_FAILED).passed
