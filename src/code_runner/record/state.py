"""The task run's state machine (states, the one transition table) and the words a run
ends with: `ResultStatus` for result.json, `Reason` for why."""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    PENDING = "pending"
    PREPARING = "preparing"
    BASELINE = "baseline"  # round 0: is the DoD already satisfied?
    AGENT = "agent"
    AUDITING = "auditing"
    VERIFYING = "verifying"
    EXPORTING = "exporting"
    APPLYING = "applying"  # complete-task mode: landing the patch in the source
    RELEASING = "releasing"
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    ABANDONED = "abandoned"  # the process died; set by `gc`


TERMINAL_STATES = frozenset(
    {RunState.PASSED, RunState.FAILED, RunState.ERROR, RunState.INTERRUPTED, RunState.ABANDONED}
)


_WORKING = {
    RunState.PREPARING,
    RunState.BASELINE,
    RunState.AGENT,
    RunState.AUDITING,
    RunState.VERIFYING,
    RunState.EXPORTING,
    RunState.APPLYING,
    RunState.RELEASING,
}


_ENDINGS = {RunState.FAILED, RunState.ERROR, RunState.INTERRUPTED}


TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset({RunState.PREPARING, *_ENDINGS}),
    RunState.PREPARING: frozenset({RunState.BASELINE, RunState.RELEASING, *_ENDINGS}),
    RunState.BASELINE: frozenset({RunState.AGENT, RunState.EXPORTING, RunState.RELEASING}),
    RunState.AGENT: frozenset({RunState.AUDITING, RunState.EXPORTING, RunState.RELEASING}),
    RunState.AUDITING: frozenset({RunState.VERIFYING, RunState.EXPORTING, RunState.RELEASING}),
    RunState.VERIFYING: frozenset({RunState.AGENT, RunState.EXPORTING, RunState.RELEASING}),
    RunState.EXPORTING: frozenset({RunState.APPLYING, RunState.RELEASING}),
    RunState.APPLYING: frozenset({RunState.RELEASING}),
    RunState.RELEASING: frozenset({RunState.PASSED, *_ENDINGS}),
    **{state: frozenset() for state in TERMINAL_STATES},
}


# A crash or signal can end a run from any working state.
for _from in _WORKING:
    TRANSITIONS[_from] = TRANSITIONS[_from] | {RunState.ERROR, RunState.INTERRUPTED}


for _from in _WORKING | {RunState.PENDING}:
    TRANSITIONS[_from] = TRANSITIONS[_from] | {RunState.ABANDONED}


class ResultStatus(StrEnum):
    PASSED = "passed"
    ALREADY_SATISFIED = "already_satisfied"
    FAILED = "failed"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    ABANDONED = "abandoned"


class Reason(StrEnum):
    """Why a run ended. Stable codes for machines; the `error` field carries the words."""

    DOD_PASSED = "dod_passed"
    ALREADY_SATISFIED = "already_satisfied"
    DOD_FAILED = "dod_failed"
    NO_ALLOWED_CHANGES = "no_allowed_changes"
    RUN_TIMEOUT = "run_timeout"
    AGENT_ERROR = "agent_error"
    AGENT_TIMEOUT = "agent_timeout"  # an agent CLI went silent or overran its time; killed
    BLOCKED_NEEDS_DECISION = "blocked_needs_decision"  # credentials, approval, context...
    STOPPED = "stopped"  # `code-runner stop` ended the run
    BUDGET_EXHAUSTED = "budget_exhausted"
    # a model backend's budgets, one code each (the run keeps its best patch so far)
    BUDGET_TURNS = "budget_turns"
    BUDGET_TOKENS = "budget_tokens"
    BUDGET_COST = "budget_cost"
    BUDGET_WALL_CLOCK = "budget_wall_clock"
    SAFETY_VIOLATION = "safety_violation"
    SOURCE_CHANGED = "source_changed"
    PATCH_INVALID = "patch_invalid"
    INTERRUPTED = "interrupted"
    WORKSPACE_ERROR = "workspace_error"
    DOD_CANNOT_START = "dod_cannot_start"  # at base: no command, interpreter or package
    INTERNAL_ERROR = "internal_error"
    DISK_FULL = "disk_full"  # the record could not be written
    DISK_BUDGET = "disk_budget"  # the run wrote more to its workspace than limits.disk_mb
    ABANDONED = "abandoned"
    # complete-task mode: the isolated DoD passed, landing the patch in the source did not
    APPLY_REFUSED = "apply_refused"  # the source was not in a state to take it; untouched
    SOURCE_DOD_FAILED = "source_dod_failed"  # applied, but the DoD failed in the source
    APPLY_FAILED = "apply_failed"  # writing, committing or rolling back went wrong
