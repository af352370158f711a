"""Create, audit and release the disposable checkout an agent works in.

A workspace is `git clone --shared --no-checkout --separate-git-dir` of the source into the
runner's state dir, then a hardened checkout of the base commit. A linked `git worktree`
would share the source's git dir (refs, config, hooks); a clone shares only read-only
objects through `alternates`, and inherits none of the source's config, hooks or filters.

The audit reads what changed from real git state, refuses what no agent may change
(`.git` in any spelling, symlinks, gitlinks, `.gitmodules`), drops what is outside the
allowlist, and removes every untracked or ignored leftover, so the work tree is exactly
base + the allowed changes when the DoD runs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import psutil

from code_runner import dirs, fsx, gitx, policy, proc
from code_runner.errors import LockHeld, PreflightError

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
LOCK_TIMEOUT_S = 120.0
_ZERO_SHA = "0" * 40


class ChangeKind(StrEnum):
    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    MODE_CHANGED = "mode_changed"
    TYPE_CHANGED = "type_changed"


@dataclass(frozen=True)
class Change:
    """One path that differs from base, read from `git diff-index --raw -z`."""

    path: str
    kind: ChangeKind
    old_mode: str
    new_mode: str

    @property
    def is_symlink(self) -> bool:
        return self.new_mode == "120000" or self.old_mode == "120000"

    @property
    def is_gitlink(self) -> bool:
        return self.new_mode == "160000" or self.old_mode == "160000"

    def to_dict(self) -> dict[str, str]:
        return {
            "path": self.path,
            "kind": self.kind.value,
            "old_mode": self.old_mode,
            "new_mode": self.new_mode,
        }


@dataclass(frozen=True)
class Rejection:
    change: Change
    reason: str
    refused: bool  # True: a safety refusal; False: merely outside the allowlist

    def to_dict(self) -> dict[str, object]:
        return {**self.change.to_dict(), "reason": self.reason, "refused": self.refused}


@dataclass(frozen=True)
class Audit:
    """What an audit found and did. `allowed` is what the patch will contain."""

    allowed: tuple[Change, ...]
    rejected: tuple[Rejection, ...]
    violations: tuple[str, ...]

    @property
    def changed_allowed(self) -> bool:
        return bool(self.allowed)

    def to_dict(self) -> dict[str, object]:
        return {
            "allowed": [c.to_dict() for c in self.allowed],
            "rejected": [r.to_dict() for r in self.rejected],
            "violations": list(self.violations),
        }


@dataclass(frozen=True)
class Workspace:
    run_id: str
    root: Path
    source_dir: Path
    base: str

    @property
    def work_tree(self) -> Path:
        return self.root / "wt"

    @property
    def git_dir(self) -> Path:
        return self.root / "git"

    @property
    def home_dir(self) -> Path:
        """A private HOME and TMPDIR for commands, so nothing lands in the user's."""
        return self.root / "home"

    @property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    @property
    def repo(self) -> gitx.Repo:
        return gitx.Repo(git_dir=self.git_dir, work_tree=self.work_tree)


@dataclass(frozen=True)
class GitState:
    """The workspace's own git state; an agent changing it is a violation."""

    head: str
    refs: str
    config: str
    pointer: str


# --- locking and leases ---------------------------------------------------------------


