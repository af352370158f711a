"""An apply or a reject takes the run's lock: one at a time, and never while the run writes.

Each attack is two real `code-runner` processes. A second apply while the first is landing
the patch, and an apply or a reject of a task whose run is still going, are refused with
exit 3 and a message naming the held lock; the source gets exactly one commit (or none),
and the first run's record stays its own."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.attacks import held
from tests.helpers.git import git
from tests.helpers.tasks import FIXED_BOTH, calc_repo, run_cli, write, write_task

pytestmark = pytest.mark.integration

AUTHOR = "Ann <ann@example.com>"
HELD = "is held"


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "code_runner", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_until_held(lock: Path, first: subprocess.Popen[str]) -> None:
    """Until `first` holds the lock (a flock we cannot take), so the race is decided."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and first.poll() is None:
        if lock.exists():
            fd = os.open(lock, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            finally:
                os.close(fd)
        time.sleep(0.02)
    raise AssertionError(f"the first process never held {lock}")


def _finished(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_two_applies_at_once_land_one_commit(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    # the apply's DoD, in the source (bound at its own path), takes long enough for two more
    # `code-runner` processes to start on a loaded machine; the run's DoD does not wait
    slow = f"case $PWD in {source}) sleep 20;; esac; grep -q 'a [*] b' calc.py"
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]], command=slow)
    assert run_cli("run", str(spec)).returncode == 0
    out, head = tmp_path / "out", git(source, "rev-parse", "HEAD").strip()
    first = _start("apply", str(out), "--commit", "--author", AUTHOR)
    _wait_until_held(out / "fix-calc.lock", first)
    others = [_start("apply", str(out), "--commit", "--author", AUTHOR), _start("reject", str(out))]
    second, rejected = (_finished(p) for p in others)
    _, err = first.communicate(timeout=120)
    held(
        "decision lock: a second apply is refused with exit 3",
        second.returncode == 3 and HELD in second.stderr and "Traceback" not in second.stderr,
        second.stderr,
    )
    held(
        "decision lock: a reject during an apply is refused with exit 3",
        rejected.returncode == 3 and HELD in rejected.stderr,
        rejected.stderr,
    )
    held("decision lock: the first apply lands", first.returncode == 0, err)
    commits = git(source, "rev-list", f"{head}..HEAD").split()
    held("decision lock: exactly one commit", len(commits) == 1, commits)


def test_an_apply_or_reject_during_the_run_is_refused(tmp_path: Path) -> None:
    source = calc_repo(tmp_path)
    spec = write_task(tmp_path, source, [[write("calc.py", FIXED_BOTH)]], command="true")
    assert run_cli("run", str(spec)).returncode == 0  # a finished record of the task id
    # the run's DoD waits (up to a minute) until both decisions were tried: the run holds its
    # lock however slowly they start (without the sandbox, so the DoD sees the file)
    release = tmp_path / "release"
    slow = (
        f"for i in $(seq 1200); do [ -e {release} ] && break; sleep 0.05; done; "
        "grep -q 'a [*] b' calc.py"
    )
    spec = write_task(
        tmp_path, source, [[write("calc.py", FIXED_BOTH)]], command=slow, sandbox="off"
    )
    out, head = tmp_path / "out", git(source, "rev-parse", "HEAD").strip()
    running = _start("run", str(spec))
    _wait_until_held(out / "fix-calc.lock", running)
    for argv in (["apply", str(out), "--commit", "--author", AUTHOR], ["reject", str(out)]):
        ran = run_cli(*argv)
        held(
            f"decision lock: {argv[0]} during the run is refused with exit 3",
            ran.returncode == 3 and HELD in ran.stderr and "Traceback" not in ran.stderr,
            ran.stderr,
        )
    release.touch()
    _, err = running.communicate(timeout=120)
    held("decision lock: the run ends as it would have", running.returncode == 0, err)
    held("decision lock: nothing committed", git(source, "rev-parse", "HEAD").strip() == head)
    shown = run_cli("result", str(out))
    held("decision lock: the run's record is whole and sealed", shown.returncode == 0, shown.stderr)
