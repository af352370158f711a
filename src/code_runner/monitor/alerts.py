"""Alerts: what a check found, the options a person gets, and when to say it again.

Every alert except the hard timeout is advisory: the monitor tells, the person decides. On a
terminal the alert comes with options (continue, kill, adjust thresholds, one suggestion that
fits the alert); unanswered, it is repeated once after two checks and then kept quiet, so a
long night does not fill the screen. The policy is per alert kind and resets when the
condition clears, so a second, separate stall is reported again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class AlertKind(StrEnum):
    STALL_SUSPECTED = "STALL_SUSPECTED"
    RESOURCE_ALERT = "RESOURCE_ALERT"
    METRIC_PLATEAU = "METRIC_PLATEAU"
    SLOW_PROGRESS = "SLOW_PROGRESS"
    DIVERGED = "DIVERGED"


class Action(StrEnum):
    """What a person can ask for in answer to an alert."""

    CONTINUE = "continue"
    KILL = "kill"
    ADJUST = "adjust"
    EARLY_STOP = "early_stop"
    SHOW_DIAGNOSIS = "show_diagnosis"
    EXTEND_TIMEOUT = "extend_timeout"


@dataclass(frozen=True)
class Alert:
    """One finding of one check. `data` holds the numbers behind `detail`, for the record."""

    kind: AlertKind
    check_no: int
    elapsed_s: float
    detail: str
    data: dict[str, float | int | str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Option:
    key: str
    label: str
    action: Action


_SUGGESTIONS: dict[AlertKind, Option] = {
    AlertKind.METRIC_PLATEAU: Option(
        "D", "Early stop: send SIGINT so the job can save and exit", Action.EARLY_STOP
    ),
    AlertKind.STALL_SUSPECTED: Option(
        "D", "Show the last output lines and the tree's processes", Action.SHOW_DIAGNOSIS
    ),
    AlertKind.RESOURCE_ALERT: Option(
        "D", "Show the largest processes in the tree", Action.SHOW_DIAGNOSIS
    ),
    AlertKind.DIVERGED: Option(
        "D", "Show the last output lines and the tree's processes", Action.SHOW_DIAGNOSIS
    ),
    AlertKind.SLOW_PROGRESS: Option(
        "D", "Extend the timeout to fit the ETA (+20%)", Action.EXTEND_TIMEOUT
    ),
}


def options_for(kind: AlertKind) -> tuple[Option, ...]:
    """The four choices of the seed: continue, kill, adjust, and one type-specific step."""
    return (
        Option("A", "Continue monitoring (ignore this alert)", Action.CONTINUE),
        Option("B", "Kill the process", Action.KILL),
        Option("C", "Adjust timeout / thresholds", Action.ADJUST),
        _SUGGESTIONS[kind],
    )


def choose(kind: AlertKind, answer: str) -> Action | None:
    """Map a typed answer (`b`, `B`, `kill`) to an action; None when it means nothing."""
    text = answer.strip().lower()
    if not text:
        return None
    for option in options_for(kind):
        if text in (option.key.lower(), option.action.value):
            return option.action
    return None


class Episode(StrEnum):
    """Where an alert kind stands: quiet, shown once, repeated once (then silent)."""

    QUIET = "quiet"
    SHOWN = "shown"
    REPEATED = "repeated"
    ANSWERED = "answered"


@dataclass
class _KindState:
    episode: Episode = Episode.QUIET
    shown_at_check: int = 0


class AlertPolicy:
    """Decides, per check, whether an active condition is shown, repeated, or kept quiet."""

    def __init__(self, repeat_after_checks: int = 2) -> None:
        self.repeat_after_checks = repeat_after_checks
        self._states: dict[AlertKind, _KindState] = {}

    def on_check(self, kind: AlertKind, active: bool, check_no: int) -> Episode | None:
        """Return SHOWN or REPEATED when the alert must be said now, else None."""
        state = self._states.setdefault(kind, _KindState())
        if not active:
            state.episode = Episode.QUIET
            return None
        if state.episode is Episode.QUIET:
            state.episode = Episode.SHOWN
            state.shown_at_check = check_no
            return Episode.SHOWN
        if (
            state.episode is Episode.SHOWN
            and check_no - state.shown_at_check >= self.repeat_after_checks
        ):
            state.episode = Episode.REPEATED
            return Episode.REPEATED
        return None

    def answered(self, kind: AlertKind) -> None:
        """An answer silences the rest of this episode (no repeat)."""
        state = self._states.setdefault(kind, _KindState())
        if state.episode is not Episode.QUIET:
            state.episode = Episode.ANSWERED
