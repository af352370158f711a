"""A command's end is woken by the kernel, never by a sleep or a poll loop, and it still
leaves nothing behind: a run's cgroup leaf is killed whole (`cgroup.kill`) and its members'
exits awaited on pidfds; a daemon that left the session is awaited the same way; a wait
holds one pidfd from start to exit; and without any child, the leftover scan reads
nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from code_runner import proc
from code_runner.proc import tracking

pytestmark = pytest.mark.integration

PY = sys.executable
ENV = {"PATH": os.environ["PATH"]}
# a daemon that leaves the command's session and clears its environment, then the command
# ends at once: its leftover must be found through the run's cgroup, not its token
DAEMON = "setsid env -i /bin/sleep 300 </dev/null >/dev/null 2>&1 & echo $!; sleep 0.2"
needs_cgroup = pytest.mark.skipif(
    tracking.hierarchy() is None, reason="no writable cgroup to track runs in"
)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every `time.sleep` from now on, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def _no_psutil_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a leftover was awaited by psutil's sleep-and-poll")

    monkeypatch.setattr(psutil, "wait_procs", refuse)
    monkeypatch.setattr(psutil.Process, "wait", refuse)


@needs_cgroup
def test_a_run_commands_leftover_is_killed_with_its_leaf_and_no_sleep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc.become_subreaper()
    run_id = f"waits-{uuid.uuid4().hex[:8]}"
    env = {**ENV, proc.RUN_ID_ENV: run_id}
    group = tracking.run_group(run_id)
    assert group is not None
    with monkeypatch.context() as patched:
        slept = _no_sleep(patched)
        _no_psutil_wait(patched)
        result = proc.run(["sh", "-c", DAEMON], cwd=tmp_path, env=env, timeout_s=30)
    daemon = int(result.stdout.split()[0])
    assert result.exit_code == 0, result.stderr
    assert _gone(daemon), "the daemon outlived its command"
    assert result.killed_descendants >= 1
    assert tracking.populated(group) is False, "the run's group kept a process"
    proc.release_run_group(run_id)
    assert not group.exists(), "the command's cgroup leaf (and the run's group) was left"
    assert slept == [], f"the command's end slept {slept}"


def test_a_daemon_that_left_the_session_is_awaited_without_polling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc.become_subreaper()
    with monkeypatch.context() as patched:
        _no_psutil_wait(patched)
        result = proc.run(
            ["sh", "-c", DAEMON.replace("env -i ", "")], cwd=tmp_path, env=ENV, timeout_s=30
        )
    daemon = int(result.stdout.split()[0])
    assert result.exit_code == 0, result.stderr
    assert result.killed_descendants == 1
    assert _gone(daemon), "the daemon outlived its command"


@needs_cgroup
def test_a_group_that_keeps_forking_is_emptied_whole() -> None:
    run_id = f"waits-{uuid.uuid4().hex[:8]}"
    argv, leaf = tracking.join_argv(run_id, "forks")
    assert leaf is not None
    forker = subprocess.Popen(
        [*argv, "sh", "-c", "while :; do sleep 300 & done"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while len(tracking.members(leaf)) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = tracking.members(leaf)
        assert len(seen) >= 20, "the forker did not get going"
        killed = tracking.empty(leaf)
    finally:
        forker.kill()
        forker.wait()
    assert set(killed) >= seen
    assert all(_gone(pid) for pid in seen), "a member of the group outlived its emptying"
    assert not leaf.exists() and not leaf.parent.exists(), "the emptied group was left"


def test_a_wait_holds_one_pidfd_from_start_to_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[int] = []
    pidfd_open = os.pidfd_open

    def counted(pid: int, flags: int = 0) -> int:
        opened.append(pid)
        return pidfd_open(pid, flags)

    with monkeypatch.context() as patched:
        patched.setattr(os, "pidfd_open", counted)
        result = proc.run(["sleep", "0.4"], cwd=tmp_path, env=ENV, timeout_s=30)
    assert result.exit_code == 0
    assert len(opened) == 1, f"{len(opened)} pidfds for one wait"


def test_without_any_child_the_leftover_scan_reads_nothing(tmp_path: Path) -> None:
    # in a process of its own, whose only child is the command
    script = textwrap.dedent(
        """
        import os, sys
        from code_runner import proc
        from code_runner.proc import tree

        def refuse(*_args, **_kwargs):
            raise AssertionError("the process tree was read with no child to find")

        tree.descendants = refuse
        result = proc.run(["true"], cwd="/", env={"PATH": os.environ["PATH"]}, timeout_s=30)
        sys.exit(result.exit_code)
        """
    )
    done = subprocess.run(
        [PY, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
