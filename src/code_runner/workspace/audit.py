"""Create, audit and release the disposable checkout an agent works in.

A workspace is `git clone --shared --no-checkout --separate-git-dir` of the source into the
runner's state dir, then a hardened checkout of the base commit. A linked `git worktree`
would share the source's git dir (refs, config, hooks); a clone shares only read-only
objects through `alternates`, and inherits none of the source's config, hooks or filters.

The audit reads what changed from real git state, refuses what no agent may change
(`.git` in any spelling, symlinks, gitlinks, `.gitmodules`), drops what is outside the
allowlist, and removes every untracked or ignored leftover, so the work tree is exactly
base + the allowed changes when the DoD runs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import code_runner.workspace.overlay as overlay
from code_runner import files
from code_runner.files import force_rmtree, walk
from code_runner.repo import git
from code_runner.task import paths
from code_runner.workspace.layout import WorkspacePaths
from code_runner.workspace.trees import materialize

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
    tree: str = ""  # the tree the index and the work tree hold after the audit

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
class GitState:
    """The workspace's own git state; an agent changing it is a violation.

    `objects` fingerprints the object files that exist (inode and size): the runner only
    adds objects, so one that vanished or was rewritten is the agent's doing."""

    head: str
    refs: str
    config: str
    pointer: str
    index_flags: tuple[str, ...] = ()
    info: str = ""
    alternates: str = ""
    objects: frozenset[tuple[str, int, int]] = frozenset()

    def violations(self, after: GitState) -> list[str]:
        """What changed from this state to `after` that no agent may change."""
        found: list[str] = []
        if after.head != self.head:
            found.append(f"workspace HEAD changed ({self.head} -> {after.head})")
        if after.refs != self.refs:
            found.append("workspace refs changed (a commit, tag, branch or stash was made)")
        if after.config != self.config:
            found.append("workspace git config changed")
        if after.pointer != self.pointer:
            found.append("the workspace .git pointer was changed")
        if after.index_flags != self.index_flags:
            flagged = ", ".join(after.index_flags[:5])
            found.append(f"index flags (assume-unchanged / skip-worktree) were set: {flagged}")
        if after.info != self.info:
            found.append(
                "the workspace's .git/info (attributes, excludes, sparse-checkout) changed"
            )
        if after.alternates != self.alternates:
            found.append("the workspace's object alternates changed")
        if not self.objects <= after.objects:
            gone = sorted(name for name, _, _ in self.objects - after.objects)
            found.append(
                f"objects in the workspace's git dir were removed or rewritten: {gone[:3]}"
            )
        return found


def _tree_digest(root: Path) -> str:
    """One digest of every file under `root` (names, kinds and bytes); '' when absent."""
    if not root.is_dir():
        return "" if not root.exists() and not root.is_symlink() else "not a directory"
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in walk(root):
        dirnames.sort()
        here = Path(dirpath)
        links = [d for d in dirnames if (here / d).is_symlink()]
        for name in sorted(filenames + links):
            path = here / name
            digest.update(path.relative_to(root).as_posix().encode("utf-8", "surrogateescape"))
            try:
                if path.is_symlink():
                    digest.update(b"\0link\0" + str(path.readlink()).encode())
                else:
                    digest.update(b"\0file\0")
                    for piece in files.read_chunks(path):  # never whole: it may be large
                        digest.update(piece)
            except OSError as exc:
                digest.update(f"\0error {exc.errno}".encode())
    return digest.hexdigest()


def object_files(git_dir: Path) -> frozenset[tuple[str, int, int]]:
    found: set[tuple[str, int, int]] = set()
    objects = git_dir / "objects"
    for dirpath, dirnames, filenames in walk(objects):
        here = Path(dirpath)
        if here == objects / "info":
            dirnames.clear()
            continue
        for name in filenames:
            try:
                st = (here / name).lstat()
            except OSError:
                continue
            found.add((str((here / name).relative_to(objects)), st.st_ino, st.st_size))
    return frozenset(found)


_FLAGGED = re.compile(rb"(?:^|\x00)([a-zS]) ([^\x00]*)")