@contextlib.contextmanager
def source_lock(source_git_dir: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Serialise workspace set-up per source, so concurrent runs can share one source."""
    lock_dir = dirs.locks_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(str(source_git_dir).encode()).hexdigest()[:24]
    path = lock_dir / f"{key}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    raise LockHeld(
                        f"another code-runner process has held the lock for {source_git_dir} "
                        f"for over {timeout_s:.0f} s.",
                        fix="wait for it to finish, or run `code-runner gc` if it was killed.",
                    ) from exc
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _write_lease(root: Path, run_id: str, source_dir: Path, output_dir: Path | None) -> None:
    fsx.atomic_write_json(
        root / "lease.json",
        {
            "run_id": run_id,
            "pid": os.getpid(),
            "pid_started": _process_start(os.getpid()),
            "source": str(source_dir),
            "output_dir": str(output_dir) if output_dir else None,
            "created_at": time.time(),
        },
    )


def read_lease(root: Path) -> dict[str, object] | None:
    try:
        data = json.loads((root / "lease.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def lease_is_live(lease: dict[str, object]) -> bool:
    """True when the process that made the lease is still the same process, still running."""
    pid = lease.get("pid")
    started = lease.get("pid_started")
    if not isinstance(pid, int):
        return False
    actual = _process_start(pid)
    if actual is None:
        return False
    return not isinstance(started, int | float) or abs(actual - started) < 1.0


# --- create ---------------------------------------------------------------------------


def create(
    source: gitx.Repo, base: str, *, run_id: str, output_dir: Path | None = None
) -> Workspace:
    """Make a disposable checkout of `source` at `base`. The source is only read."""
    assert source.work_tree is not None
    root = dirs.workspaces_dir() / run_id
    root.mkdir(parents=True, exist_ok=False)
    ws = Workspace(run_id=run_id, root=root, source_dir=source.work_tree, base=base)
    _write_lease(root, run_id, source.work_tree, output_dir)
    ws.home_dir.mkdir()
    ws.tmp_dir.mkdir()
    clone = gitx.Repo(git_dir=ws.git_dir, work_tree=None)
    with source_lock(source.git_dir):
        result = proc.capture(
            [
                "git",
                *gitx.HARDENING,
                "clone",
                "--quiet",
                "--shared",
                "--no-checkout",
                "--no-tags",
                "--template=",
                f"--separate-git-dir={ws.git_dir}",
                "--",
                str(source.git_dir),
                str(ws.work_tree),
            ],
            cwd=root,
            env=gitx.hardened_env(),
            timeout_s=gitx.GIT_TIMEOUT_S,
        )
    if not result.ok:
        raise PreflightError(
            f"could not make a workspace from {source.work_tree}: "
            + result.stderr.decode("utf-8", "replace").strip()[-500:],
            fix="check that the source repository is readable and healthy (`git fsck`).",
        )
    clone.run("remote", "remove", "origin")
    ws.repo.run("checkout", "--quiet", "--no-recurse-submodules", "--detach", base)
    return ws


def git_state(ws: Workspace) -> GitState:
    head = (ws.git_dir / "HEAD").read_text(errors="replace").strip()
    refs = json.dumps(gitx.read_refs(ws.git_dir), sort_keys=True)
    config = hashlib.sha256((ws.git_dir / "config").read_bytes()).hexdigest()
    pointer_path = ws.work_tree / ".git"
    try:
        pointer = pointer_path.read_text(errors="replace") if pointer_path.is_file() else "?"
    except OSError:
        pointer = "?"
    if pointer_path.is_symlink():
        pointer = "symlink"
    return GitState(head=head, refs=refs, config=config, pointer=pointer)


def restore_git_pointer(ws: Workspace) -> None:
    """Put the `.git` pointer file back exactly as the runner wrote it."""
    pointer_path = ws.work_tree / ".git"
    if pointer_path.is_dir() and not pointer_path.is_symlink():
        force_rmtree(pointer_path)
    elif pointer_path.exists() or pointer_path.is_symlink():
        pointer_path.unlink()
    fsx.atomic_write_text(pointer_path, f"gitdir: {ws.git_dir}\n")


# --- reading changes ------------------------------------------------------------------


def _stage_all(ws: Workspace) -> None:
    # --ignore-errors: an unreadable file must not hide every other change
    ws.repo.run("add", "--all", "--ignore-errors", "--", ".", check=False)


def read_changes(ws: Workspace) -> list[Change]:
    """Stage everything and list what differs from base: binary-safe, renames split."""
    _stage_all(ws)
    fields = ws.repo.z(
        "diff-index", "--cached", "--raw", "-z", "--no-renames", "--abbrev=40", ws.base
    )
    changes: list[Change] = []
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].decode().lstrip(":").split()
        path = gitx.decode_path(fields[i + 1])
        old_mode, new_mode, status = meta[0], meta[1], meta[4][0]
        if status == "A":
            kind = ChangeKind.ADDED
        elif status == "D":
            kind = ChangeKind.DELETED
        elif status == "T" or (old_mode[:2] != new_mode[:2]):
            kind = ChangeKind.TYPE_CHANGED
        elif meta[2] == meta[3] and old_mode != new_mode:
            kind = ChangeKind.MODE_CHANGED
        else:
            kind = ChangeKind.MODIFIED
        changes.append(Change(path=path, kind=kind, old_mode=old_mode, new_mode=new_mode))
    return changes


def _judge(change: Change, allowlist: policy.Allowlist) -> tuple[str, bool] | None:
    """(reason, refused) when the change must go, None when it may stay."""
    problem = policy.path_problem(change.path)
    if problem is not None:
        return f"path {problem}", True
    if change.is_gitlink:
        return "gitlinks and nested repositories are not allowed", True
    if change.is_symlink:
        return "symlinks are not allowed", True
    if not allowlist.allows(change.path):
        return "outside the allowlist", False
    return None


def audit(ws: Workspace, allowlist: policy.Allowlist, before: GitState) -> Audit:
    """Enforce the rules on the work tree; afterwards it is exactly base + `allowed`."""
    violations: list[str] = []
    after = git_state(ws)
    if after.head != before.head:
        violations.append(f"workspace HEAD changed ({before.head} -> {after.head})")
    if after.refs != before.refs:
        violations.append("workspace refs changed (a commit, tag, branch or stash was made)")
    if after.config != before.config:
        violations.append("workspace git config changed")
    if after.pointer != before.pointer:
        violations.append("the workspace .git pointer was changed")
        restore_git_pointer(ws)
    if after.head != before.head or after.refs != before.refs:
        # put the runner's view back so later rounds are judged against base
        ws.repo.run("update-ref", "--no-deref", "HEAD", ws.base)
    allowed: list[Change] = []
    rejected: list[Rejection] = []
    for path, why in _remove_dot_git_entries(ws):
        change = Change(path=path, kind=ChangeKind.ADDED, old_mode="000000", new_mode="000000")
        rejected.append(Rejection(change, f"{why}; removed", True))
    changes = read_changes(ws)
    for change in changes:
        verdict = _judge(change, allowlist)
        if verdict is None:
            allowed.append(change)
        else:
            rejected.append(Rejection(change, verdict[0], verdict[1]))
    added_paths = [c.path for c in allowed if c.kind is ChangeKind.ADDED]
    if added_paths:
        existing = ws.repo.z("ls-tree", "-r", "-z", "--name-only", ws.base)
        base_paths = {gitx.decode_path(p) for p in existing}
        clashes = policy.case_collisions(base_paths | set(added_paths))
        clashing = {b for _, b in clashes} | {a for a, _ in clashes}
        for change in list(allowed):
            if change.kind is ChangeKind.ADDED and change.path in clashing:
                allowed.remove(change)
                rejected.append(
                    Rejection(change, "name collides with another after case folding", True)
                )
    to_revert = [
        r.change for r in rejected if r.change.new_mode != "000000" or r.change.old_mode != "000000"
    ]
    if to_revert:
        _revert(ws, to_revert)
    _clean(ws)
    return Audit(tuple(allowed), tuple(rejected), tuple(violations))


def walk(top: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk` (top-down, prunable, symlinks not followed) without recursion.

    Python 3.11's `os.walk` recurses once per level, so an agent's 2,000-deep directory
    chain would crash the audit; this keeps an explicit stack instead.
    """
    stack = [str(top)]
    while stack:
        here = stack.pop()
        dirnames: list[str] = []
        filenames: list[str] = []
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    (dirnames if is_dir else filenames).append(entry.name)
        except OSError:
            continue
        yield here, dirnames, filenames
        stack.extend(os.path.join(here, name) for name in reversed(dirnames))


def _remove_dot_git_entries(ws: Workspace) -> list[tuple[str, str]]:
    """Remove nested repositories and every `.git`-like entry but the root's pointer file.

    Git refuses such paths (`git add` skips them), so they would otherwise stay behind
    unseen, hide a subtree from the audit, or be there when the DoD runs. Returns
    (path, reason) for each removal.
    """
    removed: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in walk(ws.work_tree):
        here = Path(dirpath)
        if here != ws.work_tree and (".git" in dirnames or ".git" in filenames):
            # a nested repository: its git dir goes, its files are judged like any other
            rel = here.relative_to(ws.work_tree).as_posix()
            removed.append((rel, "nested repositories are not allowed (its .git was removed)"))
        for name in [n for n in dirnames if policy.is_dot_git(n)]:
            force_rmtree(here / name)
            dirnames.remove(name)
            removed.append(
                ((here / name).relative_to(ws.work_tree).as_posix(), "names git's own directory")
            )
        for name in filenames:
            if policy.is_dot_git(name) and not (here == ws.work_tree and name == ".git"):
                (here / name).unlink()
                removed.append(
                    (
                        (here / name).relative_to(ws.work_tree).as_posix(),
                        "names git's own directory",
                    )
                )
    return removed


def _revert(ws: Workspace, changes: list[Change]) -> None:
    """Return each path to its base state, in the index and on disk."""
    nul = b"\0".join(c.path.encode("utf-8", "surrogateescape") for c in changes) + b"\0"
    env = {"GIT_LITERAL_PATHSPECS": "1"}
    ws.repo.run(
        "reset",
        "--quiet",
        ws.base,
        "--pathspec-from-file=-",
        "--pathspec-file-nul",
        input_bytes=nul,
        env=env,
        check=False,
    )
    for change in changes:
        _remove_path(ws.work_tree, change.path)
    in_base = [c for c in changes if c.kind is not ChangeKind.ADDED]
    if in_base:
        data = b"\0".join(c.path.encode("utf-8", "surrogateescape") for c in in_base) + b"\0"
        ws.repo.run("checkout-index", "--force", "-z", "--stdin", input_bytes=data)


def _remove_path(root: Path, rel: str) -> None:
    """Delete `root/rel` without following a symlink anywhere on the way."""
    target = root
    parts = rel.split("/")
    for part in parts[:-1]:
        target = target / part
        try:
            st = target.lstat()
        except OSError:
            return
        if not stat.S_ISDIR(st.st_mode):
            return
    target = target / parts[-1]
    try:
        st = target.lstat()
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        force_rmtree(target)
    else:
        target.unlink()


def _clean(ws: Workspace) -> None:
    """Remove untracked and ignored files: the DoD sees only base + the staged changes."""
    ws.repo.run("clean", "-ffdxq", "--", ".")


def current_tree(ws: Workspace) -> str:
    """The staged state as a tree object (cheap to keep, cheap to restore)."""
    return ws.repo.out("write-tree")


def base_tree(ws: Workspace) -> str:
    """The tree of the base commit (what the index holds right after checkout)."""
    return ws.repo.out("rev-parse", f"{ws.base}^{{tree}}")


def restore_tree(ws: Workspace, tree: str) -> None:
    """Make the work tree and index exactly `tree` (used to go back to the best round)."""
    ws.repo.run("read-tree", "--reset", "-u", tree)
    _clean(ws)


def export_patch(ws: Workspace) -> bytes:
    """The staged changes against base, binary-safe; applies with `git apply` on base."""
    return ws.repo.run(
        "diff",
        "--cached",
        "--binary",
        "--full-index",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--no-color",
        ws.base,
        "--",
    ).stdout


def review_diff(ws: Workspace) -> str:
    """The same diff as text for a human (`--text`: `-diff` attributes cannot hide a change)."""
    out = ws.repo.run(
        "diff",
        "--cached",
        "--text",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--no-color",
        "--stat",
        "--patch",
        ws.base,
        "--",
    ).stdout
    return out.decode("utf-8", "replace")


def patch_applies_on_base(ws: Workspace, patch: bytes) -> tuple[bool, str]:
    """Prove the exported patch applies to a clean base, in a scratch index."""
    if not patch:
        return True, ""
    index = ws.root / "check.index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        ws.repo.run("read-tree", ws.base, env=env)
        result = ws.repo.run(
            "apply",
            "--cached",
            "--check",
            "--binary",
            "-",
            input_bytes=patch,
            env=env,
            check=False,
        )
    finally:
        with contextlib.suppress(FileNotFoundError):
            index.unlink()
    return result.ok, result.stderr.decode("utf-8", "replace").strip()


# --- release and gc -------------------------------------------------------------------


def force_rmtree(path: Path) -> None:
    """rmtree that also removes what an agent made unwritable. Never follows symlinks."""

    def onerror(func: object, failed: str, exc: object) -> None:
        parent = os.path.dirname(failed)
        with contextlib.suppress(OSError):
            os.chmod(parent, 0o700)
        with contextlib.suppress(OSError):
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, 0o700)
                shutil.rmtree(failed, ignore_errors=True)
            else:
                os.unlink(failed)

    if path.is_symlink():
        path.unlink()
        return
    try:
        shutil.rmtree(path, onerror=onerror)
    except RecursionError:  # a directory chain deeper than Python's stack: rm has no limit
        for argv in (["chmod", "-R", "u+rwx", "--", str(path)], ["rm", "-rf", "--", str(path)]):
            proc.capture(argv, cwd=None, env={"PATH": "/usr/bin:/bin"}, timeout_s=300)


