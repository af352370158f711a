"""The watchdog: holds an experiment's hard timeout when its monitor is gone.

The monitor starts it right after the command, as a process of its own session (no terminal
signal reaches it), and hands it `watchdog.json`: the monitor's and the command's pids (with
their start times, so a reused pid is never mistaken), the tree's token and the deadline. It
does not depend on the monitor: while the monitor lives it only remembers the tree's members
(so an escapee that lost the token is still known) and exits once `result.json` is written.
When the monitor dies before that (SIGKILL, the OOM killer), the command keeps running, as
only the hard timeout kills: at the deadline (`status.json` may have moved it) the watchdog
ends the whole tree and finishes the record; if the command ended first, it finishes the
record at once.

Run as `python -m code_runner.monitor.watchdog RUN_DIR`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import psutil
from pydantic import BaseModel, ConfigDict

from code_runner import files, proc
from code_runner.monitor.launch import KillReport, Launched, _scan_proc
from code_runner.monitor.record import ExperimentRecord, MonitorEvent
from code_runner.monitor.salvage import finish_orphan
from code_runner.monitor.spec import ExperimentSpec

HUNG_MARGIN_S = 30.0  # a live monitor that lets the deadline pass by this much is hung
_POLL_S = 0.05


class WatchdogConfig(BaseModel):
    """What the monitor hands its watchdog (`watchdog.json`)."""

    model_config = ConfigDict(frozen=True)

    monitor_pid: int
    monitor_started_at: float
    job_pid: int
    job_started_at: float
    token: str
    deadline_at: float  # wall clock (epoch seconds); status.json's `deadline_at` wins
    grace_s: float
    poll_s: float


def started_at(pid: int) -> float:
    """A process's start time (epoch seconds), 0.0 when it is gone."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return 0.0


def is_alive(pid: int, started: float) -> bool:
    """The process `pid` that started at `started` still runs (zombies count as gone)."""
    try:
        member = psutil.Process(pid)
        return (
            abs(member.create_time() - started) < 0.05 and member.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False


def load_config(record: ExperimentRecord) -> WatchdogConfig:
    return WatchdogConfig.model_validate_json(record.watchdog_path.read_text(encoding="utf-8"))


def start(record: ExperimentRecord, config: WatchdogConfig) -> proc.Process:
    """Write `watchdog.json` and start the watchdog in a session of its own."""
    files.atomic_write_text(record.watchdog_path, config.model_dump_json(indent=2) + "\n")
    log = record.run_dir / "watchdog.log"
    return proc.spawn(
        [sys.executable, "-m", "code_runner.monitor.watchdog", str(record.run_dir.resolve())],
        cwd=record.run_dir,
        env=os.environ,
        stdout_path=log,
        stderr_path=log,
    )


def restart(record: ExperimentRecord) -> int:
    """Start a new watchdog for a record nobody holds (for gc: not our child); its pid."""
    done = proc.capture(
        [sys.executable, "-m", "code_runner.monitor.watchdog", "--fork", str(record.run_dir)],
        cwd=record.run_dir,
        env=os.environ,
        timeout_s=30.0,
    )
    return int(done.stdout.decode().strip() or 0) if done.ok else 0


def start_for(
    record: ExperimentRecord, spec: ExperimentSpec, launched: Launched, deadline_at: float
) -> proc.Process:
    """The watchdog of a command this process just launched."""
    config = WatchdogConfig(
        monitor_pid=os.getpid(),
        monitor_started_at=started_at(os.getpid()),
        job_pid=launched.pid,
        job_started_at=started_at(launched.pid),
        token=launched.token,
        deadline_at=deadline_at,
        grace_s=spec.grace_s,
        poll_s=min(5.0, spec.interval_s),
    )
    return start(record, config)


class Tree:
    """The command's process tree as the watchdog knows it: every member ever seen."""

    def __init__(self, config: WatchdogConfig) -> None:
        self.config = config
        self.members: dict[int, float] = {config.job_pid: config.job_started_at}
        self._seen: set[int] = set()

    def scan(self, *, monitor_alive: bool) -> None:
        """Remember descendants of the command and of known members, processes carrying
        the token, and (while the monitor lives) anything re-parented to the monitor."""
        stats = _scan_proc()
        children: dict[int, list[int]] = {}
        for pid, st in stats.items():
            children.setdefault(st.ppid, []).append(pid)
        stack = [pid for pid in self.members if pid in stats]
        if monitor_alive:
            stack += [p for p in children.get(self.config.monitor_pid, []) if p != os.getpid()]
        while stack:
            pid = stack.pop()
            if pid not in self.members:
                self.members[pid] = started_at(pid)
            stack.extend(p for p in children.get(pid, []) if p not in self.members)
        for pid in stats.keys() - self._seen:
            if pid not in self.members and self._has_token(pid):
                self.members[pid] = started_at(pid)
        self._seen = set(stats)

    def _has_token(self, pid: int) -> bool:
        try:
            return psutil.Process(pid).environ().get(proc.TOKEN_ENV) == self.config.token
        except (psutil.Error, OSError):
            return False

    def alive(self) -> list[int]:
        return [pid for pid, at in self.members.items() if is_alive(pid, at)]

    def kill(self, grace_s: float) -> KillReport:
        """SIGTERM the command's group and every member, wait `grace_s`, SIGKILL the rest."""
        began = time.monotonic()
        self.scan(monitor_alive=False)
        targets = self.alive()
        self._signal(targets, signal.SIGTERM)
        alive = self._wait_gone(began + grace_s, signal.SIGTERM)
        needed = len(alive)
        if alive:
            alive = self._wait_gone(time.monotonic() + 5.0, signal.SIGKILL)
        return KillReport(
            signalled=len(targets),
            needed_sigkill=needed,
            last_gone_s=round(time.monotonic() - began, 3),
            survivors=tuple(alive),
        )

    def _signal(self, pids: list[int], sig: int) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.config.job_pid, sig)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def _wait_gone(self, deadline: float, sig: int) -> list[int]:
        while True:
            self.scan(monitor_alive=False)
            alive = self.alive()
            self._signal(alive, sig)  # newcomers too
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(_POLL_S)


