"""`code-runner answer RUN_DIR OPTION`: a real monitor's alert answered from another process.

The job goes silent, the monitor raises STALL_SUSPECTED, and a second process answers it
through the run dir: D shows the diagnosis (the same answer twice acts once), a wrong letter
or a C without settings is refused, C changes the timeout, B kills the tree. The record
keeps who answered and how."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from code_runner.errors import UsageError
from code_runner.monitor.answers import request_answer, wait_for_outcome
from code_runner.monitor.result import load_result
from tests.helpers.monitor import PY, wait_for
from tests.helpers.monitor_jobs import read_status

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fast_checks")]


def _answer(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "code_runner", "answer", str(run_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_answers_through_the_run_dir_act_once_and_are_recorded(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    argv = [PY, "-m", "code_runner", "exec", "--yes", "--interval", "0.1", "--stall-checks"]
    argv += ["2", "--timeout", "60", "--run-dir", str(run_dir), "--cwd", str(tmp_path)]
    monitor = subprocess.Popen(
        [*argv, "--", "sleep", "60"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_for(
            lambda: (run_dir / "status.json").exists() and read_status(run_dir)["pending_alert"],
            30,
        )
        shown = _answer(run_dir, "D", "--json")
        assert shown.returncode == 0, shown.stderr
        first = json.loads(shown.stdout)
        assert first["fresh"] is True and first["acted"] is True
        assert "Processes in the tree" in first["said"][0]
        again = _answer(run_dir, "d", "--alert", first["answer"].rsplit("-", 1)[0])
        assert again.returncode == 0 and "already answered" in again.stdout
        with pytest.raises(UsageError, match="not an answer to STALL_SUSPECTED"):
            request_answer(run_dir, "X", via="cli")
        with pytest.raises(UsageError, match="--set"):
            request_answer(run_dir, "C", via="cli")
        asked = request_answer(run_dir, "C", via="cli", settings="timeout=50")
        adjusted = wait_for_outcome(run_dir, asked, 10)
        assert adjusted.outcome is not None and "timeout_s" in str(adjusted.outcome["said"])
        assert wait_for(lambda: read_status(run_dir)["timeout_s"] == 50.0, 5)
        killed = _answer(run_dir, "B")
        assert killed.returncode == 0, killed.stderr
        assert monitor.wait(timeout=30) != 0
    finally:
        if monitor.poll() is None:
            monitor.kill()
            monitor.wait()
    result = load_result(run_dir)
    assert result.state.value == "stopped_by_user" and result.stop_reason == "killed by the user"
    actions = [(a.action, a.via) for a in result.answers]
    assert actions == [
        ("show_diagnosis", "cli"),
        ("adjust", "cli"),
        ("adjusted", "cli"),
        ("kill", "cli"),
    ]
    assert all(a.by.endswith(")") and "(pid " in a.by for a in result.answers)
    assert "via cli by" in (run_dir / "experiment_result.md").read_text()
    with pytest.raises(UsageError, match="already finished"):
        request_answer(run_dir, "B", via="cli")
    with pytest.raises(UsageError, match="no experiment record"):
        request_answer(tmp_path, "B", via="cli")