def release(ws: Workspace) -> bool:
    """Remove the workspace and its git dir. True when nothing is left."""
    if ws.root.exists():
        force_rmtree(ws.root)
    return not ws.root.exists()


@dataclass(frozen=True)
class Leftover:
    root: Path
    run_id: str
    source: str | None
    output_dir: str | None
    reason: str


def find_leftovers(stale_after_s: float = 60.0) -> list[Leftover]:
    """Workspaces whose owning process is gone (killed runs)."""
    found: list[Leftover] = []
    base = dirs.workspaces_dir()
    if not base.is_dir():
        return found
    for root in sorted(base.iterdir()):
        if not root.is_dir() or root.is_symlink():
            continue
        lease = read_lease(root)
        if lease is None:
            age = time.time() - root.lstat().st_mtime
            if age > stale_after_s:
                found.append(Leftover(root, root.name, None, None, "no lease (crash at start)"))
            continue
        if lease_is_live(lease):
            continue
        found.append(
            Leftover(
                root=root,
                run_id=str(lease.get("run_id", root.name)),
                source=str(lease.get("source")) if lease.get("source") else None,
                output_dir=str(lease.get("output_dir")) if lease.get("output_dir") else None,
                reason=f"owner pid {lease.get('pid')} is gone",
            )
        )
    return found
