"""A root runner's workspace for the sandbox is checked out as the sandbox's uid: every
file is that uid's from the start, the git dir stays root's, opening the sandbox changes
no inode (so git's index still matches every file and the audit re-reads none), and the
audit still sees what the sandboxed uid changes, a same-size edit with its old mtime put
back included. What the audit restores is written as that uid too, so no walk re-owns
anything, until something takes the tree back (an agent CLI's round): then the next
hand-over gives all of it back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from code_runner import proc, sandbox, workspace
from code_runner.repo import git
from code_runner.task.paths import Allowlist
from tests.helpers.git import make_repo
from tests.helpers.sandboxes import owned_session

pytestmark = pytest.mark.integration

OWNER = (2_000_000_321, 2_000_000_321)
FILES = {"a.txt": "alpha\n", "pkg/b.py": "b = 1\n", "pkg/deep/c.txt": "c\n"}


def _entries(root: Path, *, skip: str | None = None) -> dict[str, os.stat_result]:
    found = {}
    for here, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            path = Path(here, name)
            if path.relative_to(root).parts[0] != skip:
                found[str(path.relative_to(root))] = path.lstat()
    return found


def test_the_checkout_is_the_sandbox_uids_and_the_audit_sees_its_edits(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "the runner's tests run as root, as CI does"
    source = make_repo(tmp_path / "source", FILES)
    repo = git.open_source(source)
    ws = workspace.create(repo, repo.out("rev-parse", "HEAD"), run_id="owned", owner=OWNER)
    try:
        assert ws.owner == OWNER
        tree = _entries(ws.work_tree, skip=".git")
        assert set(FILES) <= set(tree)
        assert {(s.st_uid, s.st_gid) for s in tree.values()} == {OWNER}
        assert {s.st_uid for s in _entries(ws.git_dir).values()} == {0}
        assert ws.git_dir.stat().st_uid == 0
        session = owned_session(ws, "owned", OWNER)
        with session:
            after = _entries(ws.work_tree, skip=".git")
            assert {k: v.st_ctime_ns for k, v in after.items()} == {
                k: v.st_ctime_ns for k, v in tree.items()
            }, "opening the sandbox changed inodes of a tree its uid already owns"
            # same size, old mtime put back: only the inode change time tells
            edit = (
                "stat -c %y a.txt > /tmp/m && printf 'ALPHA\\n' > a.txt && "
                'touch -d "$(cat /tmp/m)" a.txt && echo new > pkg/new.txt && '
                "echo outside > pkg/b.py"
            )
            ran = proc.run(
                session.wrap(proc.shell_argv(edit)),
                cwd=ws.work_tree,
                env=ws.env(),
                timeout_s=60,
            )
            assert ran.ok, ran.stderr
            edited = ws.work_tree / "a.txt"
            assert edited.stat().st_mtime_ns == tree["a.txt"].st_mtime_ns
            assert edited.stat().st_size == tree["a.txt"].st_size
            found = ws.audit(Allowlist.parse(["a.txt", "pkg/new.txt"]))
            assert sorted(c.path for c in found.allowed) == ["a.txt", "pkg/new.txt"]
            assert [r.change.path for r in found.rejected] == ["pkg/b.py"]
            assert (ws.work_tree / "pkg/b.py").read_text() == FILES["pkg/b.py"]
            owners = {(s.st_uid, s.st_gid) for s in _entries(ws.work_tree, skip=".git").values()}
            assert owners == {OWNER}, "the audit restored a file as root"
            assert {s.st_uid for s in _entries(ws.git_dir).values()} == {0}
            assert session.hand_over() == 0
            # an agent CLI's round takes the tree back; the next hand-over gives it all back
            sandbox.hand_over(ws.work_tree, sandbox.SandboxUser(0, 0))
            assert session.hand_over() >= len(FILES)
            owners = {(s.st_uid, s.st_gid) for s in _entries(ws.work_tree, skip=".git").values()}
            assert owners == {OWNER}
    finally:
        ws.release()


def test_without_an_owner_the_checkout_is_the_runners(tmp_path: Path) -> None:
    source = make_repo(tmp_path / "source", FILES)
    repo = git.open_source(source)
    ws = workspace.create(repo, repo.out("rev-parse", "HEAD"), run_id="plain")
    try:
        assert ws.owner is None
        owners = {s.st_uid for s in _entries(ws.work_tree, skip=".git").values()}
        assert owners == {os.geteuid()}
    finally:
        ws.release()
