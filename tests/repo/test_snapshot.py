"""The source snapshot is the last wall: every kind of change to the source must show."""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from code_runner.repo import git as repo_git
from code_runner.repo import snapshot
from tests.helpers.git import git, make_repo

pytestmark = pytest.mark.integration


@pytest.fixture
def source(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo", {"a.py": "a\n", "dir/b.py": "b\n"})
    (repo / "untracked.txt").write_text("mine\n")
    (repo / "a.py").write_text("dirty\n")
    return repo


def _bump(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))


def _rewrite(path: Path, text: str) -> None:
    """A new content whose size may match the old: the mtime moves on regardless."""
    path.write_text(text)
    _bump(path)


CHANGES: dict[str, Callable[[Path], object]] = {
    "tracked file modified": lambda r: (r / "dir/b.py").write_text("changed\n"),
    "tracked file deleted": lambda r: (r / "dir/b.py").unlink(),
    "dirty file rewritten": lambda r: _rewrite(r / "a.py", "dirtier\n"),
    "untracked file rewritten": lambda r: _rewrite(r / "untracked.txt", "theirs\n"),
    "untracked file added": lambda r: (r / "new.txt").write_text("x\n"),
    "commit made": lambda r: git(r, "commit", "-q", "--allow-empty", "-m", "x"),
    "branch created": lambda r: git(r, "branch", "evil"),
    "tag created": lambda r: git(r, "tag", "v9"),
    "HEAD detached": lambda r: git(r, "checkout", "-q", "--detach"),
    "config changed": lambda r: git(r, "config", "core.fsmonitor", "/tmp/x"),
    "hook added": lambda r: (r / ".git/hooks/pre-commit").write_text("#!/bin/sh\n"),
    "index changed": lambda r: git(r, "add", "a.py"),
    "stash made": lambda r: git(r, "stash", "-q"),
    "exclude changed": lambda r: (r / ".git/info/exclude").write_text("*.log\n"),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_every_kind_of_change_is_named(source: Path, name: str) -> None:
    repo = repo_git.open_source(source)
    before = snapshot.take(repo)
    assert snapshot.differences(before, snapshot.take(repo)) == []
    CHANGES[name](source)
    diffs = snapshot.differences(before, snapshot.take(repo))
    assert diffs, f"{name} went unnoticed"


def test_taking_a_snapshot_writes_nothing(source: Path) -> None:
    index = source / ".git/index"
    time.sleep(0.01)
    (source / "dir/b.py").touch()  # stat-dirty: a plain `git status` would rewrite the index
    before_bytes = index.read_bytes()
    before_mtime = index.stat().st_mtime_ns
    snapshot.take(repo_git.open_source(source))
    assert index.read_bytes() == before_bytes
    assert index.stat().st_mtime_ns == before_mtime


def _apply_differences(before: snapshot.SourceSnapshot, repo: repo_git.Repo) -> list[str]:
    after = snapshot.take(repo)
    return snapshot.differences(snapshot.expect_apply(before, after, committed=False), after)


def test_a_refresh_of_the_index_stat_data_is_no_change_for_apply(source: Path) -> None:
    repo = repo_git.open_source(source)
    os.utime(source / "dir/b.py", (1_000_000_000, 1_000_000_000))  # same bytes, new stat
    before = snapshot.take(repo)
    index = (source / ".git/index").read_bytes()
    git(source, "status", "--porcelain")  # as `git describe --dirty` in a DoD does
    assert (source / ".git/index").read_bytes() != index
    assert snapshot.differences(before, snapshot.take(repo))  # a run's source must not move
    assert _apply_differences(before, repo) == []
    git(source, "update-index", "--chmod=+x", "dir/b.py")  # an entry changed: still named
    assert ".git/index changed" in _apply_differences(before, repo)


def test_unborn_repo(tmp_path: Path) -> None:
    repo_dir = tmp_path / "empty"
    repo_dir.mkdir()
    git(repo_dir, "init", "-q")
    snap = snapshot.take(repo_git.open_source(repo_dir))
    assert snap.head is None


def _flip_in_place(path: Path) -> None:
    """One bit of the first byte flipped, mode and times put back: same size, same mtime,
    same inode. Only the ctime and the content tell."""
    st = path.stat()
    os.chmod(path, 0o600)
    with path.open("r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 1]))
    os.chmod(path, stat.S_IMODE(st.st_mode))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def settled(source: Path) -> Path:
    """The source with every file's ctime older than the margin a later snapshot trusts."""
    time.sleep(1.1)
    return source


def test_a_snapshot_since_another_reads_only_what_changed(settled: Path) -> None:
    repo = repo_git.open_source(settled)
    before = snapshot.take(repo)
    oid = git(settled, "rev-parse", "HEAD:a.py").strip()
    old = f"objects/{oid[:2]}/{oid[2:]}"
    # a sentinel in place of the old object's fingerprint: only a reused one carries it
    marked = dataclasses.replace(before, git_tree={**before.git_tree, old: "reused"})
    git(settled, "tag", "v1")  # a new file in the git dir: read, it is not in `before`
    after = snapshot.take(repo, since=marked)
    assert after.git_tree[old] == "reused"
    # recorded with another stat (another inode, size or time): read again
    elsewhere = dataclasses.replace(marked, hashed_stats={**marked.hashed_stats, old: "x"})
    assert snapshot.take(repo, since=elsewhere).git_tree[old] == before.git_tree[old]
    assert after.git_tree["refs/tags/v1"] == snapshot.take(repo).git_tree["refs/tags/v1"]
    diffs = snapshot.differences(before, snapshot.take(repo, since=before))
    assert any("refs/tags/v1" in d for d in diffs), diffs


def test_a_file_rewritten_with_its_size_and_mtime_kept_is_read_again(settled: Path) -> None:
    repo = repo_git.open_source(settled)
    before = snapshot.take(repo)
    oid = git(settled, "rev-parse", "HEAD:a.py").strip()
    old = f"objects/{oid[:2]}/{oid[2:]}"
    _flip_in_place(settled / ".git" / old)
    after = snapshot.take(repo, since=before)
    assert after.git_tree[old] != before.git_tree[old]
    assert snapshot.differences(before, after) == [f".git entries changed: {old}"]


def test_a_file_stamped_near_the_earlier_snapshot_is_never_trusted(source: Path) -> None:
    """Written within the margin before `since` was taken, a file is read again even with
    its stat unchanged: a second write in the same clock tick would leave the same ctime."""
    repo = repo_git.open_source(source)
    (source / ".git/description").write_text("fresh\n")
    before = snapshot.take(repo)
    marked = dataclasses.replace(before, git_tree={**before.git_tree, "description": "reused"})
    after = snapshot.take(repo, since=marked)
    assert after.git_tree["description"] == before.git_tree["description"]
