from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil

from code_runner import proc

ENV = {"PATH": os.environ["PATH"]}


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_exit_code_and_output_are_values(tmp_path: Path) -> None:
    result = proc.run(
        py("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"),
        cwd=tmp_path,
        env=ENV,
        timeout_s=30,
    )
    assert result.exit_code == 3
    assert not result.ok
    assert result.stdout.strip() == "out"
    assert result.stderr.strip() == "err"
    assert not result.timed_out


def test_stdin_is_dev_null(tmp_path: Path) -> None:
    result = proc.run(
        py("import sys; print(repr(sys.stdin.read()))"), cwd=tmp_path, env=ENV, timeout_s=30
    )
    assert result.stdout.strip() == "''"


def test_timeout_is_124_and_kills_the_group(tmp_path: Path) -> None:
    started = time.monotonic()
    result = proc.run(
        ["bash", "-c", "sleep 30 & sleep 30; wait"],
        cwd=tmp_path,
        env=ENV,
        timeout_s=0.5,
        grace_s=0.5,
    )
    assert result.timed_out
    assert result.exit_code == proc.TIMEOUT_EXIT_CODE
    assert "timed out" in result.describe()
    assert time.monotonic() - started < 10


def test_setsid_escapee_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = (
        "import subprocess, sys; "
        "p = subprocess.Popen(['setsid', 'sleep', '60']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))"
    )
    proc.become_subreaper()
    result = proc.run(py(code), cwd=tmp_path, env=ENV, timeout_s=30)
    assert result.exit_code == 0
    pid = int(pid_file.read_text())
    assert result.killed_descendants >= 1
    deadline = time.monotonic() + 5
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    alive = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    assert not alive, "a setsid daemon outlived its command"


def test_output_is_capped_with_head_and_tail(tmp_path: Path) -> None:
    code = "print('FIRST'); [print('x' * 100) for _ in range(5000)]; print('LAST')"
    result = proc.run(py(code), cwd=tmp_path, env=ENV, timeout_s=30, head_bytes=100, tail_bytes=100)
    assert result.stdout.startswith("FIRST")
    assert result.stdout.rstrip().endswith("LAST")
    assert "bytes omitted" in result.stdout
    assert result.stdout_size > 400_000


def test_runaway_output_is_stopped(tmp_path: Path) -> None:
    result = proc.run(
        py("import sys\nwhile True: sys.stdout.write('y' * 65536)"),
        cwd=tmp_path,
        env=ENV,
        timeout_s=30,
        max_output_bytes=2_000_000,
        grace_s=0.5,
    )
    assert result.output_limited
    assert not result.ok


def test_missing_program_is_127_not_an_exception(tmp_path: Path) -> None:
    result = proc.run(["/nonexistent/program"], cwd=tmp_path, env=ENV, timeout_s=5)
    assert result.exit_code == 127
    assert "could not start" in result.stderr


def test_capture_timeout(tmp_path: Path) -> None:
    result = proc.capture(["sleep", "10"], cwd=tmp_path, env=ENV, timeout_s=0.3)
    assert result.timed_out and result.exit_code == 124
