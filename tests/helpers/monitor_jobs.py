"""A long job under a real monitor subprocess, and checks through /proc that it is gone.

The job starts a helper in its own session (as DataLoader workers or a daemon would),
writes both pids to `pids.txt`, then works forever: only the hard timeout, or a person,
may end it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.monitor import PY, wait_for

JOB = """
import os, subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                          start_new_session=True)
open("pids.txt", "w").write(f"{os.getpid()} {helper.pid}")
while True:
    print("working", flush=True)
    time.sleep(0.2)
"""
EXEC = [PY, "-m", "code_runner.cli.exec_cmd"]
BASE = ["--interval", "0.1", "--grace", "0.3"]


def end_leftover_jobs(tmp_path: Path) -> None:
    """End what pids.txt names, only while it still runs in `tmp_path` (a reused pid is
    never touched): a failing test must not leave its job running."""
    with contextlib.suppress(OSError, ValueError):
        for pid in [int(p) for p in (tmp_path / "pids.txt").read_text().split()]:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cwd").resolve() == tmp_path.resolve():
                    os.kill(pid, signal.SIGKILL)


def job_pids(tmp_path: Path) -> list[int]:
    assert wait_for(
        lambda: (tmp_path / "pids.txt").exists() and (tmp_path / "pids.txt").read_text()
    )
    return [int(p) for p in (tmp_path / "pids.txt").read_text().split()]


def dead(pid: int) -> bool:
    """No live process has this pid (/proc): gone, or a zombie (this test process may be the
    subreaper a killed monitor's orphans were re-parented to; it reaps them here)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    if state == "Z":
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return True
    return False


def read_status(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "status.json").read_text())
    return data


def event_kinds(run_dir: Path) -> list[str]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [json.loads(line)["kind"] for line in lines]


def start_monitor(tmp_path: Path, run_dir: Path, timeout: str) -> subprocess.Popen[bytes]:
    """`exec` of JOB in its own session; returns once its watchdog is up."""
    (tmp_path / "job.py").write_text(JOB)
    monitor = subprocess.Popen(
        [
            *EXEC,
            "--yes",
            "--run-dir",
            str(run_dir),
            "--cwd",
            str(tmp_path),
            *BASE,
            "--timeout",
            timeout,
            "--",
            PY,
            "job.py",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert wait_for(
        lambda: (run_dir / "status.json").exists() and read_status(run_dir).get("watchdog_pid")
    )
    return monitor
