"""The experiment's states and the only transitions allowed between them.

States are an Enum and transitions live in one table, so "what can follow a timeout" has one
answer, and every transition is one `state_changed` event in the record.
"""

from __future__ import annotations

from enum import StrEnum


class ExperimentState(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    COMPLETED = "completed"
    CRASHED = "crashed"
    TIMEOUT = "timeout"  # the hard timeout ended it (the monitor's or the watchdog's)
    STOPPED_BY_USER = "stopped_by_user"  # a person ended it: an early stop, a kill, `stop`


# The words of schema 1 records, read back as today's.
RENAMED = {"timed_out": ExperimentState.TIMEOUT, "killed": ExperimentState.STOPPED_BY_USER}


TRANSITIONS: dict[ExperimentState, frozenset[ExperimentState]] = {
    ExperimentState.STARTING: frozenset({ExperimentState.RUNNING, ExperimentState.CRASHED}),
    ExperimentState.RUNNING: frozenset(
        {
            ExperimentState.COMPLETED,
            ExperimentState.CRASHED,
            ExperimentState.TIMEOUT,
            ExperimentState.STOPPED_BY_USER,
        }
    ),
    ExperimentState.COMPLETED: frozenset(),
    ExperimentState.CRASHED: frozenset(),
    ExperimentState.TIMEOUT: frozenset(),
    ExperimentState.STOPPED_BY_USER: frozenset(),
}

FINAL_STATES = frozenset(state for state, nexts in TRANSITIONS.items() if not nexts)


def can_move(current: ExperimentState, target: ExperimentState) -> bool:
    return target in TRANSITIONS[current]
