"""The workspace against real repos: isolation from the source, audit, export, release."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from code_runner import proc, workspace
from code_runner.proc import tracking
from code_runner.repo import git as repo_git
from code_runner.repo import snapshot
from code_runner.task import paths
from tests.helpers.git import git, make_repo

pytestmark = pytest.mark.integration


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "src-repo",
        {
            "README.md": "hello\n",
            "src/app.py": "x = 1\n",
            "src/util.py": "y = 2\n",
            "docs/guide.md": "guide\n",
            "bin/tool.sh": "#!/bin/sh\necho hi\n",
            "data/blob.bin": bytes(range(256)) * 4,
            ".gitignore": "*.log\n__pycache__/\n",
        },
    )


def make_ws(source: Path, run_id: str = "t1") -> workspace.Workspace:
    repo = repo_git.open_source(source)
    base = repo_git.head_commit(repo)
    assert base
    return workspace.create(repo, base, run_id=run_id)


def test_create_checks_out_base_and_leaves_source_identical(source: Path) -> None:
    repo = repo_git.open_source(source)
    before = snapshot.take(repo)
    ws = make_ws(source)
    assert (ws.work_tree / "src/app.py").read_text() == "x = 1\n"
    assert (ws.work_tree / ".git").read_text().startswith("gitdir: ")
    assert not (ws.git_dir / "refs/remotes/origin").exists()
    assert snapshot.differences(before, snapshot.take(repo)) == []
    assert ws.release()
    assert not ws.root.exists()
    assert snapshot.differences(before, snapshot.take(repo)) == []


def test_no_hook_fsmonitor_or_filter_of_the_source_runs(source: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hook = f"#!/bin/sh\necho $0 >> {marker}\n"
    for name in ("post-checkout", "pre-commit", "post-index-change", "reference-transaction"):
        path = source / ".git/hooks" / name
        path.write_text(hook)
        path.chmod(0o755)
    (source / "fsmonitor.sh").write_text(f"#!/bin/sh\necho fsmonitor >> {marker}\n")
    (source / "fsmonitor.sh").chmod(0o755)
    git(source, "config", "core.fsmonitor", str(source / "fsmonitor.sh"))
    git(source, "config", "filter.evil.smudge", f"sh -c 'echo smudge >> {marker}; cat'")
    git(source, "config", "filter.evil.clean", f"sh -c 'echo clean >> {marker}; cat'")
    git(source, "config", "filter.evil.required", "true")
    (source / ".gitattributes").write_text("*.py filter=evil\n")
    git(
        source,
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
        "add",
        ".gitattributes",
    )
    git(
        source,
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
        "commit",
        "-q",
        "-m",
        "attrs",
    )
    if marker.exists():
        marker.unlink()
    repo = repo_git.open_source(source)
    before = snapshot.take(repo)
    ws = make_ws(source)
    (ws.work_tree / "src/app.py").write_text("x = 2\n")
    audit = ws.audit(paths.Allowlist.parse(["src"]))
    assert [c.path for c in audit.allowed] == ["src/app.py"]
    patch = ws.export(ws.keep()).patch_path.read_bytes()
    assert b"x = 2" in patch
    ws.release()
    after = snapshot.take(repo)
    assert not marker.exists(), marker.read_text()
    assert snapshot.differences(before, after) == []


def test_audit_reads_every_kind_of_change(source: Path) -> None:
    ws = make_ws(source)
    wt = ws.work_tree
    (wt / "src/app.py").write_text("x = 10\n")  # modified
    (wt / "src/util.py").unlink()  # deleted
    (wt / "src/new/deep.py").parent.mkdir(parents=True)
    (wt / "src/new/deep.py").write_text("z = 3\n")  # added in a new directory
    (wt / "bin/tool.sh").chmod(0o755)  # mode change
    (wt / "data/blob.bin").write_bytes(bytes(range(255, -1, -1)) * 4)  # binary
    allow = paths.Allowlist.parse(["src", "bin/tool.sh", "data"])
    audit = ws.audit(allow)
    kinds = {c.path: c.kind for c in audit.allowed}
    assert kinds == {
        "src/app.py": workspace.ChangeKind.MODIFIED,
        "src/util.py": workspace.ChangeKind.DELETED,
        "src/new/deep.py": workspace.ChangeKind.ADDED,
        "bin/tool.sh": workspace.ChangeKind.MODE_CHANGED,
        "data/blob.bin": workspace.ChangeKind.MODIFIED,
    }
    assert audit.rejected == () and audit.violations == ()


def test_changes_outside_the_allowlist_are_dropped_segment_aware(source: Path) -> None:
    ws = make_ws(source)
    wt = ws.work_tree
    (wt / "src/app.py").write_text("x = 10\n")
    (wt / "src_evil").mkdir()
    (wt / "src_evil/x.py").write_text("evil\n")
    (wt / "README.md").write_text("rewritten\n")
    (wt / "docs/guide.md").unlink()
    (wt / "conftest.py").write_text("import sys; sys.exit(0)\n")
    audit = ws.audit(paths.Allowlist.parse(["src"]))
    assert [c.path for c in audit.allowed] == ["src/app.py"]
    dropped = {r.change.path for r in audit.rejected}
    assert dropped == {"src_evil/x.py", "README.md", "docs/guide.md", "conftest.py"}
    assert not (wt / "src_evil").exists()
    assert not (wt / "conftest.py").exists()
    assert (wt / "README.md").read_text() == "hello\n"
    assert (wt / "docs/guide.md").read_text() == "guide\n"
    assert (wt / "src/app.py").read_text() == "x = 10\n"


def test_untracked_and_ignored_leftovers_are_removed(source: Path) -> None:
    ws = make_ws(source)
    (ws.work_tree / "debug.log").write_text("ignored leftover\n")
    (ws.work_tree / "src/__pycache__").mkdir()
    (ws.work_tree / "src/__pycache__/app.pyc").write_bytes(b"\0")
    audit = ws.audit(paths.Allowlist.parse(["src"]))
    assert audit.allowed == ()
    assert not (ws.work_tree / "debug.log").exists()
    assert not (ws.work_tree / "src/__pycache__").exists()


@pytest.mark.parametrize("name", [".GIT", ".git.", ".Git ", "git~1", ".g\u200cit"])
def test_dot_git_spellings_are_refused_and_removed(source: Path, name: str) -> None:
    ws = make_ws(source)
    target = ws.work_tree / "src" / name
    target.mkdir()
    (target / "config").write_text("[core]\n\thooksPath = /tmp\n")
    audit = ws.audit(paths.Allowlist.parse(["src"]))
    assert audit.allowed == ()
    assert any(r.refused for r in audit.rejected)
    assert not target.exists()


def test_symlinks_gitlinks_and_gitmodules_are_refused(source: Path, tmp_path: Path) -> None:
    ws = make_ws(source)
    wt = ws.work_tree
    os.symlink("/etc/passwd", wt / "src/link.py")
    nested = wt / "src/nested"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "f.txt").write_text("f\n")
    git(nested, "add", "-A")
    git(nested, "commit", "-q", "-m", "nested")
    (wt / "src/.gitmodules").write_text('[submodule "x"]\n\tpath = x\n\turl = /tmp/x\n')
    audit = ws.audit(paths.Allowlist.parse(["src"]))
    reasons = {r.change.path: r.reason for r in audit.rejected}
    assert "symlink" in reasons["src/link.py"]
    assert "nested" in reasons["src/nested"]
    assert ".gitmodules" in reasons["src/.gitmodules"]
    assert not (wt / "src/link.py").is_symlink()
    assert not (nested / ".git").exists()
    # the nested repo's files are plain files now, judged by the allowlist like any other
    assert [c.path for c in audit.allowed] == ["src/nested/f.txt"]
    assert all(not c.is_gitlink for c in audit.allowed)


def test_gitlink_via_git_file_is_refused(source: Path, tmp_path: Path) -> None:
    other = make_repo(tmp_path / "other", {"o.txt": "o\n"})
    ws = make_ws(source)
    sub = ws.work_tree / "src/sub"
    sub.mkdir()
    (sub / ".git").write_text(f"gitdir: {other / '.git'}\n")
    audit = ws.audit(paths.Allowlist.parse(["src"]))
    assert all(not c.is_gitlink for c in audit.allowed)
    assert any(r.change.path == "src/sub" and r.refused for r in audit.rejected)
    assert not (sub / ".git").exists()
    assert git(other, "status", "--porcelain") == ""


def test_agent_commit_in_workspace_is_a_violation(source: Path) -> None:
    ws = make_ws(source)
    (ws.work_tree / "src/app.py").write_text("x = 3\n")
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": os.environ["HOME"]}
    subprocess.run(
        ["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qam", "agent"],
        cwd=ws.work_tree,
        env=env,
        check=True,
    )
    subprocess.run(["git", "tag", "sneaky"], cwd=ws.work_tree, env=env, check=True)
    audit = ws.audit(paths.Allowlist.parse(["src"]))
    assert any("HEAD" in v for v in audit.violations)
    assert any("refs" in v for v in audit.violations)


def test_patch_applies_on_clean_base_and_reproduces_tree(source: Path, tmp_path: Path) -> None:
    ws = make_ws(source)
    wt = ws.work_tree
    (wt / "src/app.py").write_text("x = 10\n")
    (wt / "src/util.py").unlink()
    (wt / "src/bin.dat").write_bytes(b"\x00\x01\xff" * 100)
    (wt / "bin/tool.sh").chmod(0o755)
    ws.audit(paths.Allowlist.parse(["src", "bin"]))
    tree = ws.keep()
    exported = ws.export(tree)
    assert exported.applies_on_base and exported.detail == ""
    clone = tmp_path / "check"
    git(tmp_path, "clone", "-q", str(source), str(clone))
    git(clone, "apply", "--binary", "--index", str(exported.patch_path))
    assert git(clone, "write-tree").strip() == tree


def test_restore_tree_goes_back_exactly(source: Path) -> None:
    ws = make_ws(source)
    allow = paths.Allowlist.parse(["src"])
    (ws.work_tree / "src/app.py").write_text("best\n")
    ws.audit(allow)
    best = ws.keep()
    (ws.work_tree / "src/app.py").write_text("worse\n")
    (ws.work_tree / "src/extra.py").write_text("extra\n")
    ws.audit(allow)
    assert ws.current_tree is None  # unknown until the audited state is kept
    ws.restore(best)
    assert ws.current_tree == best
    assert (ws.work_tree / "src/app.py").read_text() == "best\n"
    assert not (ws.work_tree / "src/extra.py").exists()
    assert ws.keep() == best


def test_release_removes_read_only_leftovers(source: Path) -> None:
    ws = make_ws(source)
    locked = ws.work_tree / "src/locked"
    locked.mkdir()
    (locked / "f").write_text("x")
    locked.chmod(0o000)
    assert ws.release()


def test_leftover_of_dead_process_is_found(source: Path) -> None:
    ws = make_ws(source)
    lease = workspace.read_lease(ws.root)
    assert lease is not None and workspace.lease_is_live(lease)
    assert workspace.find_leftovers() == []
    lease["pid"] = 2**22 + 12345  # no such process
    (ws.root / "lease.json").write_text(__import__("json").dumps(lease))
    found = workspace.find_leftovers()
    assert [f.root for f in found] == [ws.root]


@pytest.mark.skipif(tracking.hierarchy() is None, reason="no writable cgroup to track runs in")
def test_releasing_a_workspace_removes_its_runs_cgroup(tmp_path: Path) -> None:
    source = make_repo(tmp_path / "source", {"a.txt": "a\n"})
    repo = repo_git.open_source(source)
    run_id = f"ws-group-{uuid.uuid4().hex[:8]}"
    ws = workspace.create(repo, repo.out("rev-parse", "HEAD"), run_id=run_id)
    group = tracking.run_group(run_id)
    assert group is not None
    try:
        done = proc.run(["true"], cwd=ws.work_tree, env=ws.env(), timeout_s=30)
        assert done.exit_code == 0, done.stderr
        assert group.is_dir(), "the run's command kept no leaf for the next one"
    finally:
        ws.release()
    assert not group.exists(), "the run's cgroup outlived its workspace"


def test_the_kept_state_is_the_tree_the_audit_wrote_out(source: Path) -> None:
    """`keep` right after an audit is the tree the audit judged and wrote the work tree from:
    the allowed change in, the refused one gone, and what the index says."""
    ws = make_ws(source)
    (ws.work_tree / "src/app.py").write_text("x = 2\n")
    (ws.work_tree / "README.md").write_text("outside the allowlist\n")
    audit = ws.audit(paths.Allowlist.parse(["src"]))
    assert [c.path for c in audit.allowed] == ["src/app.py"]
    assert ws.keep() == audit.tree == ws.paths.repo.out("write-tree")
    base_readme = git(source, "rev-parse", "HEAD:README.md").strip()
    repo = ws.paths.repo
    assert repo.out("rev-parse", f"{audit.tree}:README.md") == base_readme
    assert repo.out("cat-file", "-p", f"{audit.tree}:src/app.py") == "x = 2"