def index_flags(ws: WorkspacePaths) -> tuple[str, ...]:
    """Index entries marked assume-unchanged (`git ls-files -v`: a lower-case tag) or
    skip-worktree (`S`): git stops looking at their work-tree files. Found by one scan of
    git's output, not a loop over every entry."""
    listed = ws.repo.run("ls-files", "-v", "-z").stdout
    return tuple(sorted(git.decode_path(m.group(2)) for m in _FLAGGED.finditer(listed)))


def git_state(ws: WorkspacePaths, *, fresh: bool = False) -> GitState:
    """The workspace's git state now. `fresh`: its index was just made by the runner (a
    checkout, or the cache's verified copy), so no entry carries a flag and none is read."""
    head = (ws.git_dir / "HEAD").read_text(errors="replace").strip()
    refs = json.dumps(git.read_refs(ws.git_dir), sort_keys=True)
    config = hashlib.sha256((ws.git_dir / "config").read_bytes()).hexdigest()
    pointer_path = ws.work_tree / ".git"
    try:
        pointer = pointer_path.read_text(errors="replace") if pointer_path.is_file() else "?"
    except OSError:
        pointer = "?"
    if pointer_path.is_symlink():
        pointer = "symlink"
    return GitState(
        head=head,
        refs=refs,
        config=config,
        pointer=pointer,
        index_flags=() if fresh else index_flags(ws),
        info=_tree_digest(ws.git_dir / "info"),
        alternates=_tree_digest(ws.git_dir / "objects" / "info"),
        objects=object_files(ws.git_dir),
    )


def restore_git_pointer(ws: WorkspacePaths) -> None:
    """Put the `.git` pointer file back exactly as the runner wrote it."""
    pointer_path = ws.work_tree / ".git"
    if pointer_path.is_dir() and not pointer_path.is_symlink():
        force_rmtree(pointer_path)
    elif pointer_path.exists() or pointer_path.is_symlink():
        pointer_path.unlink()
    files.atomic_write_text(pointer_path, f"gitdir: {ws.git_dir}\n")


def _stage_all(ws: WorkspacePaths) -> None:
    # --ignore-errors: an unreadable file must not hide every other change
    if not ws.overlay:
        ws.repo.run("add", "--all", "--ignore-errors", "--", ".", check=False)
        return
    present = _forget_upper(ws)
    if present:
        ws.repo.run(
            "add",
            "--all",
            "--ignore-errors",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
            input_bytes=_nul_list(present),
            env={"GIT_LITERAL_PATHSPECS": "1"},
            check=False,
        )


def _nul_list(listed: list[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in listed)


def _forget_upper(ws: WorkspacePaths) -> list[str]:
    """Drop the index entries of every path the overlay's upper layer holds, so `git add`
    reads each of them again; return those that still exist, which is all `git add` needs
    to see (what no longer exists is now staged as deleted). An overlay's index trusts size
    and mtime only (`core.checkStat=minimal`), which an agent can keep while changing a
    file's bytes; every write lands in the upper layer, so nothing changed escapes this,
    and nothing outside it needs reading: O(changes), not O(files)."""
    leaves, replaced = overlay.changed_paths(ws.root)
    listed = sorted(p for p in {*leaves, *replaced} if p != ".git")
    if not listed:
        return []
    ws.repo.run(
        "rm",
        "--cached",
        "--force",  # only the index: drop what is staged, whatever it is
        "-r",
        "-q",
        "--ignore-unmatch",
        "--pathspec-from-file=-",
        "--pathspec-file-nul",
        input_bytes=_nul_list(listed),
        env={"GIT_LITERAL_PATHSPECS": "1"},
    )
    return [p for p in listed if os.path.lexists(ws.work_tree / p)]


def read_changes(ws: WorkspacePaths) -> list[Change]:
    """Stage everything and list what differs from base: binary-safe, renames split."""
    _stage_all(ws)
    fields = ws.repo.z(
        "diff-index", "--cached", "--raw", "-z", "--no-renames", "--abbrev=40", ws.base
    )
    changes: list[Change] = []
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].decode().lstrip(":").split()
        path = git.decode_path(fields[i + 1])
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


def _judge(change: Change, allowlist: paths.Allowlist) -> tuple[str, bool] | None:
    """(reason, refused) when the change must go, None when it may stay."""
    problem = paths.path_problem(change.path)
    if problem is not None:
        return f"path {problem}", True
    if change.is_gitlink:
        return "gitlinks and nested repositories are not allowed", True
    if change.is_symlink:
        return "symlinks are not allowed", True
    if not allowlist.allows(change.path):
        return "outside the allowlist", False
    return None


