"""The person's side of an experiment: the alert waiting for an answer, and what answers do.

The dialogue holds the pending alert, whether the next line is a settings change, and every
answer given. It talks to the person and records each answer; what an answer means for the
command it hands back to the loop as a `Reply`, because only the loop acts on the command.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from code_runner.monitor.adjust import ADJUST_HELP, adjusted_spec
from code_runner.monitor.alerts import Action, Alert, AlertPolicy, choose, options_for
from code_runner.monitor.record import ExperimentRecord, MonitorEvent
from code_runner.monitor.result import AnswerRecord
from code_runner.monitor.spec import ExperimentSpec
from code_runner.monitor.ui import MonitorUI

_EXTEND_MARGIN = 1.5  # an extended timeout leaves this much room over the ETA


@dataclass(frozen=True)
class Situation:
    """What an answer may need to know about the run at the moment it is given."""

    spec: ExperimentSpec
    elapsed_s: float
    eta_s: float | None
    diagnosis: Callable[[], str]  # computed only when asked for: it samples the tree


@dataclass(frozen=True)
class Stop:
    """Kill the command's tree now."""

    reason: str


@dataclass(frozen=True)
class EarlyStop:
    """Ask the command to stop (SIGINT): it may save and exit."""


@dataclass(frozen=True)
class NewSpec:
    """Go on with these settings (thresholds or the timeout changed)."""

    spec: ExperimentSpec


Reply = Stop | EarlyStop | NewSpec | None


@dataclass(frozen=True)
class Voice:
    """Who gave an answer and how: typed at the monitor's terminal, or through the run dir
    (`code-runner answer`, the dashboard's buttons)."""

    via: str = "terminal"
    by: str = ""


TERMINAL = Voice()


class Dialogue:
    """Alerts offered to the person and their answers; one per experiment."""

    def __init__(self, ui: MonitorUI, record: ExperimentRecord, policy: AlertPolicy) -> None:
        self.ui = ui
        self.record = record
        self.policy = policy
        self.pending: Alert | None = None
        self.awaiting_adjust = False
        self.answers: list[AnswerRecord] = []
        self.said: list[str] = []  # what the monitor said in answer, since the last `hear`
        self.voice = TERMINAL

    def offer(self, alert: Alert, *, repeated: bool) -> None:
        """Show an alert with its options; it waits for an answer until the next one."""
        self.pending = alert
        self.ui.alert(alert, options_for(alert.kind), repeated)

    def hear(self, line: str, now: Situation, voice: Voice = TERMINAL) -> Reply:
        """One line from the person: an answer to the pending alert, or new settings."""
        self.said, self.voice = [], voice
        if self.awaiting_adjust:
            self.awaiting_adjust = False
            return self._adjust(line, now)
        alert = self.pending
        if alert is None:
            return self._unprompted(line, now)
        action = choose(alert.kind, line)
        if action is None:
            if line:
                self._say(f"Answer A, B, C or D (got {line!r}).")
            return None
        if action is not Action.SHOW_DIAGNOSIS:  # a diagnosis informs; the alert stays open
            self.policy.answered(alert.kind)
            self.pending = None
        return self._answer(alert.kind.value, line, action, now)

    def _say(self, text: str) -> None:
        self.said.append(text)
        self.ui.say(text)

    def _unprompted(self, line: str, now: Situation) -> Reply:
        """B (kill) and C (adjust) work at any time, with no alert waiting."""
        action = {"b": Action.KILL, "kill": Action.KILL, "c": Action.ADJUST}.get(
            line.strip().lower()
        )
        if action is None:
            if line:
                self._say(
                    "No alert is waiting for an answer; the command is being monitored "
                    "(B kills it, C adjusts the timeout or thresholds)."
                )
            return None
        return self._answer(None, line, action, now)

    def _answer(self, kind: str | None, line: str, action: Action, now: Situation) -> Reply:
        reply, note = self._act(action, now)
        self._note(kind, line, action.value, now.elapsed_s, note)
        self.record.emit(
            MonitorEvent.ANSWER,
            alert=kind,
            answer=line,
            action=action.value,
            note=note,
            via=self.voice.via,
            by=self.voice.by,
        )
        return reply

    def _act(self, action: Action, now: Situation) -> tuple[Reply, str]:
        if action is Action.KILL:
            return Stop("killed by the user"), ""
        if action is Action.ADJUST:
            self.awaiting_adjust = True
            self._say(ADJUST_HELP)
            return None, ""
        if action is Action.EARLY_STOP:
            self._say("Sent SIGINT: the command may save and exit. Answer B to an alert to kill.")
            return EarlyStop(), "sent SIGINT to the command"
        if action is Action.SHOW_DIAGNOSIS:
            self._say(now.diagnosis())
            return None, ""
        if action is Action.EXTEND_TIMEOUT:
            return self._extend_timeout(now)
        self._say("Continuing to monitor.")
        return None, ""

    def _adjust(self, line: str, now: Situation) -> Reply:
        if not line.strip():
            self._say("Settings unchanged.")
            return None
        try:
            new, changed = adjusted_spec(now.spec, line)
        except ValueError as exc:
            self._say(f"Settings unchanged: {exc}")
            return None
        self.record.emit(MonitorEvent.THRESHOLDS_ADJUSTED, changes=changed)
        self._note(None, line, "adjusted", now.elapsed_s, str(changed))
        self._say(f"Settings changed: {changed}")
        return NewSpec(new)

    def _extend_timeout(self, now: Situation) -> tuple[Reply, str]:
        if now.eta_s is None:
            self._say("No ETA yet; timeout unchanged.")
            return None, "no ETA; timeout unchanged"
        # room over the ETA, plus two checks to see the end and the kill's grace period
        spec = now.spec
        wanted_s = now.elapsed_s + _EXTEND_MARGIN * now.eta_s + 2 * spec.interval_s + spec.grace_s
        if wanted_s <= now.spec.timeout_s:
            self._say("The ETA fits in the current timeout; unchanged.")
            return None, "ETA fits; timeout unchanged"
        new_timeout = round(wanted_s, 3)
        self.record.emit(MonitorEvent.THRESHOLDS_ADJUSTED, changes={"timeout_s": new_timeout})
        self._say(f"Timeout extended to {new_timeout:.0f} s.")
        reply = NewSpec(now.spec.model_copy(update={"timeout_s": new_timeout}))
        return reply, f"timeout extended to {new_timeout:.0f} s"

    def _note(
        self, alert_kind: str | None, line: str, action: str, elapsed_s: float, note: str
    ) -> None:
        self.answers.append(
            AnswerRecord(
                alert_kind=alert_kind,
                answer=line,
                action=action,
                elapsed_s=round(elapsed_s, 3),
                note=note,
                via=self.voice.via,
                by=self.voice.by,
            )
        )
