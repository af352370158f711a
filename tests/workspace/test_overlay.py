"""A root runner's sandboxed workspace is an overlay over the shared checkout cache: made by
a mount, its files the sandbox uid's without a chown, its audit reading only what the upper
layer holds, yet seeing every change (a same-size edit with its old mtime put back, a
deletion, a directory replaced), and leaving the work tree exactly base + the allowed
changes. The cache's files are never written, a held entry is never evicted, a tampered one
never used; where an overlay may not be used the workspace is a clone and says why."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from code_runner import files, proc, workspace
from code_runner.repo import git
from code_runner.task.paths import Allowlist
from code_runner.workspace import checkouts, overlay
from tests.helpers.git import git as run_git
from tests.helpers.git import make_repo
from tests.helpers.sandboxes import owned_session

pytestmark = pytest.mark.integration

OWNER = (2_000_000_322, 2_000_000_322)
FILES = {
    "a.txt": "alpha\n",
    "gone.txt": "bye\n",
    "pkg/b.py": "b = 1\n",
    "pkg/deep/c.txt": "c\n",
    "old/x.txt": "x\n",
    "old/y.txt": "y\n",
}


def _fingerprint(root: Path) -> dict[str, tuple[int, int, str]]:
    found = {}
    for here, _, names in os.walk(root):
        for name in names:
            path = Path(here, name)
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(root))] = (st.st_mode, st.st_mtime_ns, digest)
    return found


def _tree(root: Path) -> dict[str, str]:
    found = {}
    for here, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in names:
            if name != ".git" or Path(here) != root:
                found[str(Path(here, name).relative_to(root))] = Path(here, name).read_text()
    return found


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    return git.open_source(make_repo(tmp_path / "source", FILES))


def _sandboxed(ws: workspace.Workspace, script: str) -> None:
    session = owned_session(ws, "overlay", OWNER)
    with session:
        assert session.hand_over() == 0, "the overlay's tree is the sandbox uid's already"
        ran = proc.run(
            session.wrap(proc.shell_argv(script)), cwd=ws.work_tree, env=ws.env(), timeout_s=60
        )
    assert ran.ok, ran.stderr


def test_an_overlay_workspace_sees_every_change_and_never_writes_the_cache(
    repo: git.Repo,
) -> None:
    head = repo.out("rev-parse", "HEAD")
    ws = workspace.create(repo, head, run_id="ovl1", owner=OWNER)
    try:
        assert ws.kind == "overlay", ws.fallback
        (entry,) = [p for p in checkouts.cache_dir().iterdir() if p.is_dir()]
        cached = _fingerprint(entry / "tree")
        owners = {Path(h, n).lstat().st_uid for h, _, ns in os.walk(ws.work_tree) for n in ns}
        assert owners - {0} == {OWNER[0]}  # root's: only the runner's `.git` pointer
        # same size, old mtime put back: an index trusting only size and mtime would miss it
        _sandboxed(
            ws,
            "stat -c %y a.txt > /tmp/m && printf 'ALPHA\\n' > a.txt && "
            'touch -d "$(cat /tmp/m)" a.txt && rm gone.txt && echo new > pkg/new.txt && '
            "echo outside > pkg/b.py && rm -r old && mkdir old && echo z > old/z.txt && "
            "mkdir junk && echo j > junk/j.txt",
        )
        found = ws.audit(Allowlist.parse(["a.txt", "gone.txt", "pkg/new.txt", "old"]))
        assert sorted(c.path for c in found.allowed) == [
            "a.txt",
            "gone.txt",
            "old/x.txt",
            "old/y.txt",
            "old/z.txt",
            "pkg/new.txt",
        ]
        assert sorted(r.change.path for r in found.rejected) == ["junk/j.txt", "pkg/b.py"]
        expected = {**FILES, "a.txt": "ALPHA\n", "pkg/new.txt": "new\n", "old/z.txt": "z\n"}
        for name in ("gone.txt", "old/x.txt", "old/y.txt"):
            del expected[name]
        assert _tree(ws.work_tree) == expected
        assert not (ws.work_tree / "junk").exists()
        assert _fingerprint(entry / "tree") == cached, "the shared cache was written"
        # the cache's files are mounted below the work tree read-only, and a recursive
        # delete of the workspace is refused while anything is mounted in it
        with pytest.raises(OSError, match="Read-only file system"):
            (ws.root / "lower" / "a.txt").write_text("through the lower mount")
        with pytest.raises(OSError, match="a file system is mounted at"):
            files.force_rmtree(ws.root)
        assert _fingerprint(entry / "tree") == cached
        # a kept state comes back exactly, and the patch applies to a clean base
        kept = ws.keep()
        (ws.work_tree / "a.txt").write_text("later\n")
        ws.audit(Allowlist.parse(["a.txt"]))
        ws.restore(kept)
        assert _tree(ws.work_tree) == expected
        exported = ws.export(kept)
        assert exported.applies_on_base, exported.detail
        status = ws.repo.out("status", "--porcelain", "--untracked-files=all")
        assert sorted(status.splitlines()) == [
            "A  old/z.txt",
            "A  pkg/new.txt",
            "D  gone.txt",
            "D  old/x.txt",
            "D  old/y.txt",
            "M  a.txt",
        ]
    finally:
        assert ws.release()
    assert not (ws.root / "wt").exists()
    assert _fingerprint(entry / "tree") == cached


def test_after_a_sandboxed_command_only_the_upper_layer_is_counted_again(
    repo: git.Repo,
) -> None:
    """The disk budget's check after a sandboxed tool call counts again only the parts the
    command could write (the overlay's upper layer and its scratch dir: what changed), and
    finds what a full count finds; a part it could not write is taken as last counted."""
    head = repo.out("rev-parse", "HEAD")
    ws = workspace.create(repo, head, run_id="ovl-du", owner=OWNER)
    try:
        assert ws.kind == "overlay", ws.fallback
        assert ws.tree_parts() == {"upper", "ovl-work"}
        session = owned_session(ws, "overlay-du", OWNER)
        with session:
            assert ws.written_bytes() < 1 << 20  # a full count once the session is open
            script = (
                "head -c 3000000 /dev/zero > big.bin && mkdir d && "
                "for i in $(seq 1 50); do head -c 8192 /dev/zero > d/$i; done"
            )
            ran = session.run(proc.shell_argv(script), cwd=ws.work_tree, env=ws.env(), timeout_s=60)
            assert ran.ok, ran.stderr
            counted = ws.written_bytes(tree_only=True)
            assert counted >= 3_000_000 + 50 * 8192
            assert counted == ws.written_bytes(), "the tree's count differs from a full count"
        # HOME is the runner's (a sandboxed command has a tmpfs of its own there): not
        # counted again after a command, but by the next full count (every round, every DoD)
        (ws.paths.home_dir / "cache.bin").write_bytes(b"\1" * 2_000_000)
        assert ws.written_bytes(tree_only=True) == counted
        assert ws.written_bytes() >= counted + 2_000_000
        (ws.work_tree / "big.bin").unlink()
        after = ws.written_bytes(tree_only=True)  # HOME's 2 MB as the full count found them
        assert after == ws.written_bytes() and after < counted
    finally:
        assert ws.release()


def test_the_cache_is_shared_verified_and_bounded(
    repo: git.Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = repo.out("rev-parse", "HEAD")
    first = workspace.create(repo, head, run_id="ovl2", owner=OWNER)
    (entry,) = [p for p in checkouts.cache_dir().iterdir() if p.is_dir()]
    made = (entry / "ok").stat().st_ino
    second = workspace.create(repo, head, run_id="ovl3", owner=OWNER)
    assert (entry / "ok").stat().st_ino == made, "the second workspace built its own checkout"
    assert repo.work_tree is not None
    (repo.work_tree / "a.txt").write_text("other\n")
    run_git(repo.work_tree, "commit", "-qam", "two")
    monkeypatch.setenv(checkouts.ENTRIES_ENV, "1")
    third = workspace.create(repo, repo.out("rev-parse", "HEAD"), run_id="ovl4", owner=OWNER)
    assert entry.exists(), "an entry held by a workspace was evicted"
    first.release()
    second.release()
    third.release()
    fourth = workspace.create(repo, head, run_id="ovl5", owner=OWNER)  # evicts the idle one
    fourth.release()
    assert len([p for p in checkouts.cache_dir().iterdir() if p.is_dir()]) == 1
    # an entry whose index does not match its record is rebuilt, never used
    (entry / "index").write_bytes(b"tampered")
    fifth = workspace.create(repo, head, run_id="ovl6", owner=OWNER)
    assert (fifth.work_tree / "a.txt").read_text() == FILES["a.txt"]
    assert fifth.repo.out("status", "--porcelain") == ""
    fifth.release()


def test_where_an_overlay_may_not_be_used_the_workspace_is_a_clone_and_says_why(
    repo: git.Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = repo.out("rev-parse", "HEAD")
    for kwargs, words in [
        ({}, "sandbox uid"),
        ({"owner": OWNER, "cached": False}, "agent runs as the runner"),
    ]:
        ws = workspace.create(repo, head, run_id="clone", **kwargs)  # type: ignore[arg-type]
        assert (ws.kind, words in ws.fallback) == ("clone", True), ws.fallback
        ws.release()
    monkeypatch.setenv(overlay.MODE_ENV, "clone")
    ws = workspace.create(repo, head, run_id="clone2", owner=OWNER)
    assert ws.kind == "clone" and overlay.MODE_ENV in ws.fallback
    ws.release()


def test_a_dead_runs_overlay_is_taken_down_before_its_files_go(repo: git.Repo) -> None:
    ws = workspace.create(repo, repo.out("rev-parse", "HEAD"), run_id="ovl7", owner=OWNER)
    assert ws.kind == "overlay"
    workspace.remove_root(ws.root)  # what `gc` does for a run that died with it mounted
    assert not ws.root.exists()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(ws.root) not in mounts


@pytest.mark.parametrize("object_format", ["sha1", "sha256"])
def test_an_overlays_git_dir_borrows_the_source_objects_and_nothing_else(
    tmp_path: Path, object_format: str
) -> None:
    """No git runs in the source to make it: the git dir reads the source's objects through
    alternates and holds none of its refs, remotes or config; HEAD is base, detached."""
    source = tmp_path / f"source-{object_format}"
    source.mkdir()
    run_git(source, "init", "-q", f"--object-format={object_format}")
    for name, text in FILES.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    run_git(source, "add", "-A")
    run_git(source, "commit", "-qm", "base")
    run_git(source, "branch", "feature")
    repo = git.open_source(source)
    head = repo.out("rev-parse", "HEAD")
    ws = workspace.create(repo, head, run_id=f"borrow-{object_format}", owner=OWNER)
    try:
        assert ws.kind == "overlay", ws.fallback
        alternates = (ws.git_dir / "objects/info/alternates").read_text()
        assert alternates == f"{source / '.git/objects'}\n"
        assert ws.repo.out("for-each-ref") == ""  # neither the source's branches nor a remote
        assert "remote" not in (ws.git_dir / "config").read_text()
        assert ws.repo.out("rev-parse", "HEAD") == head
        assert ws.repo.out("status", "--porcelain") == ""
        (ws.work_tree / "a.txt").write_text("changed\n")
        found = ws.audit(Allowlist.parse(["a.txt"]))
        assert [c.path for c in found.allowed] == ["a.txt"]
        assert ws.export(ws.keep()).applies_on_base
    finally:
        assert ws.release()


def test_an_index_flag_in_an_overlay_is_a_violation(repo: git.Repo) -> None:
    """A flagged entry (here set from outside the sandbox, where the git dir is writable)
    is a violation, and the allowed change is still judged."""
    ws = workspace.create(repo, repo.out("rev-parse", "HEAD"), run_id="flag1", owner=OWNER)
    try:
        assert ws.kind == "overlay", ws.fallback
        ws.repo.run("update-index", "--assume-unchanged", "a.txt")
        (ws.work_tree / "pkg/b.py").write_text("b = 2\n")
        found = ws.audit(Allowlist.parse(["pkg"]))
        assert any("index flags" in v for v in found.violations), found.violations
        assert [c.path for c in found.allowed] == ["pkg/b.py"]
        assert ws.keep() == ws.repo.out("write-tree")
    finally:
        assert ws.release()
