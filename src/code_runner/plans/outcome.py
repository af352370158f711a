"""What an item's run hands the store, and what the plan becomes after it settles.

The order of `plan_status_after` is the order of precedence: a pending cancel closes the
plan whatever happened; a spent budget or a safety finding needs a person; a completed
item with undeclared changes pauses for an amendment (its commit is kept), one with
protected changes pauses for approval; a clean last item finishes the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from code_runner.plans.states import AttemptState, PlanStatus, RunEnd


@dataclass(frozen=True)
class Commit:
    """The runner commit of a completed item, already in the runner repo under `ref`."""

    sha: str
    tree: str
    ref: str


@dataclass(frozen=True)
class Outcome:
    end: RunEnd
    commit: Commit | None = None
    unchanged: bool = False
    out_of_scope: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    diagnostic: str = ""
    diagnostic_ref: str | None = None  # the partial patch of a failed attempt
    stop_reason: str | None = None  # the item run's own reason (run_timeout, dod_failed, ...)

    def result(self) -> dict[str, Any]:
        return {
            "head": self.commit.sha if self.commit else None,
            "unchanged": self.unchanged,
            "out_of_scope": list(self.out_of_scope),
            "protected": list(self.protected),
        }


@dataclass(frozen=True)
class Settled:
    attempt_id: str
    state: AttemptState
    reason: str
    plan_status: PlanStatus


@dataclass(frozen=True)
class After:
    status: PlanStatus
    reason: str = ""
    checkpoint: str | None = None  # "scope" or "approval"


def plan_status_after(
    *,
    state: AttemptState,
    outcome: Outcome,
    cancel_requested: bool,
    time_limit: bool,
    finding: bool,
    last_item: bool,
) -> After:
    if cancel_requested:
        return After(PlanStatus.CANCELLED, "cancelled")
    if time_limit:
        return After(PlanStatus.NEEDS_HUMAN, "the plan's time budget ran out")
    if finding:
        return After(PlanStatus.NEEDS_HUMAN, "a safety finding needs a person")
    if state is not AttemptState.COMPLETED:
        return After(PlanStatus.PAUSED)
    if outcome.out_of_scope and outcome.commit is not None:
        return After(
            PlanStatus.NEEDS_AMENDMENT, "changes outside the declared files", checkpoint="scope"
        )
    if outcome.protected and outcome.commit is not None:
        return After(PlanStatus.NEEDS_APPROVAL, "changes to protected files", checkpoint="approval")
    if last_item:
        return After(PlanStatus.DONE, "every item is done")
    return After(PlanStatus.RUNNING, "")
