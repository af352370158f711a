"""The checkout cache under concurrent runs: a run that waited to build an entry uses the one
another run built meanwhile instead of waiting for that run to end (its workspace holds the
entry shared for its whole life), and an entry that no longer matches its record while runs
hold it is refused at once, so the caller makes a clone."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

from code_runner import files
from code_runner.repo import git
from code_runner.workspace import checkouts
from tests.helpers.git import make_repo

pytestmark = pytest.mark.integration


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    return git.open_source(make_repo(tmp_path / "source", {"a.txt": "alpha\n", "b/c.txt": "c\n"}))


class Acquiring(threading.Thread):
    """`checkouts.acquire` in a thread: its lock fd conflicts with the test's own fds as a
    second process's would (flock belongs to the open file, not the process)."""

    def __init__(self, repo: git.Repo, head: str) -> None:
        super().__init__(daemon=True)
        self.repo, self.head = repo, head
        self.held: checkouts.Checkout | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.held = checkouts.acquire(self.repo, self.head)
        except BaseException as exc:  # handed to the test
            self.error = exc


def _entry_lock(tree: str) -> int:
    checkouts.cache_dir().mkdir(parents=True, exist_ok=True)
    return files.open_lock(checkouts.cache_dir() / f"{tree}.lock")


def test_a_run_waiting_to_build_uses_the_entry_another_run_built_and_holds(
    repo: git.Repo,
) -> None:
    head = repo.out("rev-parse", "HEAD")
    tree = repo.out("rev-parse", "HEAD^{tree}")
    other = _entry_lock(tree)
    try:
        assert files.try_flock(other, shared=True)  # another run, about to build it
        waiting = Acquiring(repo, head)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive(), "the entry is missing: the run waits for the lock to build it"
        # the other run builds it and holds it, shared, for as long as its workspace lives
        checkouts._build(repo, head, checkouts.cache_dir() / tree, tree)
        started = time.monotonic()
        waiting.join(15.0)
        assert not waiting.is_alive(), "the run waited for the other run's workspace to end"
        assert waiting.error is None, waiting.error
        assert time.monotonic() - started < 15.0
        assert waiting.held is not None
        assert (waiting.held.files_dir / "a.txt").read_text() == "alpha\n"
        waiting.held.release()
    finally:
        os.close(other)


def test_an_entry_in_use_that_no_longer_matches_is_refused_at_once(repo: git.Repo) -> None:
    head = repo.out("rev-parse", "HEAD")
    first = checkouts.acquire(repo, head)
    entry = checkouts.cache_dir() / first.tree
    try:
        index = (entry / "index").read_bytes()
        (entry / "index").write_bytes(b"tampered")
        started = time.monotonic()
        with pytest.raises(OSError) as refused:
            checkouts.acquire(repo, head)
        assert time.monotonic() - started < 10.0
        assert refused.value.errno == errno.EBUSY
        assert "in use and no longer matches its record" in str(refused.value)
        assert (entry / "index").read_bytes() == b"tampered", "rebuilt under a reader"
        (entry / "index").write_bytes(index)
    finally:
        first.release()
    # once no run holds it, the next one rebuilds a tampered entry
    (entry / "index").write_bytes(b"tampered")
    again = checkouts.acquire(repo, head)
    assert (entry / "index").read_bytes() != b"tampered"
    again.release()
