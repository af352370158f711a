"""One exit-code rule for every way a process is started and watched.

A normal exit, a death by signal and a timeout read the same through `proc.run`, a spawned
`Process` (`wait` and `poll`), the monitor's `Launched`, an experiment's result and the
agent-CLI supervisor: N for exit N, 128+N for signal N, 124 for a timeout.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from rich.console import Console

from code_runner import proc
from code_runner.agents.cli_agents.supervisor import (
    SupervisedCommand,
    SupervisionLimits,
    supervise,
)
from code_runner.agents.cli_agents.translate import PlainTranslator
from code_runner.events import ListSink
from code_runner.monitor import Experiment, ExperimentRecord, PlainUI, build_spec, detect_type
from code_runner.monitor.launch import launch
from code_runner.monitor.spec import MIN_INTERVAL_ENV

PY = sys.executable
EXITS = "import sys; sys.exit(3)"
SIGNALLED = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
HANGS = "import time; time.sleep(60)"

CASES = [  # (code, timeout_s, exit code, signal)
    pytest.param(EXITS, 30.0, 3, None, id="exit"),
    pytest.param(SIGNALLED, 30.0, 128 + signal.SIGTERM, signal.SIGTERM, id="signal"),
    pytest.param(HANGS, 0.5, proc.TIMEOUT_EXIT_CODE, signal.SIGTERM, id="timeout"),
]


def _env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@pytest.mark.parametrize(("code", "timeout_s", "exit_code", "sig"), CASES)
def test_run_and_a_spawned_process_agree(
    tmp_path: Path, code: str, timeout_s: float, exit_code: int, sig: int | None
) -> None:
    ran = proc.run([PY, "-c", code], cwd=tmp_path, env=_env(), timeout_s=timeout_s)
    process = proc.spawn(
        [PY, "-c", code],
        cwd=tmp_path,
        env=_env(),
        stdout_path=tmp_path / "out",
        stderr_path=tmp_path / "err",
    )
    waited = process.wait(timeout_s)
    assert ran.exit_code == waited.exit_code == process.poll() == exit_code
    assert ran.signal == waited.signal == sig
    assert ran.timed_out == waited.timed_out == (exit_code == proc.TIMEOUT_EXIT_CODE)


@pytest.mark.parametrize(("code", "timeout_s", "exit_code", "sig"), CASES)
def test_the_monitor_agrees(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    code: str,
    timeout_s: float,
    exit_code: int,
    sig: int | None,
) -> None:
    monkeypatch.setenv(MIN_INTERVAL_ENV, "0.05")
    spec = build_spec(
        {},
        {
            "command": (PY, "-c", code),
            "cwd": str(tmp_path),
            "timeout": f"{timeout_s}s",
            "interval": "0.1",
            "grace": "1s",
            "type": "generic",
        },
        source="test",
    )
    quiet = Console(file=io.StringIO())
    record = ExperimentRecord(tmp_path / "run")
    result = Experiment(spec, detect_type(spec.argv, tmp_path), record, PlainUI(quiet, quiet)).run()
    assert result.exit_code == exit_code
    assert result.signal == sig


@pytest.mark.parametrize(("code", "exit_code"), [(EXITS, 3), (SIGNALLED, 128 + signal.SIGTERM)])
def test_launched_and_the_supervisor_poll_the_same_codes(
    tmp_path: Path, code: str, exit_code: int
) -> None:
    launched = launch(
        [PY, "-c", code],
        cwd=tmp_path,
        env=_env(),
        stdout_path=tmp_path / "out",
        stderr_path=tmp_path / "err",
    )
    deadline = time.monotonic() + 30
    while launched.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    launched.close()
    assert launched.poll() == exit_code
    command = SupervisedCommand(
        argv=(PY, "-c", code),
        cwd=tmp_path,
        env=_env(),
        stdout_path=tmp_path / "cli.out",
        stderr_path=tmp_path / "cli.err",
    )
    done = supervise(command, SupervisionLimits(30, 30), PlainTranslator(ListSink()))
    assert done.exit_code == exit_code


def test_exit_code_of_is_the_shell_rule() -> None:
    assert proc.exit_code_of(0) == 0
    assert proc.exit_code_of(2) == 2
    assert proc.exit_code_of(-9) == 137
    assert proc.exit_code_of(-15, timed_out=True) == proc.TIMEOUT_EXIT_CODE
    assert proc.signal_of(-9) == 9 and proc.signal_of(0) is None and proc.signal_of(None) is None


def test_kill_tree_ends_an_escaped_daemon(tmp_path: Path) -> None:
    proc.become_subreaper()
    code = (
        "import subprocess, sys, time\n"
        "d = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "print(d.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    process = proc.spawn(
        [PY, "-c", code],
        cwd=tmp_path,
        env=_env(),
        stdout_path=tmp_path / "out",
        stderr_path=tmp_path / "err",
    )
    deadline = time.monotonic() + 30
    while not (tmp_path / "out").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.02)
    daemon = int((tmp_path / "out").read_text().split()[0])
    assert process.kill_tree(0.5) >= 1
    assert process.poll() == 128 + signal.SIGTERM
    assert not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == "zombie"


def test_hand_terminal_returns_the_exit_code_and_leaves_nothing(tmp_path: Path) -> None:
    proc.become_subreaper()
    marker = tmp_path / "daemon.pid"
    code = (
        "import subprocess, sys\n"
        "d = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        f"open({str(marker)!r}, 'w').write(str(d.pid))\n"
        "sys.exit(5)\n"
    )
    assert proc.hand_terminal([PY, "-c", code], env=_env(), grace_s=0.5) == 5
    daemon = int(marker.read_text())
    assert not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == "zombie"


@pytest.mark.parametrize("size", [0, 5, 40, 41, 10_000])
def test_head_and_tail_read_the_same_by_path_and_by_descriptor(tmp_path: Path, size: int) -> None:
    """The resident sandbox reads a command's output back by descriptor (`read_head_tail_fd`);
    it must be what `read_head_tail` of the file's path gives, and leave the offset alone
    (the command's writes share it)."""
    path = tmp_path / "out"
    data = bytes(ord("a") + i % 26 for i in range(size))
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    try:
        os.lseek(fd, 7, os.SEEK_SET)
        by_fd = proc.read_head_tail_fd(fd, 20, 20)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 7
    finally:
        os.close(fd)
    assert by_fd == proc.read_head_tail(path, 20, 20)
    text, total = by_fd
    assert total == size
    if size <= 40:
        assert text == data.decode()
    else:
        omitted = f"\n[... {size - 40} bytes omitted ...]\n"
        assert text == data[:20].decode() + omitted + data[-20:].decode()
