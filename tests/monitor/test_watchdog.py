"""Bounded whatever happens to the terminal: SIGHUP, a SIGKILLed monitor, a dead watchdog.

Real monitors run as subprocesses; the job writes its own pid and its helper's pid, and the
tests check through /proc that the job ran until its timeout and that nothing survived it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from code_runner.monitor.orphans import collect_orphans, registry_dir
from code_runner.monitor.result import load_result
from tests.helpers.monitor import PY, wait_for
from tests.helpers.monitor_jobs import BASE, EXEC, JOB, dead
from tests.helpers.monitor_jobs import event_kinds as _events
from tests.helpers.monitor_jobs import job_pids as _pids
from tests.helpers.monitor_jobs import read_status as _status
from tests.helpers.monitor_jobs import start_monitor as _start

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("fast_checks"),
    pytest.mark.usefixtures("no_leftover_jobs"),
]


def test_sighup_detaches_the_monitor_which_still_enforces_the_timeout(
    tmp_path: Path, pty_session: Any
) -> None:
    run_dir = tmp_path / "run"
    (tmp_path / "job.py").write_text(JOB)
    s = pty_session(
        ["--yes", "--run-dir", str(run_dir), *BASE, "--timeout", "4", "--", PY, "job.py"]
    )
    s.expect("│ working")  # the live tail on the terminal
    job, helper = _pids(tmp_path)
    began = time.monotonic()
    os.killpg(s.proc.pid, signal.SIGHUP)  # what closing the terminal / tmux kill-session does
    assert wait_for(lambda: "detached" in _events(run_dir), 5)
    os.close(s.master)  # the terminal is gone for good
    time.sleep(0.5)
    assert s.proc.poll() is None, "SIGHUP must not end the monitor"
    assert not dead(job) and not dead(helper)  # the job runs on until its timeout
    code = s.proc.wait(timeout=20)
    assert code == 124
    assert time.monotonic() - began >= 2.0
    result = load_result(run_dir)
    assert result.state.value == "timeout"
    assert result.kill is not None and result.kill.survivors == ()
    assert dead(job) and dead(helper)
    assert _status(run_dir)["finished"] is True and _status(run_dir)["state"] == "timeout"
    s.master = os.open(os.devnull, os.O_RDONLY)  # the fixture closes it


def test_monitor_sigkilled_watchdog_holds_the_timeout_and_finishes_the_record(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    # a timeout long enough that `status` (two CLI starts) still sees the run live on a busy
    # machine: at 4 s it had timed out before the first `status` answered
    monitor = _start(tmp_path, run_dir, "15")
    job, helper = _pids(tmp_path)
    status = _status(run_dir)
    assert status["monitor_pid"] == monitor.pid and status["pid"] == job
    watchdog = status["watchdog_pid"]
    monitor.kill()  # as the OOM killer would
    monitor.wait()
    time.sleep(1.0)
    assert not dead(job) and not dead(helper), "only the hard timeout kills"
    assert not (run_dir / "result.json").exists()
    shown = subprocess.run(
        [PY, "-m", "code_runner", "status", str(run_dir)], capture_output=True, text=True
    )
    assert f"monitor pid {monitor.pid} is gone; its watchdog (pid {watchdog})" in shown.stdout
    as_json = subprocess.run(
        [PY, "-m", "code_runner", "status", "--json", str(run_dir)], capture_output=True
    )
    assert json.loads(as_json.stdout)["status"]["watchdog_pid"] == watchdog
    assert wait_for(lambda: (run_dir / "result.json").exists(), 45)
    result = load_result(run_dir)
    assert result.state.value == "timeout" and result.exit_code == 124
    assert result.stop_reason is not None and "watchdog" in result.stop_reason
    assert result.kill is not None and result.kill.survivors == ()
    assert result.kill.signalled >= 2
    assert result.duration_s >= 14.5
    assert wait_for(lambda: dead(job) and dead(helper), 5)
    assert wait_for(lambda: dead(watchdog), 5)
    assert _status(run_dir)["finished"] is True
    kinds = _events(run_dir)
    assert "monitor_lost" in kinds and kinds[-1] == "run_finished"
    report = (run_dir / "experiment_result.md").read_text()
    assert "watchdog" in report


def test_gc_finds_a_record_whose_monitor_and_watchdog_are_dead(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    monitor = _start(tmp_path, run_dir, "6")
    job, helper = _pids(tmp_path)
    guard = _status(run_dir)["watchdog_pid"]
    os.kill(guard, signal.SIGKILL)
    monitor.kill()
    monitor.wait()
    assert wait_for(lambda: dead(guard))
    assert list(registry_dir().glob("*.json"))
    dry = collect_orphans(dry_run=True)
    assert [o.run_dir for o in dry] == [str(run_dir.resolve())]
    assert dry[0].action == "would restart its watchdog"
    assert not dead(job)  # a dry run touches nothing
    found = collect_orphans()
    assert found[0].action.startswith("restarted its watchdog")
    # the new watchdog holds the same deadline and finishes the record
    assert wait_for(lambda: (run_dir / "result.json").exists(), 20)
    assert load_result(run_dir).state.value == "timeout"
    assert wait_for(lambda: dead(job) and dead(helper), 5)
    assert collect_orphans() == []
    assert not list(registry_dir().glob("*.json"))  # finished records leave the list


def test_gc_finishes_a_record_past_its_deadline(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    monitor = _start(tmp_path, run_dir, "1.5")
    job, helper = _pids(tmp_path)
    guard = _status(run_dir)["watchdog_pid"]
    os.kill(guard, signal.SIGKILL)
    monitor.kill()
    monitor.wait()
    assert wait_for(lambda: dead(guard))
    time.sleep(2.0)  # the deadline passes with nobody holding it
    assert not dead(job)
    listed = subprocess.run(
        [PY, "-m", "code_runner", "gc", "--json"], capture_output=True, text=True, check=False
    )
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)["experiments"]
    assert found[0]["run_dir"] == str(run_dir.resolve())
    assert found[0]["action"] == "finished it as timeout" and found[0]["killed"] >= 2
    assert dead(job) and dead(helper)
    assert load_result(run_dir).kill is not None
    shown = subprocess.run(
        [PY, "-m", "code_runner", "status", str(run_dir)], capture_output=True, text=True
    )
    assert "TIMEOUT" in shown.stdout


def test_a_setsid_escapee_without_the_token_is_killed_at_the_timeout(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    line = "(env -i setsid sleep 300 & echo $! > escapee.txt); sleep 300"
    done = subprocess.run(
        [
            *EXEC,
            "--yes",
            "--run-dir",
            str(run_dir),
            "--cwd",
            str(tmp_path),
            *BASE,
            "--timeout",
            "1.5",
            "--",
            "bash",
            "-c",
            line,
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 124, done.stderr
    escapee = int((tmp_path / "escapee.txt").read_text())
    result = load_result(run_dir)
    assert result.kill is not None and result.kill.survivors == ()
    assert dead(escapee)


def test_detach_prints_the_run_dir_and_the_run_goes_on(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            *EXEC,
            "--detach",
            "--yes",
            "--run-dir",
            str(run_dir),
            "--cwd",
            str(tmp_path),
            *BASE,
            "--",
            PY,
            "-c",
            "import os, time\nwhile not os.path.exists('go'): time.sleep(0.05)\nprint('done')",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(run_dir)
    # the job waits for `go`: exec returned while it runs, not when it ended
    assert not (run_dir / "result.json").exists()
    assert _status(run_dir)["state"] == "running"
    (tmp_path / "go").write_text("")
    watched = subprocess.run(
        [PY, "-m", "code_runner", "watch", "--interval", "0.1", "--timeout", "30", str(run_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "run_started" in watched.stdout and "COMPLETED (exit 0)" in watched.stdout
    shown = subprocess.run(
        [PY, "-m", "code_runner", "result", "--json", str(run_dir)],
        capture_output=True,
        check=False,
    )
    assert shown.returncode == 0 and json.loads(shown.stdout)["state"] == "completed"
    result = load_result(run_dir)
    assert result.state.value == "completed" and result.success
    assert (run_dir / "stdout.log").read_text() == "done\n"
