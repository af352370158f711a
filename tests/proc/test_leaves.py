"""A run's commands share one cgroup leaf, one after another: a command makes and removes
no cgroup, yet each starts in a leaf with nothing else in it (what the last one left is
killed before the leaf is kept), and the leaf and the run's group go when the run ends."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest

from code_runner import proc
from code_runner.proc import tracking

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(tracking.hierarchy() is None, reason="no writable cgroup to track runs in"),
]

ENV = {"PATH": os.environ["PATH"]}
DAEMON = "setsid env -i /bin/sleep 300 </dev/null >/dev/null 2>&1 & echo $!; sleep 0.2"


def _leaf_of(stdout: str) -> Path:
    """The cgroup leaf a command saw itself in (its /proc/self/cgroup, this hierarchy)."""
    found = tracking.hierarchy()
    assert found is not None
    paths = [line.split(":", 2)[2] for line in stdout.splitlines() if tracking.PREFIX in line]
    assert len(paths) == 1, stdout
    return found.base / paths[0][paths[0].index(tracking.PREFIX) :]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _run_env() -> tuple[str, dict[str, str], Path]:
    run_id = f"leaves-{uuid.uuid4().hex[:8]}"
    group = tracking.run_group(run_id)
    assert group is not None
    return run_id, {**ENV, proc.RUN_ID_ENV: run_id}, group


def test_a_runs_commands_share_one_leaf_emptied_between_them(tmp_path: Path) -> None:
    proc.become_subreaper()
    run_id, env, group = _run_env()
    try:
        first = proc.run(["sh", "-c", DAEMON], cwd=tmp_path, env=env, timeout_s=30)
        daemon = int(first.stdout.split()[0])
        assert not _alive(daemon), "the first command's daemon outlived it"
        kept = [p for p in group.iterdir() if p.is_dir()]
        assert len(kept) == 1, f"the run kept {kept}"
        assert tracking.populated(kept[0]) is False, "the kept leaf holds a process"
        second = proc.run(["cat", "/proc/self/cgroup"], cwd=tmp_path, env=env, timeout_s=30)
        third = proc.run(["cat", "/proc/self/cgroup"], cwd=tmp_path, env=env, timeout_s=30)
        assert second.exit_code == 0 and third.exit_code == 0, second.stderr + third.stderr
        assert _leaf_of(second.stdout) == _leaf_of(third.stdout) == kept[0]
    finally:
        proc.release_run_group(run_id)
    assert not group.exists(), "the run's group outlived the run's end"


def test_commands_at_once_each_get_a_leaf_of_their_own(tmp_path: Path) -> None:
    run_id, env, group = _run_env()
    try:
        proc.run(["true"], cwd=tmp_path, env=env, timeout_s=30)  # the run has a spare now
        out = [tmp_path / f"{n}.out" for n in range(2)]
        running = [
            proc.spawn(
                ["sh", "-c", "cat /proc/self/cgroup; sleep 30"],
                cwd=tmp_path,
                env=env,
                stdout_path=path,
                stderr_path=tmp_path / "err",
            )
            for path in out
        ]
        for process in running:
            while tracking.PREFIX not in process.stdout_path.read_text():
                process.wait_exit(0.01)
        leaves = [proc.read_head_tail(path, 4096, 0)[0] for path in out]
        for process in running:
            process.kill_tree(0.1)
        seen = [_leaf_of(text) for text in leaves]
        assert seen[0] != seen[1], "two commands running at once shared a leaf"
    finally:
        proc.release_run_group(run_id)
    assert not group.exists(), "the run's group outlived the run's end"


def test_a_command_that_cannot_start_leaves_no_leaf(tmp_path: Path) -> None:
    run_id, env, group = _run_env()
    missing = tmp_path / "missing"
    result = proc.run(["true"], cwd=missing, env=env, timeout_s=30)
    assert result.exit_code == 127
    proc.release_run_group(run_id)
    assert not group.exists(), "a command that never started left its cgroup leaf"


def test_a_spare_removed_from_outside_is_made_again(tmp_path: Path) -> None:
    run_id, env, group = _run_env()
    try:
        proc.run(["true"], cwd=tmp_path, env=env, timeout_s=30)
        proc.remove_group(group)  # a `gc` of another state dir: an empty run group
        assert not group.exists()
        again = proc.run(["cat", "/proc/self/cgroup"], cwd=tmp_path, env=env, timeout_s=30)
        assert again.exit_code == 0, again.stderr
        assert _leaf_of(again.stdout).parent == group, "the command ran outside the run's group"
    finally:
        proc.release_run_group(run_id)
    assert not group.exists()


def test_only_the_most_recent_runs_keep_a_group(tmp_path: Path) -> None:
    made = [_run_env() for _ in range(tracking._KEEP_RUNS + 2)]
    try:
        for _, env, _ in made:
            proc.run(["true"], cwd=tmp_path, env=env, timeout_s=30)
        kept = [group.exists() for _, _, group in made]
        assert kept == [False] * 2 + [True] * tracking._KEEP_RUNS, kept
    finally:
        for run_id, _, _ in made:
            proc.release_run_group(run_id)
    assert not any(group.exists() for _, _, group in made)


def test_a_forked_childs_exit_leaves_the_runs_spare(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, sys
        from code_runner import proc
        from code_runner.proc import tracking
        run_id = sys.argv[1]
        env = {"PATH": os.environ["PATH"], proc.RUN_ID_ENV: run_id}
        proc.run(["true"], cwd="/", env=env, timeout_s=30)
        group = tracking.run_group(run_id)
        if os.fork() == 0:
            sys.exit(0)  # a normal exit: the child's exit handlers run
        os.wait()
        print("kept" if group.exists() else "removed")
        """
    )
    run_id = f"leaves-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [sys.executable, "-c", script, run_id], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["kept"], "a forked child removed its parent's run leaf"
    group = tracking.run_group(run_id)
    assert group is not None and not group.exists(), "the runner's exit left the run's group"


