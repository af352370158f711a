"""The leftover scan after a command reads the runner's own process tree, never every
process on the machine: a daemon that left the command's session is still found and
killed, and the processes of others are neither read nor touched."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from code_runner import proc
from code_runner.proc import tree

pytestmark = pytest.mark.integration

ENV = {"PATH": os.environ["PATH"]}


@pytest.fixture
def stranger() -> Iterator[int]:
    """A process outside any command's tree, carrying no token (re-parented to init, or to
    this process once it is a child subreaper)."""
    out = subprocess.run(
        ["setsid", "sh", "-c", "sleep 300 </dev/null >/dev/null 2>&1 & echo $!"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    pid = int(out)
    yield pid
    os.kill(pid, 9)


def _machine_walk_forbidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the leftover scan walked every process on the machine")

    monkeypatch.setattr(psutil.Process, "children", refuse)
    monkeypatch.setattr(psutil, "process_iter", refuse)


def test_descendants_are_the_tree_below_a_process_and_nothing_else() -> None:
    code = (
        "import subprocess, time\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "subprocess.Popen(['sh', '-c', 'sleep 300; true'])\n"
        "time.sleep(300)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        expected: set[int] = set()
        while len(expected) < 3 and time.monotonic() < deadline:  # sleep, sh and its sleep
            expected = {p.pid for p in psutil.Process(child.pid).children(recursive=True)}
            time.sleep(0.02)
        assert len(expected) == 3
        assert set(tree.descendants(child.pid) or []) == expected
    finally:
        for pid in psutil.Process(child.pid).children(recursive=True):
            pid.kill()
        child.kill()
        child.wait()


def test_a_daemon_that_left_the_session_is_killed_without_a_machine_wide_scan(
    tmp_path: Path, stranger: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc.become_subreaper()
    pid_file = tmp_path / "pid"
    code = (
        "import subprocess; "
        "p = subprocess.Popen(['setsid', 'sleep', '300']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))"
    )
    _machine_walk_forbidden(monkeypatch)
    result = proc.run([sys.executable, "-c", code], cwd=tmp_path, env=ENV, timeout_s=30)
    assert result.exit_code == 0 and result.killed_descendants >= 1
    daemon = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(daemon) and time.monotonic() < deadline:
        if psutil.Process(daemon).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.02)
    gone = not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == "zombie"
    assert gone, "a setsid daemon outlived its command"
    assert psutil.Process(stranger).status() != psutil.STATUS_ZOMBIE, "a stranger was killed"


def test_output_needs_no_scratch_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    result = proc.run(["sh", "-c", "echo out; echo err >&2"], cwd=tmp_path, env=ENV, timeout_s=30)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "out\n", "err\n")
    assert list(tmp_path.iterdir()) == []  # nothing was made, so nothing can be left
