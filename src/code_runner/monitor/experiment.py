"""Run one experiment under the monitor: launch, check every interval, act only on answers.

The loop sleeps in `select` on the child's pidfd (exit is noticed at once) and, on a
terminal, on the input fd (answers are acted on at once); it wakes for the next check, the
hard timeout, and, on a terminal, a live-tail refresh. Nothing here kills the command except
the hard timeout, a person's explicit answer, or our own interruption (Ctrl-C, SIGTERM);
descendants left behind after the command exits are cleaned up so nothing leaks. Whatever
happens, the record is completed in `finally`.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from code_runner.clock import utc_now
from code_runner.errors import CodeRunnerError
from code_runner.monitor.adjust import ADJUST_HELP, adjusted_spec, diagnosis
from code_runner.monitor.alerts import (
    Action,
    Alert,
    AlertKind,
    AlertPolicy,
    Episode,
    choose,
    options_for,
)
from code_runner.monitor.checks import (
    MemoryCheck,
    Observation,
    PlateauCheck,
    ProgressCheck,
    StallCheck,
)
from code_runner.monitor.collect import count_present
from code_runner.monitor.detect import Detection
from code_runner.monitor.finish import Outcome, finish_run
from code_runner.monitor.launch import KillReport, Launched, TreeSample, launch
from code_runner.monitor.record import ExperimentRecord, MonitorEvent
from code_runner.monitor.result import AlertRecord, AnswerRecord, ExperimentResult
from code_runner.monitor.spec import ExperimentSpec, ExperimentType
from code_runner.monitor.state import ExperimentState, can_move
from code_runner.monitor.ui import MonitorUI
from code_runner.monitor.watch import OutputWatch

TAIL_REFRESH_S = 0.5


@dataclass
class Peaks:
    """The latest tree sample and the highest values seen, for status and result."""

    last: TreeSample = field(default_factory=lambda: TreeSample(0, 0.0, 0, None, ()))
    rss: int = 0
    pss: int | None = None
    processes: int = 0

    def add(self, sample: TreeSample) -> None:
        self.last = sample
        self.rss = max(self.rss, sample.rss_bytes)
        if sample.pss_bytes is not None:
            self.pss = max(self.pss or 0, sample.pss_bytes)
        self.processes = max(self.processes, sample.processes)


class _Terminated(Exception):
    """SIGTERM reached the monitor: stop the experiment as for Ctrl-C."""


class Experiment:
    """One run: the spec, the checks' state, the record. Use `run()` once."""

    def __init__(
        self,
        spec: ExperimentSpec,
        detection: Detection,
        record: ExperimentRecord,
        ui: MonitorUI,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self.detection = detection
        self.kind = spec.type or detection.type
        self.record = record
        self.ui = ui
        self.env = dict(os.environ if env is None else env)
        self.state = ExperimentState.STARTING
        self.policy = AlertPolicy()
        self.stall = StallCheck(spec.stall_checks, python_hint=_is_python(spec.argv))
        self.memory = MemoryCheck(spec.memory_factor, spec.memory_warmup_s)
        self.plateau = PlateauCheck(spec.patience, spec.min_delta)
        self.progress = ProgressCheck(spec.slow_ratio, spec.progress_total)
        self.watch = OutputWatch(
            record.stdout_path,
            record.stderr_path,
            spec.cwd,
            spec.monitor,
            parse_metrics=self.kind is ExperimentType.TRAINING
            or spec.metric is not None
            or spec.metric_regex is not None,
            parse_progress=self.kind in (ExperimentType.ETL, ExperimentType.SIMULATION)
            or spec.progress_total is not None,
            metric_regex=re.compile(spec.metric_regex) if spec.metric_regex else None,
        )
        self.alerts: list[AlertRecord] = []
        self.answers: list[AnswerRecord] = []
        self.pending: Alert | None = None
        self.awaiting_adjust = False
        self.check_no = 0
        self.peaks = Peaks()
        self.stop_reason: str | None = None
        self.early_stop_sent = False
        self.kill: KillReport | None = None
        self.kill_reason = ""
        self.leftovers = 0
        self.timed_out = False
        self.started_s = 0.0
        self.deadline_s = 0.0

    # -- state ------------------------------------------------------------------------------

    def _move(self, target: ExperimentState, **data: object) -> None:
        if not can_move(self.state, target):
            raise RuntimeError(f"bug: experiment cannot go from {self.state} to {target}")
        self.record.emit(
            MonitorEvent.STATE_CHANGED, from_state=self.state.value, to_state=target.value, **data
        )
        self.state = target

    def _elapsed(self) -> float:
        return time.monotonic() - self.started_s

    # -- main loop --------------------------------------------------------------------------

    def run(self) -> ExperimentResult:
        """Launch, monitor until the command ends, collect; always leaves a complete record."""
        started_at = utc_now()
        self.record.emit(
            MonitorEvent.RUN_STARTED,
            command=list(self.spec.command),
            argv=list(self.spec.argv),
            cwd=str(self.spec.cwd),
            timeout_s=self.spec.timeout_s,
            interval_s=self.spec.interval_s,
        )
        self.record.emit(
            MonitorEvent.TYPE_DETECTED,
            type=self.kind.value,
            given=self.spec.type is not None,
            reasons=list(self.detection.reasons),
            uncertain=self.detection.uncertain,
        )
        try:
            launched = launch(
                self.spec.argv,
                cwd=self.spec.cwd,
                env=self.env,
                token=uuid.uuid4().hex,
                stdout_path=self.record.stdout_path,
                stderr_path=self.record.stderr_path,
            )
        except CodeRunnerError as exc:
            self._move(ExperimentState.CRASHED, error=exc.message)
            self.record.write_status({"state": self.state.value, "finished": True})
            raise
        self.started_s = launched.started_s
        self.deadline_s = self.started_s + self.spec.timeout_s
        self._move(ExperimentState.RUNNING, pid=launched.pid)
        self._write_status(launched)
        interrupted: str | None = None
        try:
            with _sigterm_raises():
                self._loop(launched)
        except (KeyboardInterrupt, _Terminated) as exc:
            interrupted = "SIGTERM" if isinstance(exc, _Terminated) else "SIGINT"
            self.record.emit(MonitorEvent.SIGNAL_RECEIVED, signal=interrupted)
            self.stop_reason = f"interrupted ({interrupted})"
        finally:
            if launched.poll() is None:
                reason = "timeout" if self.timed_out else (self.stop_reason or "monitor stopped")
                self._kill_tree(launched, reason)
            self._cleanup_leftovers(launched)
            self.peaks.add(launched.sample(with_pss=False))  # CPU of the reaped command too
            launched.close()
        returncode = launched.poll()
        final = self._final_state(returncode)
        self._move(final, returncode=returncode)
        self.watch.pump(final=True)
        outcome = Outcome(
            state=final,
            returncode=returncode,
            timed_out=self.timed_out,
            duration_s=time.monotonic() - self.started_s,
            started_at=started_at,
            kill=self.kill,
            kill_reason=self.kill_reason,
            leftovers=self.leftovers,
            checks=self.check_no,
            peak_rss=self.peaks.rss,
            peak_pss=self.peaks.pss,
            peak_processes=self.peaks.processes,
            cpu_s=self.peaks.last.cpu_s,
            memory_baseline=self.memory.baseline_bytes,
            alerts=tuple(self.alerts),
            answers=tuple(self.answers),
            stop_reason=self._stop_text(interrupted),
            interrupted=interrupted is not None,
        )
        result = finish_run(
            self.spec, self.kind, self.detection, self.record, self.watch, self.progress, outcome
        )
        self._write_status(launched, finished=True)
        return result

    def _loop(self, launched: Launched) -> None:
        next_check = self.started_s + self.spec.interval_s
        while True:
            if launched.poll() is not None:
                return
            now = time.monotonic()
            if now >= self.deadline_s:
                self.timed_out = True
                self.record.emit(
                    MonitorEvent.TIMEOUT,
                    elapsed_s=round(self._elapsed(), 3),
                    timeout_s=self.spec.timeout_s,
                )
                self._kill_tree(launched, "timeout")
                return
            if now >= next_check:
                self._check(launched)
                next_check = max(next_check + self.spec.interval_s, now + 0.001)
            if self.stop_reason is not None:
                self._kill_tree(launched, self.stop_reason)
                return
            wake = min(next_check, self.deadline_s)
            if self.ui.live:
                wake = min(wake, now + TAIL_REFRESH_S)
            self._wait(launched, max(0.0, wake - time.monotonic()))
            if self.ui.live:
                self._show_tail()

    def _wait(self, launched: Launched, timeout_s: float) -> None:
        fds = [fd for fd in (launched.pidfd, self.ui.input_fd()) if fd is not None]
        if launched.pidfd is None:
            timeout_s = min(timeout_s, 0.1)  # no pidfd: poll for exit
        try:
            ready, _, _ = select.select(fds, [], [], timeout_s)
        except InterruptedError:
            return
        input_fd = self.ui.input_fd()
        if input_fd is not None and input_fd in ready:
            for line in self.ui.read_lines():
                self._answer(launched, line)

    def _show_tail(self) -> None:
        for stream, shown in self.watch.pump().items():
            if shown.lines or shown.transient:
                self.ui.tail(stream, list(shown.lines), shown.transient)

    # -- checks -----------------------------------------------------------------------------

    def _check(self, launched: Launched) -> None:
        self.check_no += 1
        sample = launched.sample(with_pss=True)
        self.peaks.add(sample)
        if not self.ui.live:
            self.watch.pump()
        obs = Observation(self.check_no, self._elapsed(), sample, self.watch.activity())
        findings: dict[AlertKind, Alert | None] = {
            AlertKind.STALL_SUSPECTED: self.stall.observe(obs),
            AlertKind.RESOURCE_ALERT: self.memory.observe(obs),
        }
        if self.watch.parse_metrics:
            metric = self.watch.watched_metric(self.spec.metric)
            values = self.watch.series.values(metric) if metric else []
            findings[AlertKind.METRIC_PLATEAU] = self.plateau.observe(
                metric, values, self.check_no, obs.elapsed_s
            )
        if self.watch.parse_progress:
            findings[AlertKind.SLOW_PROGRESS] = self.progress.observe(self.watch.progress, obs)
        for kind, alert in findings.items():
            episode = self.policy.on_check(kind, alert is not None, self.check_no)
            if alert is not None and episode is not None:
                self._raise_alert(alert, repeated=episode is Episode.REPEATED)
        self._write_status(launched)

    def _raise_alert(self, alert: Alert, *, repeated: bool) -> None:
        self.alerts.append(
            AlertRecord(
                kind=alert.kind.value,
                check_no=alert.check_no,
                elapsed_s=round(alert.elapsed_s, 3),
                detail=alert.detail,
                data=alert.data,
                repeated=repeated,
            )
        )
        kind = MonitorEvent.ALERT_REPEATED if repeated else MonitorEvent.ALERT
        self.record.emit(
            kind,
            alert=alert.kind.value,
            check_no=alert.check_no,
            elapsed_s=round(alert.elapsed_s, 3),
            detail=alert.detail,
            data=alert.data,
            advisory=True,
        )
        self.pending = alert
        self.ui.alert(alert, options_for(alert.kind), repeated)

    def _write_status(self, launched: Launched, *, finished: bool = False) -> None:
        s = self.peaks.last
        status: dict[str, object] = {
            "state": self.state.value,
            "finished": finished,
            "pid": launched.pid,
            "type": self.kind.value,
            "check_no": self.check_no,
            "elapsed_s": round(self._elapsed(), 3),
            "timeout_s": self.spec.timeout_s,
            "remaining_s": round(max(0.0, self.deadline_s - time.monotonic()), 3),
            "processes": s.processes,
            "cpu_s": round(s.cpu_s, 3),
            "rss_bytes": s.rss_bytes,
            "pss_bytes": s.pss_bytes,
            "memory_baseline_bytes": self.memory.baseline_bytes,
            "output_bytes": self.watch.output_bytes(),
            "pending_alert": self.pending.kind.value if self.pending else None,
            "alerts": len(self.alerts),
        }
        if self.spec.expect and self.kind is ExperimentType.ANALYSIS:
            status["outputs_present"] = count_present(self.spec.cwd, self.spec.expect)
            status["outputs_expected"] = len(self.spec.expect)
        if self.progress.done is not None:
            status["progress"] = {
                "done": self.progress.done,
                "total": self.progress.total,
                "rate_per_s": self.progress.rate,
                "eta_s": self.progress.eta_s,
            }
        metric = self.watch.watched_metric(self.spec.metric) if self.watch.parse_metrics else None
        if metric:
            status["metric"] = {"name": metric, "last": self.watch.series.last().get(metric)}
        self.record.write_status(status)

    # -- answers ----------------------------------------------------------------------------

    def _answer(self, launched: Launched, line: str) -> None:
        if self.awaiting_adjust:
            self.awaiting_adjust = False
            self._adjust(line)
            return
        if self.pending is None:
            if line:
                self.ui.say("No alert is waiting for an answer; the command is being monitored.")
            return
        alert = self.pending
        action = choose(alert.kind, line)
        if action is None:
            if line:
                self.ui.say(f"Answer A, B, C or D (got {line!r}).")
            return
        note = ""
        self.policy.answered(alert.kind)
        self.pending = None
        if action is Action.KILL:
            self.stop_reason = "killed by the user"
        elif action is Action.ADJUST:
            self.awaiting_adjust = True
            self.ui.say(ADJUST_HELP)
        elif action is Action.EARLY_STOP:
            launched.send_signal(signal.SIGINT)
            self.early_stop_sent = True
            note = "sent SIGINT to the command"
            self.ui.say("Sent SIGINT: the command may save and exit. Answer B to an alert to kill.")
        elif action is Action.SHOW_DIAGNOSIS:
            self.ui.say(self._diagnosis(launched))
        elif action is Action.EXTEND_TIMEOUT:
            note = self._extend_timeout()
        else:
            self.ui.say("Continuing to monitor.")
        self.answers.append(
            AnswerRecord(
                alert_kind=alert.kind.value,
                answer=line,
                action=action.value,
                elapsed_s=round(self._elapsed(), 3),
                note=note,
            )
        )
        self.record.emit(
            MonitorEvent.ANSWER, alert=alert.kind.value, answer=line, action=action.value, note=note
        )

    def _adjust(self, line: str) -> None:
        if not line.strip():
            self.ui.say("Settings unchanged.")
            return
        try:
            new, changed = adjusted_spec(self.spec, line)
        except ValueError as exc:
            self.ui.say(f"Settings unchanged: {exc}")
            return
        self.spec = new
        self.stall.checks = new.stall_checks
        self.memory.factor = new.memory_factor
        self.plateau.patience, self.plateau.min_delta = new.patience, new.min_delta
        self.progress.slow_ratio = new.slow_ratio
        self.deadline_s = self.started_s + new.timeout_s
        self.record.emit(MonitorEvent.THRESHOLDS_ADJUSTED, changes=changed)
        self.answers.append(
            AnswerRecord(
                alert_kind=None,
                answer=line,
                action="adjusted",
                elapsed_s=round(self._elapsed(), 3),
                note=str(changed),
            )
        )
        self.ui.say(f"Settings changed: {changed}")

    def _extend_timeout(self) -> str:
        eta = self.progress.eta_s
        if eta is None:
            self.ui.say("No ETA yet; timeout unchanged.")
            return "no ETA; timeout unchanged"
        new_deadline = time.monotonic() + 1.2 * eta
        if new_deadline <= self.deadline_s:
            self.ui.say("The ETA fits in the current timeout; unchanged.")
            return "ETA fits; timeout unchanged"
        self.deadline_s = new_deadline
        new_timeout = round(self.deadline_s - self.started_s, 3)
        self.spec = self.spec.model_copy(update={"timeout_s": new_timeout})
        self.record.emit(MonitorEvent.THRESHOLDS_ADJUSTED, changes={"timeout_s": new_timeout})
        self.ui.say(f"Timeout extended to {new_timeout:.0f} s.")
        return f"timeout extended to {new_timeout:.0f} s"

    def _diagnosis(self, launched: Launched) -> str:
        return diagnosis(self.watch.recent_lines(), launched.sample(with_pss=False).largest)

    def _kill_tree(self, launched: Launched, reason: str) -> None:
        self.kill = launched.terminate_tree(self.spec.grace_s)
        self.kill_reason = reason
        self.record.emit(
            MonitorEvent.TREE_KILLED,
            reason=reason,
            signalled=self.kill.signalled,
            needed_sigkill=self.kill.needed_sigkill,
            last_gone_s=round(self.kill.last_gone_s, 3),
            survivors=list(self.kill.survivors),
        )

    def _cleanup_leftovers(self, launched: Launched) -> None:
        """The command exited but left descendants (daemons, `setsid` escapees): end them."""
        if launched.members():
            report = launched.terminate_tree(self.spec.grace_s)
            self.leftovers = report.signalled
            if report.signalled:
                self.record.emit(
                    MonitorEvent.LEFTOVERS_KILLED,
                    count=report.signalled,
                    last_gone_s=round(report.last_gone_s, 3),
                    survivors=list(report.survivors),
                )

    def _stop_text(self, interrupted: str | None) -> str | None:
        if interrupted is not None:
            return f"interrupted ({interrupted})"
        if self.timed_out:
            return "timeout"
        if self.stop_reason is not None:
            return self.stop_reason
        if self.early_stop_sent:
            return "early stop requested by the user (SIGINT sent)"
        return None

    def _final_state(self, returncode: int | None) -> ExperimentState:
        if self.timed_out:
            return ExperimentState.TIMED_OUT
        if self.stop_reason is not None or self.early_stop_sent:
            return ExperimentState.KILLED
        if returncode == 0:
            return ExperimentState.COMPLETED
        return ExperimentState.CRASHED


def _is_python(argv: tuple[str, ...]) -> bool:
    """A Python command, directly or as the last word of a `bash -c` line (buffering hint)."""
    return any("python" in Path(a).name for a in argv[:3]) or any("python" in a for a in argv[-1:])


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While monitoring, SIGTERM to the monitor stops the experiment cleanly (main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