def deadline_at(record: ExperimentRecord, config: WatchdogConfig) -> float:
    """The deadline in force: the monitor writes a moved one into `status.json`."""
    value = record.read_status().get("deadline_at")
    return float(value) if isinstance(value, int | float) else config.deadline_at


def hold(record: ExperimentRecord) -> str:
    """Watch until the record is finished; what happened, in a word."""
    config = load_config(record)
    tree = Tree(config)
    lost = False
    while not record.result_path.exists():
        monitor_alive = is_alive(config.monitor_pid, config.monitor_started_at)
        tree.scan(monitor_alive=monitor_alive)
        deadline = deadline_at(record, config)
        now = time.time()
        if monitor_alive:
            if now > deadline + config.grace_s + HUNG_MARGIN_S and tree.alive():
                record.emit(MonitorEvent.TIMEOUT, by="watchdog", note="the monitor is hung")
                tree.kill(config.grace_s)
            _sleep(config.poll_s)
            continue
        if not lost:
            lost = True
            record = ExperimentRecord.reopen(record.run_dir)  # count on from the last event
            record.emit(MonitorEvent.MONITOR_LOST, monitor_pid=config.monitor_pid)
        if not tree.alive():
            finish_orphan(record, timed_out=False, kill=None)
            return "finished"
        stopped = record.stop_reason()
        if stopped is not None:
            record.emit(MonitorEvent.SIGNAL_RECEIVED, by="watchdog", note=stopped)
            finish_orphan(record, timed_out=False, kill=tree.kill(config.grace_s), stopped=stopped)
            return "stopped"
        if now >= deadline:
            record.emit(MonitorEvent.TIMEOUT, by="watchdog", deadline_at=deadline)
            finish_orphan(record, timed_out=True, kill=tree.kill(config.grace_s))
            return "timed out"
        _sleep(min(config.poll_s, max(0.0, deadline - now)))
    return "monitor finished"


def _sleep(seconds: float) -> None:
    time.sleep(max(0.01, seconds))


def main(argv: list[str]) -> int:
    """Entry point: hold RUN_DIR's timeout; SIGHUP and SIGINT are ignored."""
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    fork = argv[:1] == ["--fork"]
    argv = argv[1:] if fork else argv
    if len(argv) != 1:
        print("usage: python -m code_runner.monitor.watchdog [--fork] RUN_DIR", file=sys.stderr)
        return 2
    record = ExperimentRecord.reopen(Path(argv[0]).resolve())
    if fork and _forked_parent(record):
        return 0
    print(f"watchdog {os.getpid()}: {hold(record)}", flush=True)
    return 0


def _forked_parent(record: ExperimentRecord) -> bool:
    """Fork; the parent prints the child's pid and is done, the child goes on alone."""
    pid = os.fork()
    if pid:
        print(pid, flush=True)
        return True
    os.setsid()
    log = os.open(record.run_dir / "watchdog.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    for fd in (1, 2):
        os.dup2(log, fd)
    os.close(log)
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
