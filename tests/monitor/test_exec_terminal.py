"""Terminal interaction for real: a pseudo-terminal runs `python -m code_runner.cli.exec_cmd`,
the test reads the screen and types answers, and the record shows they were acted on."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from code_runner.monitor.result import load_result
from tests.helpers.monitor import PY, gone

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fast_checks")]

COLOUR_SGR = re.compile(r"\x1b\[(?:[0-9]+;)*(?:3[0-7]|9[0-7]|38)(?:;[0-9]+)*m")
BASE = ["--interval", "0.1", "--stall-checks", "2", "--timeout", "30", "--grace", "0.3"]


def _events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_confirm_tail_diagnose_then_kill(tmp_path: Path, pty_session: Any) -> None:
    run_dir = tmp_path / "run"
    code = (
        "import time\nprint('hello', flush=True)\ntime.sleep(1.2)\n"
        "print('again', flush=True)\ntime.sleep(60)"
    )
    s = pty_session(["--run-dir", str(run_dir), *BASE, "--", PY, "-c", code], no_color=False)
    s.expect("Proceed? [y/N]")
    assert "I'm about to run:" in s.text() and str(tmp_path) in s.text()
    s.type("y")
    s.expect("│ hello")  # the live tail
    s.expect("D. Show the last output lines")
    assert "[STALL_SUSPECTED] detected at check #" in s.text()
    assert "A. Continue monitoring" in s.text() and "B. Kill the process" in s.text()
    assert COLOUR_SGR.search(s.text())  # colour on a terminal when NO_COLOR is not set
    s.type("D")
    s.expect("Processes in the tree")
    s.expect("│ again")  # output resumed: the stall episode ended
    screen_before = s.text().count("[STALL_SUSPECTED]")
    deadline = time.monotonic() + 10
    while s.text().count("[STALL_SUSPECTED]") == screen_before and time.monotonic() < deadline:
        s._read(0.05)  # wait for the second, separate stall episode
    s.type("B")
    code_ = s.wait()
    assert code_ == 1, s.text()
    result = load_result(run_dir)
    assert result.state.value == "stopped_by_user" and result.stop_reason == "killed by the user"
    assert [a.action for a in result.answers] == ["show_diagnosis", "kill"]
    assert result.kill is not None and result.kill.survivors == ()
    assert "answer" in [e["kind"] for e in _events(run_dir)]


def test_repeat_once_then_quiet_and_adjust_the_timeout(tmp_path: Path, pty_session: Any) -> None:
    run_dir = tmp_path / "run"
    code = "import time; print('x', flush=True); time.sleep(60)"
    s = pty_session(["--run-dir", str(run_dir), *BASE, "--", PY, "-c", code], no_color=True)
    s.expect("Proceed? [y/N]")
    s.type("yes")
    s.expect("[STALL_SUSPECTED] (repeated)")
    time.sleep(0.6)  # six more checks: no third alert
    s._read(0.1)
    assert s.text().count("[STALL_SUSPECTED]") == 2
    s.type("C")
    s.expect("Type new settings as key=value")
    s.type("timeout=2 stall_checks=50")
    s.expect("Settings changed")
    assert s.wait() == 124
    assert "\x1b[1m" in s.text() and not COLOUR_SGR.search(s.text())  # NO_COLOR: no colour
    adjusted = [e for e in _events(run_dir) if e["kind"] == "thresholds_adjusted"]
    assert adjusted and adjusted[0]["changes"] == {"timeout_s": 2.0, "stall_checks": 50}
    result = load_result(run_dir)
    assert result.state.value == "timeout" and result.duration_s < 4


TRAIN = """
import time
values = [2.0 - 0.1 * i for i in range(10)] + [1.0] * 30 + [0.5, 0.4, 0.3]
try:
    for step, loss in enumerate(values):
        print(f"step={step} loss={loss:.3f}", flush=True)
        time.sleep(0.05)
    while True:
        print("step=99 loss=0.300", flush=True)
        time.sleep(0.05)
except KeyboardInterrupt:
    print("checkpoint saved", flush=True)
"""


def test_plateau_continue_then_early_stop(tmp_path: Path, pty_session: Any) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    run_dir = tmp_path / "run"
    s = pty_session(
        [
            "--run-dir",
            str(run_dir),
            "--interval",
            "0.1",
            "--patience",
            "4",
            "--timeout",
            "30",
            "--",
            PY,
            "train.py",
        ]
    )
    s.expect("Proceed? [y/N]")
    s.type("y")
    s.expect("D. Early stop: send SIGINT")
    s.type("A")
    s.expect("Continuing to monitor.")
    s.expect("│ step=42")  # improvements ended the first plateau
    deadline = time.monotonic() + 10
    while s.text().count("[METRIC_PLATEAU]") < 2 and time.monotonic() < deadline:
        s._read(0.05)
    assert s.text().count("[METRIC_PLATEAU]") == 2
    s.type("D")
    assert s.wait() == 0  # the job saved and exited 0, as asked: its criteria hold
    result = load_result(run_dir)
    assert result.state.value == "stopped_by_user" and result.success
    assert result.stop_reason == "early stop requested by the user (SIGINT sent)"
    assert "checkpoint saved" in (run_dir / "stdout.log").read_text()
    assert [a.action for a in result.answers] == ["continue", "early_stop"]
    assert not any(a.repeated for a in result.alerts)  # answered alerts are not repeated


def test_uncertain_type_is_asked_and_declining_starts_nothing(
    tmp_path: Path, pty_session: Any
) -> None:
    run_dir = tmp_path / "run"
    marker = tmp_path / "ran"
    s = pty_session(["--run-dir", str(run_dir), "--", "touch", str(marker), "--epochs", "--n-sims"])
    s.expect("uncertain")
    s.type("simulation")
    s.expect("Proceed? [y/N]")
    s.type("n")
    assert s.wait() == 1
    assert "Not started." in s.text()
    assert not marker.exists() and not run_dir.exists()
    assert gone(s.proc.pid)