def audit(ws: WorkspacePaths, allowlist: paths.Allowlist, before: GitState) -> Audit:
    """Enforce the rules on the work tree; afterwards it is exactly base + `allowed`."""
    after = git_state(ws)
    violations = before.violations(after)
    if after.pointer != before.pointer:
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
        base_paths = {git.decode_path(p) for p in existing}
        clashes = paths.case_collisions(base_paths | set(added_paths))
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
    clean(ws)
    # the DoD judges exactly the staged tree, as base would check it out; the flags were
    # read above (`after`), and nothing since sets one
    tree = materialize(ws, unflagged=not after.index_flags)
    return Audit(tuple(allowed), tuple(rejected), tuple(violations), tree=tree)


def _remove_dot_git_entries(ws: WorkspacePaths) -> list[tuple[str, str]]:
    """Remove nested repositories and every `.git`-like entry but the root's pointer file.

    Git refuses such paths (`git add` skips them), so they would otherwise stay behind
    unseen, hide a subtree from the audit, or be there when the DoD runs. Returns
    (path, reason) for each removal. An overlay's new entries are all in its upper layer:
    only that is walked (names found there are removed through the work tree).
    """
    top = overlay.upper_dir(ws.root) if ws.overlay else ws.work_tree
    removed: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in walk(top):
        here = Path(dirpath)
        rel = here.relative_to(top)
        if here != top and (".git" in dirnames or ".git" in filenames):
            # a nested repository: its git dir goes, its files are judged like any other
            removed.append(
                (rel.as_posix(), "nested repositories are not allowed (its .git was removed)")
            )
        for name in [n for n in dirnames if paths.is_dot_git(n)]:
            dirnames.remove(name)
            target = ws.work_tree / rel / name
            if target.is_dir() and not target.is_symlink():
                force_rmtree(target)
            elif os.path.lexists(target):
                target.unlink()
            removed.append(((rel / name).as_posix(), "names git's own directory"))
        for name in filenames:
            if paths.is_dot_git(name) and not (here == top and name == ".git"):
                target = ws.work_tree / rel / name
                if not os.path.lexists(target):
                    continue  # an overlay's whiteout: a deletion, not an entry
                target.unlink()
                removed.append(((rel / name).as_posix(), "names git's own directory"))
    return removed


def _revert(ws: WorkspacePaths, changes: list[Change]) -> None:
    """Return each path to its base state, in the index and on disk."""
    nul = b"\0".join(c.path.encode("utf-8", "surrogateescape") for c in changes) + b"\0"
    env = {"GIT_LITERAL_PATHSPECS": "1"}
    ws.repo.run(
        "reset",
        "--quiet",
        "--no-refresh",
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
        ws.write("checkout-index", "--force", "-z", "--stdin", input_bytes=data)


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


def clean(ws: WorkspacePaths) -> None:
    """Remove untracked and ignored files: the DoD sees only base + the staged changes.

    In an overlay, nothing untracked can be outside its upper layer: only the paths there
    are cleaned, then the directories left empty (base has none: git tracks no directory)."""
    if not ws.overlay:
        ws.repo.run("clean", "-ffdxq", "--", ".")
        return
    leaves, _ = overlay.changed_paths(ws.root)
    present = [p for p in leaves if p != ".git" and os.path.lexists(ws.work_tree / p)]
    for start in range(0, len(present), 500):
        ws.repo.run(
            "clean",
            "-ffdxq",
            "--",
            *present[start : start + 500],
            env={"GIT_LITERAL_PATHSPECS": "1"},
        )
    _remove_empty_dirs(ws)


def _remove_empty_dirs(ws: WorkspacePaths) -> None:
    upper = overlay.upper_dir(ws.root)
    for dirpath, _, _ in sorted(walk(upper), key=lambda entry: -len(entry[0])):
        rel = Path(dirpath).relative_to(upper)
        target = ws.work_tree / rel
        if rel.parts and target.is_dir() and not target.is_symlink():
            with contextlib.suppress(OSError):
                target.rmdir()  # only when empty
