"""`code-runner stop RUN_DIR` on an experiment, from another terminal, through the real CLI.

A real monitor runs the job in a subprocess; `stop` is a second real process. Whoever holds
the run (the monitor, or the watchdog once the monitor is gone) ends the whole tree, and the
record says `stopped_by_user` and who asked. /proc shows nothing survived."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from code_runner.monitor.result import load_result
from tests.helpers.monitor import PY, wait_for
from tests.helpers.monitor_jobs import dead, job_pids, read_status, start_monitor

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("fast_checks"),
    pytest.mark.usefixtures("no_leftover_jobs"),
]


def _stop(run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "code_runner", "stop", *extra, str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_stop_ends_a_running_experiment_and_its_whole_tree(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    monitor = start_monitor(tmp_path, run_dir, "60")
    job, helper = job_pids(tmp_path)
    stopped = _stop(run_dir, "--json")
    assert stopped.returncode == 0, stopped.stderr
    answer = json.loads(stopped.stdout)
    assert answer == {"stopped": True, "by": "monitor", "state": "stopped_by_user"}
    assert monitor.wait(timeout=20) != 0  # the job's own criterion (exit 0) did not hold
    result = load_result(run_dir)
    assert result.state.value == "stopped_by_user" and not result.success
    assert result.stop_reason is not None
    assert result.stop_reason.startswith("stopped by `code-runner stop` (pid ")
    assert result.kill is not None and result.kill.survivors == ()
    assert wait_for(lambda: dead(job) and dead(helper), 5)
    assert read_status(run_dir)["finished"] is True
    assert "stopped_by_user" in (run_dir / "experiment_result.md").read_text().lower()


def test_stop_after_the_monitor_died_is_done_by_the_watchdog(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    monitor = start_monitor(tmp_path, run_dir, "60")
    job, helper = job_pids(tmp_path)
    guard = read_status(run_dir)["watchdog_pid"]
    monitor.kill()  # as the OOM killer would
    monitor.wait()
    assert not dead(job), "the job outlives its monitor"
    stopped = _stop(run_dir)
    assert stopped.returncode == 0, stopped.stderr
    assert f"its watchdog ends it, pid {guard}" in stopped.stdout
    assert "stopped_by_user" in stopped.stdout
    result = load_result(run_dir)
    assert result.state.value == "stopped_by_user"
    assert result.stop_reason is not None and "code-runner stop" in result.stop_reason
    assert result.kill is not None and result.kill.survivors == ()
    assert result.duration_s < 30  # it did not wait for the 60 s timeout
    assert wait_for(lambda: dead(job) and dead(helper) and dead(guard), 5)


def test_stop_on_a_finished_experiment_changes_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [PY, "-m", "code_runner", "exec", "--yes", "--run-dir", str(run_dir), "--", "true"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    again = _stop(run_dir)
    assert again.returncode == 0
    assert "already finished (completed); nothing to stop" in again.stdout
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_stop_when_nobody_holds_the_run_points_at_gc(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    monitor = start_monitor(tmp_path, run_dir, "60")
    job, _ = job_pids(tmp_path)
    os.kill(read_status(run_dir)["watchdog_pid"], signal.SIGKILL)
    monitor.kill()
    monitor.wait()
    assert wait_for(lambda: dead(read_status(run_dir)["watchdog_pid"]))
    stopped = _stop(run_dir)
    assert stopped.returncode != 0
    assert "neither its monitor" in stopped.stderr and "code-runner gc" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert not (run_dir / "stop.json").exists()  # nothing was asked of nobody
    assert not dead(job)  # the no_leftover_jobs fixture ends it
