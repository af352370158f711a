"""Run one experiment under the monitor: launch, check every interval, act only on answers.

The loop sleeps in `select` on the child's pidfd (exit is noticed at once) and, on a
terminal, on the input fd (answers are acted on at once); it wakes for the next check, the
hard timeout, and, on a terminal, a live-tail refresh. Nothing here kills the command except
the hard timeout, a person's explicit answer, or our own interruption (Ctrl-C, SIGTERM);
descendants left behind after the command exits are cleaned up so nothing leaks. Whatever
happens, the record is completed in `finally`.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Mapping
from pathlib import Path

import code_runner.monitor.watchdog as watchdog
from code_runner import files, proc
from code_runner.clock import utc_now
from code_runner.errors import CodeRunnerError
from code_runner.monitor.adjust import diagnosis
from code_runner.monitor.alerts import Alert, AlertKind, AlertPolicy, Episode
from code_runner.monitor.answers import POLL_S, Inbox
from code_runner.monitor.checks import (
    MemoryCheck,
    Observation,
    Peaks,
    PlateauCheck,
    ProgressCheck,
    StallCheck,
)
from code_runner.monitor.detect import Detection
from code_runner.monitor.dialogue import Dialogue, EarlyStop, NewSpec, Reply, Situation, Stop
from code_runner.monitor.finish import PROVENANCE_FILE, Outcome, finish_run, make_watch
from code_runner.monitor.launch import Launched, launch
from code_runner.monitor.notify import notify
from code_runner.monitor.orphans import register, unregister
from code_runner.monitor.provenance import capture as capture_provenance
from code_runner.monitor.record import ExperimentRecord, MonitorEvent
from code_runner.monitor.report import headline
from code_runner.monitor.result import AlertRecord, ExperimentResult, KillSummary
from code_runner.monitor.spec import ExperimentSpec
from code_runner.monitor.state import ExperimentState, can_move
from code_runner.monitor.status import status
from code_runner.monitor.ui import MonitorUI, PlainUI, make_console, silence_terminal

TAIL_REFRESH_S = 0.5
WAKE_S = min(TAIL_REFRESH_S, POLL_S)  # the live tail, and answers through the run dir


class _Terminated(Exception):
    """SIGTERM reached the monitor: stop the experiment as for Ctrl-C."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class Experiment:
    """One run: the spec, the checks' state, the record. Use `run()` once."""

    def __init__(
        self,
        spec: ExperimentSpec,
        detection: Detection,
        record: ExperimentRecord,
        ui: MonitorUI,
        env: Mapping[str, str] | None = None,
        provenance: Mapping[str, object] | None = None,
    ) -> None:
        self.spec = spec
        self.detection = detection
        self.kind = spec.type or detection.type
        self.record = record
        self.ui = ui
        self.env = dict(os.environ if env is None else env)
        python = _is_python(spec.argv) and "PYTHONUNBUFFERED" not in self.env
        self.env_added = {"PYTHONUNBUFFERED": "1"} if python else {}
        self.env.update(self.env_added)  # block buffering would deliver every line at exit
        self.provenance = dict(provenance or {})
        self.state = ExperimentState.STARTING
        self.policy = AlertPolicy()
        self.stall = StallCheck(spec.stall_checks, python_hint=_is_python(spec.argv))
        self.memory = MemoryCheck(spec.memory_factor, spec.memory_warmup_s)
        self.plateau = PlateauCheck(spec.patience, spec.min_delta)
        self.progress = ProgressCheck(spec.slow_ratio, spec.progress_total)
        self.watch = make_watch(spec, self.kind, record)
        self.alerts: list[AlertRecord] = []
        self.dialogue = Dialogue(ui, record, self.policy)
        self.inbox = Inbox(record.run_dir)
        self.check_no = 0
        self.peaks = Peaks()
        self.stop_reason: str | None = None
        self.early_stop_sent = False
        self.kill: KillSummary | None = None
        self.leftovers = 0
        self.timed_out = False
        self.cleaning_up = False
        self.started_s = 0.0
        self.watchdog: proc.Process | None = None
        self.watchdog_pid: int | None = None
        self.hung_up = False

    @property
    def deadline_s(self) -> float:
        """When the hard timeout strikes (monotonic); answers may move it."""
        return self.started_s + self.spec.timeout_s

    # -- state ------------------------------------------------------------------------------

    def _move(self, target: ExperimentState, **data: object) -> None:
        if not can_move(self.state, target):
            raise RuntimeError(f"bug: experiment cannot go from {self.state} to {target}")
        self.record.emit(
            MonitorEvent.STATE_CHANGED, from_state=self.state.value, to_state=target.value, **data
        )
        self.state = target

    def _guard(self, launched: Launched) -> None:
        """Start the watchdog that holds the timeout if this monitor dies; register for gc."""
        files.atomic_write_text(self.record.spec_path, self.spec.model_dump_json(indent=2) + "\n")
        guard = watchdog.start_for(self.record, self.spec, launched, self.deadline_at())
        launched.exclude.add(guard.pid)
        self.watchdog, self.watchdog_pid = guard, guard.pid
        register(self.record.run_dir)
        self.record.emit(MonitorEvent.WATCHDOG_STARTED, pid=guard.pid, monitor_pid=os.getpid())

    def deadline_at(self) -> float:
        """The deadline on the wall clock (epoch seconds), for the watchdog and status.json."""
        return time.time() + (self.deadline_s - time.monotonic())

    def _hangup(self, signum: int, frame: object) -> None:
        """The terminal is gone (closed, `tmux kill-session`): go on detached, in silence."""
        silence_terminal()
        self.hung_up = True

    def _detach_ui(self) -> None:
        """After SIGHUP: no terminal to read or write; the record says so."""
        self.hung_up = False
        self.ui = PlainUI(make_console(open(os.devnull, "w")))  # noqa: SIM115 - lives as long as the run
        self.dialogue.ui = self.ui
        self.record.emit(MonitorEvent.DETACHED, signal="SIGHUP", monitor_pid=os.getpid())

    def _elapsed(self) -> float:
        return time.monotonic() - self.started_s

    # -- main loop --------------------------------------------------------------------------

    def run(self) -> ExperimentResult:
        """Launch, monitor until the command ends, collect; always leaves a complete record.

        SIGHUP (the terminal closed) detaches the monitor for the run's length."""
        previous = signal.signal(signal.SIGHUP, self._hangup)
        try:
            return self._run()
        finally:
            signal.signal(signal.SIGHUP, previous or signal.SIG_DFL)

    def _run(self) -> ExperimentResult:
        started_at = utc_now()
        self.record.emit(
            MonitorEvent.RUN_STARTED,
            command=list(self.spec.command),
            argv=list(self.spec.argv),
            cwd=str(self.spec.cwd),
            timeout_s=self.spec.timeout_s,
            interval_s=self.spec.interval_s,
            env_added=self.env_added,
        )
        self.record.emit(
            MonitorEvent.TYPE_DETECTED,
            type=self.kind.value,
            given=self.spec.type is not None,
            reasons=list(self.detection.reasons),
            uncertain=self.detection.uncertain,
        )
        self.watch.start_at_current_sizes()
        files.atomic_write_json(
            self.record.run_dir / PROVENANCE_FILE,
            {**capture_provenance(self.spec, self.env), **self.provenance},
        )
        try:
            launched = launch(
                self.spec.argv,
                cwd=self.spec.cwd,
                env=self.env,
                stdout_path=self.record.stdout_path,
                stderr_path=self.record.stderr_path,
            )
        except CodeRunnerError as exc:
            self._move(ExperimentState.CRASHED, error=exc.message)
            self.record.write_status({"state": self.state.value, "finished": True})
            raise
        self.started_s = launched.started_s
        self._move(ExperimentState.RUNNING, pid=launched.pid)
        self._guard(launched)
        self._write_status(launched)
        # SIGTERM stops the experiment as Ctrl-C does; once the tree is being killed, more
        # signals wait: the kill and the record must finish.
        with proc.signals_as_interrupt(
            _Terminated, signals=(signal.SIGTERM,), ignore=lambda: self.cleaning_up
        ):
            interrupted = self._watch(launched)
        final = self._final_state(launched.poll())
        self._move(final, returncode=launched.returncode)
        self.watch.pump(final=True)
        self._final_divergence()
        outcome = self._outcome(final, launched.returncode, started_at, interrupted)
        result = finish_run(
            self.spec, self.kind, self.detection, self.record, self.watch, self.progress, outcome
        )
        self._write_status(launched, finished=True)
        self._release_watchdog()
        notify(
            self.spec.notify,
            self.record,
            self.env,
            event="finished",
            text=f"{headline(result)}: {self.spec.display_command}",
            state=result.state.value,
        )
        return result

    def _release_watchdog(self) -> None:
        """The record is complete: the watchdog has nothing left to hold."""
        if self.watchdog is not None:
            self.watchdog.send_signal(signal.SIGTERM)
            self.watchdog.wait_exit(5.0)
        unregister(self.record.run_dir)

    def _outcome(
        self,
        final: ExperimentState,
        returncode: int | None,
        started_at: str,
        interrupted: str | None,
    ) -> Outcome:
        exit_code = None if returncode is None else proc.exit_code_of(returncode, self.timed_out)
        return Outcome(
            state=final,
            exit_code=exit_code,
            signal=proc.signal_of(returncode),
            duration_s=round(time.monotonic() - self.started_s, 3),
            started_at=started_at,
            kill=self.kill,
            leftovers_killed=self.leftovers,
            checks=self.check_no,
            peak_rss_bytes=self.peaks.rss,
            peak_pss_bytes=self.peaks.pss,
            peak_processes=self.peaks.processes,
            memory_baseline_bytes=self.memory.baseline_bytes,
            cpu_s=round(self.peaks.last.cpu_s, 3),
            memory_samples=tuple(self.peaks.samples),
            alerts=tuple(self.alerts),
            answers=tuple(self.dialogue.answers),
            stop_reason=self._stop_text(interrupted),
            interrupted=interrupted is not None,
        )

    def _watch(self, launched: Launched) -> str | None:
        """Monitor until the command ends; kill what is left. The signal that stopped us, if any."""
        interrupted: str | None = None
        try:
            self._loop(launched)
        except (KeyboardInterrupt, _Terminated) as exc:
            interrupted = exc.signal_name if isinstance(exc, _Terminated) else "SIGINT"
            self.record.emit(MonitorEvent.SIGNAL_RECEIVED, signal=interrupted)
            self.stop_reason = self.record.stop_reason() or f"interrupted ({interrupted})"
        finally:
            self.cleaning_up = True
            if launched.poll() is None:
                reason = "timeout" if self.timed_out else (self.stop_reason or "monitor stopped")
                self._kill_tree(launched, reason)
            self._cleanup_leftovers(launched)
            self.peaks.add(launched.sample(with_pss=False))  # CPU of the reaped command too
            launched.close()
        return interrupted

    def _loop(self, launched: Launched) -> None:
        next_check = self.started_s + self.spec.interval_s
        while True:
            if self.hung_up:
                self._detach_ui()
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
            wake = min(next_check, self.deadline_s, now + WAKE_S)
            self._wait(launched, max(0.0, wake - time.monotonic()))
            if self.ui.live:
                self._show_tail()
            if replies := self.inbox.take(self.dialogue, self._situation(launched)):
                for reply in replies:
                    self._act(launched, reply)
                self._write_status(launched)

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
                self._act(launched, self.dialogue.hear(line, self._situation(launched)))

    def _show_tail(self) -> None:
        for stream, shown in self.watch.pump().items():
            if shown.lines or shown.transient:
                self.ui.tail(stream, list(shown.lines), shown.transient)

    # -- checks -----------------------------------------------------------------------------

    def _check(self, launched: Launched) -> None:
        self.check_no += 1
        sample = launched.sample(with_pss=True)
        self.peaks.add(sample, elapsed_s=self._elapsed())
        if not self.ui.live:
            self.watch.pump()
        obs = Observation(self.check_no, self._elapsed(), sample, self.watch.activity())
        findings: dict[AlertKind, Alert | None] = {
            AlertKind.STALL_SUSPECTED: self.stall.observe(obs),
            AlertKind.RESOURCE_ALERT: self.memory.observe(obs),
        }
        self.watch.sample_refreshed()
        if self.watch.parse_metrics:
            findings[AlertKind.DIVERGED] = self._diverged(obs.elapsed_s)
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

    def _diverged(self, elapsed_s: float) -> Alert | None:
        """A NaN or inf metric: the run diverged (advisory, like every alert)."""
        if not self.watch.diverged:
            return None
        shown = ", ".join(f"{k} = {v}" for k, v in self.watch.diverged.items())
        return Alert(
            AlertKind.DIVERGED,
            self.check_no,
            elapsed_s,
            f"Metric went non-finite ({shown}): the run has diverged.",
            {k: str(v) for k, v in self.watch.diverged.items()},
        )

    def _final_divergence(self) -> None:
        """A divergence printed after the last check still reaches the alerts and report."""
        seen = any(a.kind == AlertKind.DIVERGED.value for a in self.alerts)
        if not seen and self.watch.parse_metrics and (alert := self._diverged(self._elapsed())):
            self._raise_alert(alert, repeated=False)

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
        self.dialogue.offer(alert, repeated=repeated)
        text = f"[{alert.kind.value}] {self.spec.display_command}: {alert.detail}"
        notify(
            self.spec.notify,
            self.record,
            self.env,
            event="alert",
            text=text,
            alert=alert.kind.value,
        )

    def _write_status(self, launched: Launched, *, finished: bool = False) -> None:
        now_s = time.monotonic()
        self.record.write_status(status(self, pid=launched.pid, now_s=now_s, finished=finished))

    # -- answers ----------------------------------------------------------------------------

    def _situation(self, launched: Launched) -> Situation:
        return Situation(
            spec=self.spec,
            elapsed_s=self._elapsed(),
            eta_s=self.progress.eta_s,
            diagnosis=lambda: diagnosis(
                self.watch.recent_lines(), launched.sample(with_pss=False).largest
            ),
        )

    def _act(self, launched: Launched, reply: Reply) -> None:
        """Carry out what an answer asked for; only the loop acts on the command."""
        if isinstance(reply, Stop):
            self.stop_reason = reply.reason
        elif isinstance(reply, EarlyStop):
            launched.send_signal(signal.SIGINT)
            self.early_stop_sent = True
        elif isinstance(reply, NewSpec):
            self._use(reply.spec)

    def _use(self, new: ExperimentSpec) -> None:
        self.spec = new
        self.stall.checks = new.stall_checks
        self.memory.factor = new.memory_factor
        self.plateau.patience, self.plateau.min_delta = new.patience, new.min_delta
        self.progress.slow_ratio = new.slow_ratio

    # -- kills ------------------------------------------------------------------------------

    def _kill_tree(self, launched: Launched, reason: str) -> None:
        report = launched.terminate_tree(self.spec.grace_s)
        self.kill = KillSummary(reason=reason, **report.model_dump())
        self.record.emit(
            MonitorEvent.TREE_KILLED,
            reason=reason,
            signalled=report.signalled,
            needed_sigkill=report.needed_sigkill,
            last_gone_s=report.last_gone_s,
            survivors=list(report.survivors),
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
                    last_gone_s=report.last_gone_s,
                    survivors=list(report.survivors),
                )

    def _stop_text(self, interrupted: str | None) -> str | None:
        if interrupted is not None:
            return self.record.stop_reason() or f"interrupted ({interrupted})"
        if self.timed_out:
            return "timeout"
        if self.stop_reason is not None:
            return self.stop_reason
        if self.early_stop_sent:
            return "early stop requested by the user (SIGINT sent)"
        return None

    def _final_state(self, returncode: int | None) -> ExperimentState:
        if self.timed_out:
            return ExperimentState.TIMEOUT
        if self.stop_reason is not None or self.early_stop_sent:
            return ExperimentState.STOPPED_BY_USER
        if returncode == 0:
            return ExperimentState.COMPLETED
        return ExperimentState.CRASHED


def _is_python(argv: tuple[str, ...]) -> bool:
    """A Python command, directly or as the last word of a `bash -c` line (buffering hint)."""
    return any("python" in Path(a).name for a in argv[:3]) or any("python" in a for a in argv[-1:])