def test_a_leaf_its_command_froze_is_not_given_to_the_next(tmp_path: Path) -> None:
    """A command running as root outside a sandbox may write its own leaf's control files
    (here `cgroup.freeze`): the next command of the run must not start in that leaf."""
    proc.become_subreaper()
    run_id, env, group = _run_env()
    found = tracking.hierarchy()
    assert found is not None
    if found.version != 2:
        pytest.skip("cgroup.freeze is cgroup v2's")
    freeze = (
        f'L={found.base}$(sed -n "s/^0:://p" /proc/self/cgroup); '
        'mkdir "$L/sub"; echo 1 > "$L/cgroup.freeze"'
    )
    try:
        first = proc.run(["sh", "-c", freeze], cwd=tmp_path, env=env, timeout_s=1)
        assert first.timed_out  # it froze itself
        second = proc.run(["echo", "hi"], cwd=tmp_path, env=env, timeout_s=10)
        assert second.exit_code == 0 and second.stdout == "hi\n", second.describe()
    finally:
        proc.release_run_group(run_id)
    assert not group.exists()


def test_gc_keeps_the_empty_group_of_a_live_run_and_removes_a_dead_ones(tmp_path: Path) -> None:
    """Between its commands a live run's group holds only its emptied spare leaf: `gc` must
    not take it (the run's next join would find no leaf), while an empty group whose run
    is gone is still removed."""
    from code_runner.runner import gc, leases

    live_id, live_env, live_group = _run_env()
    dead_id, dead_env, dead_group = _run_env()
    leases.take(live_id, tmp_path / "out", "task")  # this process owns the live run
    try:
        for env in (live_env, dead_env):
            assert proc.run(["true"], cwd=tmp_path, env=env, timeout_s=30).exit_code == 0
        tracking.release(dead_id)  # as a run that ended without removing its group...
        dead_group.mkdir(exist_ok=True)  # ...and left it behind, empty
        assert live_group.is_dir() and not tracking.members(live_group)
        removed = {r.run_id for r in gc.collect()}
        assert live_id not in removed and live_group.is_dir(), "gc took a live run's group"
        assert dead_id in removed and not dead_group.exists()
        again = proc.run(["true"], cwd=tmp_path, env=live_env, timeout_s=30)
        assert again.exit_code == 0, again.stderr
    finally:
        leases.drop(live_id)
        tracking.release(live_id)
        tracking.release(dead_id)
    assert not live_group.exists()
