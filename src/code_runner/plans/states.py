"""The plan and attempt state machines: states as Enums, transitions in one table each, and
the one settlement mapping that chooses how an attempt ends.

An attempt is `pending` (admitted, preparing), then `running` (its agent started), then one
of four terminal states. What ends it is decided here and nowhere else: the first stop
reason recorded wins over anything the run reports afterwards, and an attempt whose
context stopped being current ends `stale` (it is never retried; a new attempt is).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from code_runner.errors import IllegalTransition


class AttemptState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STALE = "stale"

    @property
    def active(self) -> bool:
        return self in {AttemptState.PENDING, AttemptState.RUNNING}


_ENDINGS = frozenset({AttemptState.FAILED, AttemptState.CANCELLED, AttemptState.STALE})

ATTEMPT_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    AttemptState.PENDING: frozenset({AttemptState.RUNNING, *_ENDINGS}),
    AttemptState.RUNNING: frozenset({AttemptState.COMPLETED, *_ENDINGS}),
    AttemptState.COMPLETED: frozenset(),
    AttemptState.FAILED: frozenset(),
    AttemptState.CANCELLED: frozenset(),
    AttemptState.STALE: frozenset(),
}


class FirstReason(StrEnum):
    """Why an attempt was asked to stop; the first one recorded is never replaced."""

    CANCELLED = "cancelled"  # plan stop / plan cancel
    SHUTDOWN = "shutdown"  # a signal to the plan process
    STALE = "stale"  # the context changed under it
    TIME_LIMIT = "time-limit"  # the plan budget ran out


class RunEnd(StrEnum):
    """How the item's run itself ended, before stop reasons are taken into account."""

    OK = "ok"  # passed or unchanged, with its commit (if any) built
    TIMEOUT = "timeout"  # run_timeout, agent_timeout, budget_wall_clock
    CAPTURE_FAILURE = "capture-failure"  # workspace_error, internal_error, no final event
    FAILED = "failed"  # anything else (DoD failed, agent error, refused commit, crash)


class PlanStatus(StrEnum):
    READY = "ready"
    RUNNING = "running"
    PAUSED = "paused"
    NEEDS_AMENDMENT = "needs_amendment"
    NEEDS_APPROVAL = "needs_approval"
    NEEDS_HUMAN = "needs_human"
    DONE = "done"
    CANCELLED = "cancelled"

    @property
    def gate(self) -> bool:
        return self in GATES


GATES = frozenset({PlanStatus.NEEDS_AMENDMENT, PlanStatus.NEEDS_APPROVAL, PlanStatus.NEEDS_HUMAN})
_STOPS = frozenset({PlanStatus.PAUSED, PlanStatus.DONE, PlanStatus.CANCELLED, *GATES})

PLAN_TRANSITIONS: dict[PlanStatus, frozenset[PlanStatus]] = {
    PlanStatus.READY: frozenset({PlanStatus.RUNNING, PlanStatus.CANCELLED, PlanStatus.NEEDS_HUMAN}),
    PlanStatus.PAUSED: frozenset(
        {PlanStatus.RUNNING, PlanStatus.READY, PlanStatus.CANCELLED, PlanStatus.NEEDS_HUMAN, *GATES}
    ),
    PlanStatus.RUNNING: frozenset({PlanStatus.RUNNING, *_STOPS}),
    PlanStatus.NEEDS_AMENDMENT: frozenset(
        {PlanStatus.READY, PlanStatus.NEEDS_APPROVAL, PlanStatus.CANCELLED}
    ),
    PlanStatus.NEEDS_APPROVAL: frozenset({PlanStatus.READY, PlanStatus.CANCELLED}),
    PlanStatus.NEEDS_HUMAN: frozenset({PlanStatus.READY, PlanStatus.CANCELLED}),
    PlanStatus.DONE: frozenset({PlanStatus.READY, PlanStatus.CANCELLED}),
    PlanStatus.CANCELLED: frozenset(),
}


def check_attempt(old: AttemptState, new: AttemptState) -> None:
    if new not in ATTEMPT_TRANSITIONS[old]:
        raise IllegalTransition(f"attempt: {old} -> {new} is not a legal transition")


def check_plan(old: PlanStatus, new: PlanStatus) -> None:
    if new is not old and new not in PLAN_TRANSITIONS[old]:
        raise IllegalTransition(f"plan: {old} -> {new} is not a legal transition")


@dataclass(frozen=True)
class Settlement:
    state: AttemptState
    reason: str
    needs_human: bool = False  # the plan budget ran out


def settle_state(
    first_reason: FirstReason | None,
    end: RunEnd,
    *,
    context_current: bool,
    diagnostic: str = "",
) -> Settlement:
    """The one settlement mapping (order matters: the first matching row wins)."""
    detail = f": {diagnostic}" if diagnostic else ""
    if first_reason is FirstReason.CANCELLED:
        return Settlement(AttemptState.CANCELLED, "Cancelled.")
    if first_reason is FirstReason.SHUTDOWN:
        if end in {RunEnd.TIMEOUT, RunEnd.CAPTURE_FAILURE}:
            return Settlement(AttemptState.FAILED, f"{_END_TEXT[end]}{detail}")
        return Settlement(AttemptState.CANCELLED, "Stopped by shutdown.")
    if first_reason is FirstReason.STALE:
        return Settlement(AttemptState.STALE, f"The plan changed while this ran{detail}")
    if first_reason is FirstReason.TIME_LIMIT:
        return Settlement(AttemptState.CANCELLED, "Plan time limit reached.", needs_human=True)
    if not context_current:
        return Settlement(AttemptState.STALE, "The plan changed while this ran.")
    if end is RunEnd.OK:
        return Settlement(AttemptState.COMPLETED, "Done.")
    return Settlement(AttemptState.FAILED, f"{_END_TEXT[end]}{detail}")


_END_TEXT = {
    RunEnd.OK: "Done",
    RunEnd.TIMEOUT: "Timed out",
    RunEnd.CAPTURE_FAILURE: "The run's output could not be captured",
    RunEnd.FAILED: "Failed",
}
