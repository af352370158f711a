"""`code-runner stop RUN_DIR` for an experiment: end it from another terminal.

The request is a file in the run dir (`stop.json`), so it names who asked and survives a
monitor that is busy: the live monitor gets SIGTERM (it stops the command as for Ctrl-C and
reads the request to say why); when the monitor is gone, the watchdog that holds the hard
timeout reads the same file, ends the tree and finishes the record. Either way the run ends
`stopped_by_user`, and its success is the job's own criteria.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import code_runner.monitor.watchdog as watchdog
from code_runner import files
from code_runner.clock import utc_now
from code_runner.errors import EnvironmentProblem
from code_runner.monitor.record import ExperimentRecord


@dataclass(frozen=True)
class StopRequest:
    """What `stop` did: who will end the run (`monitor`, `watchdog`), or that it had ended."""

    already_finished: bool
    state: str
    by: str | None = None
    pid: int | None = None


def request_stop(run_dir: Path, *, via: str = "cli", by: str | None = None) -> StopRequest:
    """Ask the run in `run_dir` to stop; EnvironmentProblem when nobody holds it any more.

    `via` says how the request came (`cli`, `web`, `mcp`) and `by` who sent it, both kept in
    `stop.json`; a request from the dashboard is named so in the record's stop reason."""
    record = ExperimentRecord.reopen(run_dir)
    status = record.read_status()
    state = str(status.get("state", "?"))
    if record.result_path.exists() or status.get("finished"):
        return StopRequest(already_finished=True, state=state)
    try:
        config = watchdog.load_config(record)
    except (OSError, ValueError):
        config = None
    monitor_pid = status.get("monitor_pid")
    monitor_alive = isinstance(monitor_pid, int) and (
        watchdog.is_alive(monitor_pid, config.monitor_started_at)
        if config is not None and config.monitor_pid == monitor_pid
        else is_monitor(monitor_pid)
    )
    watchdog_pid = status.get("watchdog_pid")
    watchdog_alive = isinstance(watchdog_pid, int) and _is_watchdog(watchdog_pid)
    if not (monitor_alive or watchdog_alive):
        raise EnvironmentProblem(
            f"the experiment in {run_dir} is not finished ({state}), but neither its monitor "
            f"(pid {monitor_pid}) nor its watchdog (pid {watchdog_pid}) is running.",
            fix="run `code-runner gc`: it finds the orphaned record, ends what is left of the "
            "command and finishes the record.",
        )
    request = {"requested_at": utc_now(), "by_pid": os.getpid(), "via": via, "by": by}
    files.atomic_write_json(record.stop_request_path, request)
    if monitor_alive:
        assert isinstance(monitor_pid, int)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(monitor_pid, signal.SIGTERM)
        return StopRequest(already_finished=False, state=state, by="monitor", pid=monitor_pid)
    assert isinstance(watchdog_pid, int)
    return StopRequest(already_finished=False, state=state, by="watchdog", pid=watchdog_pid)


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_monitor(pid: object) -> bool:
    """Is `pid` a live code-runner process (the monitor a status file names)?"""
    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    return any("code_runner" in word or "code-runner" in word for word in _cmdline(pid))


def _is_watchdog(pid: int) -> bool:
    return "code_runner.monitor.watchdog" in _cmdline(pid)
