"""`files.walk_records`: the one walk `summarize` and the dashboard-free listings share."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from code_runner import files
from code_runner.errors import LockHeld
from code_runner.monitor import collect_experiments
from code_runner.record.summary import collect


def _deep_chain(root: Path, depth: int) -> None:
    """A chain of one-letter folders deeper than Python's recursion limit, made with
    relative steps so no single path passes PATH_MAX."""
    here = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=here)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
            os.close(here)
            here = nxt
    finally:
        os.close(here)


def test_walk_records_skips_dependency_and_workspace_folders_in_name_order(
    tmp_path: Path,
) -> None:
    for name in ["b", "a", ".git", "node_modules", "workspaces", "__pycache__", ".tools"]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.result.json").write_text("{}")
    seen = [(Path(here).name, names) for here, _, names in files.walk_records(tmp_path)]
    assert seen == [(tmp_path.name, []), ("a", ["x.result.json"]), ("b", ["x.result.json"])]


def _remove_chain(root: Path, depth: int) -> None:
    """Remove the chain bottom-up (pytest's own clean-up recurses and would fail on it)."""
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(depth - 1):
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        while fds:
            os.rmdir("d", dir_fd=fds[-1])
            os.close(fds.pop())
    finally:
        for fd in fds:
            os.close(fd)


def test_summaries_walk_a_chain_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    _deep_chain(tmp_path, 1500)
    try:
        assert collect(tmp_path) == ([], 0)
        assert collect_experiments(tmp_path)[0] == []
    finally:
        _remove_chain(tmp_path, 1500)
    assert not (tmp_path / "d").exists()


def test_force_rmtree_never_deletes_through_a_mount(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    mounted = tree / "mnt"
    mounted.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mounted)], check=True)
    try:
        (mounted / "kept.txt").write_text("kept")
        with pytest.raises(OSError, match="a file system is mounted at"):
            files.force_rmtree(tree)
        assert (mounted / "kept.txt").read_text() == "kept"  # the target is unchanged
    finally:
        subprocess.run(["umount", "-l", str(mounted)], check=True)
    files.force_rmtree(tree)
    assert not tree.exists()


def test_atomic_write_from_lets_a_process_write_the_file_and_cuts_it(tmp_path: Path) -> None:
    target = tmp_path / "out" / "git.diff"
    size = files.atomic_write_from(
        target,
        lambda f: subprocess.run(["printf", "0123456789"], stdout=f, check=True),
        max_bytes=4,
    )
    assert size == 10 and target.read_bytes() == b"0123"
    with pytest.raises(subprocess.CalledProcessError):
        files.atomic_write_from(target, lambda f: subprocess.run(["false"], stdout=f, check=True))
    assert target.read_bytes() == b"0123" and os.listdir(target.parent) == ["git.diff"]


def test_a_lock_held_elsewhere_waits_then_says_who_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with files.flocked(path, shared=True) as first:
        assert files.try_flock(first, shared=True)  # a shared lock shares
        second = files.open_lock(path)
        try:
            assert not files.try_flock(second)
            with pytest.raises(LockHeld, match="held"):
                files.wait_flock(
                    second, timeout_s=0.05, poll_s=0.01, held=lambda: LockHeld("held", fix="wait")
                )
            calls: list[int] = []

            def give_up() -> None:
                calls.append(1)
                if len(calls) == 3:
                    raise InterruptedError

            with pytest.raises(InterruptedError):
                files.wait_flock(second, poll_s=0.01, waiting=give_up)
        finally:
            os.close(second)
    with files.flocked(path) as fd:  # free again once the block ends
        assert fd >= 0
    (tmp_path / "elsewhere").touch()
    (tmp_path / "planted.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        files.open_lock(tmp_path / "planted.lock")
