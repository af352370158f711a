"""SIGTERM to `code-runner exec`: the tree is stopped and the record completed, even when a
second SIGTERM arrives while the tree is still being killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from code_runner.monitor import load_result

pytestmark = pytest.mark.integration

PY = sys.executable
STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('up', flush=True)\n"
    "time.sleep(300)\n"
)


def _wait_for_output(path: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} stayed empty")


def test_a_repeated_sigterm_does_not_cut_the_kill_short(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    monitor = subprocess.Popen(
        [
            *(PY, "-m", "code_runner.cli.exec_cmd", "--run-dir", str(run_dir)),
            *("--interval", "0.1", "--grace", "1.5", "--yes", "--", PY, str(script)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "CODE_RUNNER_MIN_INTERVAL_S": "0.05"},
        text=True,
    )
    _wait_for_output(run_dir / "stdout.log")
    child = [p.pid for p in psutil.Process(monitor.pid).children(recursive=True)]
    monitor.send_signal(signal.SIGTERM)
    time.sleep(0.4)  # the child ignores SIGTERM: the monitor is inside its grace period
    monitor.send_signal(signal.SIGTERM)
    _, err = monitor.communicate(timeout=30)
    assert monitor.returncode == 130, err
    assert "interrupted (SIGTERM)" in err and "Traceback" not in err
    result = load_result(run_dir)
    assert result.interrupted and result.state.value == "stopped_by_user"
    assert result.kill is not None and result.kill.needed_sigkill >= 1 and not result.kill.survivors
    for pid in child:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
