"""Before/after fingerprints of the source repo: the evidence behind `source_unchanged`.

A snapshot records HEAD, every ref, the bytes of the index, config, packed-refs, hooks and
info files, `git status`, and a stat fingerprint of every untracked file. Taking one never
writes to the repo (`GIT_OPTIONAL_LOCKS=0` keeps `git status` from refreshing the index).
Comparing two snapshots names each thing that changed.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import code_runner.repo.git as git

_GIT_FILES = ("HEAD", "index", "config", "packed-refs", "info/exclude", "info/attributes")


@dataclass(frozen=True)
class SourceSnapshot:
    head: str | None
    head_ref: str
    refs: dict[str, str]
    git_files: dict[str, str]  # name -> sha256 of bytes ("" when absent)
    hooks: dict[str, str]
    status: tuple[str, ...]  # porcelain v1 lines (human-readable)
    untracked: dict[str, str]  # path -> "size:mtime_ns:mode"
    tracked_dirty: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "head": self.head,
            "head_ref": self.head_ref,
            "refs": dict(sorted(self.refs.items())),
            "status": list(self.status),
        }


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return ""


def _stat_key(path: Path) -> str:
    try:
        st = path.lstat()
    except OSError:
        return "missing"
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_mode:o}"


def _hooks(git_dir: Path) -> dict[str, str]:
    hooks_dir = git_dir / "hooks"
    found: dict[str, str] = {}
    try:
        entries = sorted(os.scandir(hooks_dir), key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        found[entry.name] = _stat_key(Path(entry.path)) + ":" + _digest(Path(entry.path))
    return found


def _common_dir(git_dir: Path) -> Path:
    """A linked worktree keeps refs, config and hooks in the main repo's git dir."""
    try:
        rel = (git_dir / "commondir").read_text().strip()
    except OSError:
        return git_dir
    return (git_dir / rel).resolve()


def take(repo: git.Repo) -> SourceSnapshot:
    """Fingerprint `repo` without changing a byte of it. One git call; the rest is reads."""
    assert repo.work_tree is not None
    common = _common_dir(repo.git_dir)
    try:
        head_text = (repo.git_dir / "HEAD").read_text(errors="replace").strip()
    except OSError:
        head_text = ""
    fields = repo.z(
        "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all",
        "--ignore-submodules=all",
    )  # fmt: skip
    head: str | None = None
    status: list[str] = []
    untracked: dict[str, str] = {}
    tracked_dirty: dict[str, str] = {}
    i = 0
    while i < len(fields):
        entry = git.decode_path(fields[i])
        i += 1
        kind = entry[:1]
        if kind == "#":
            if entry.startswith("# branch.oid "):
                oid = entry.split(" ", 2)[2]
                head = None if oid == "(initial)" else oid
            continue
        if kind == "?":
            path = entry[2:]
            status.append(f"?? {path}")
            untracked[path] = _stat_key(repo.work_tree / path)
            continue
        parts = entry.split(" ")
        xy = parts[1].replace(".", " ")
        if kind == "1":
            path = entry.split(" ", 8)[8]
        elif kind == "2":
            path = entry.split(" ", 9)[9]
            i += 1  # the rename's original path follows in its own field
        else:  # "u": unmerged
            path = entry.split(" ", 10)[10]
        status.append(f"{xy} {path}")
        tracked_dirty[path] = _stat_key(repo.work_tree / path)
    git_files = {name: _digest(repo.git_dir / name) for name in ("HEAD", "index")}
    for name in _GIT_FILES:
        if name not in git_files:
            git_files[name] = _digest(common / name)
    return SourceSnapshot(
        head=head,
        head_ref=head_text,
        refs=git.read_refs(common),
        git_files=git_files,
        hooks=_hooks(common),
        status=tuple(status),
        untracked=untracked,
        tracked_dirty=tracked_dirty,
    )


def differences(before: SourceSnapshot, after: SourceSnapshot) -> list[str]:  # noqa: C901 - one sentence per kind of difference
    """Each thing that changed between two snapshots, in words. Empty means unchanged."""
    changes: list[str] = []
    if before.head != after.head:
        changes.append(f"HEAD moved from {before.head} to {after.head}")
    if before.head_ref != after.head_ref:
        changes.append(f"HEAD now points at {after.head_ref!r} (was {before.head_ref!r})")
    for name in sorted(set(before.refs) | set(after.refs)):
        old, new = before.refs.get(name), after.refs.get(name)
        if old != new:
            if old is None:
                changes.append(f"ref {name} was created ({new})")
            elif new is None:
                changes.append(f"ref {name} was deleted (was {old})")
            else:
                changes.append(f"ref {name} moved from {old} to {new}")
    for name in _GIT_FILES:
        if name == "HEAD":
            continue
        if before.git_files.get(name) != after.git_files.get(name):
            changes.append(f".git/{name} changed")
    if before.hooks != after.hooks:
        changed = sorted(
            n
            for n in set(before.hooks) | set(after.hooks)
            if before.hooks.get(n) != after.hooks.get(n)
        )
        changes.append(f"hooks changed: {', '.join(changed)}")
    if before.status != after.status:
        gained = sorted(set(after.status) - set(before.status))
        lost = sorted(set(before.status) - set(after.status))
        if gained:
            changes.append(f"git status gained: {'; '.join(gained[:20])}")
        if lost:
            changes.append(f"git status lost: {'; '.join(lost[:20])}")
    for label, old_map, new_map in (
        ("untracked", before.untracked, after.untracked),
        ("modified", before.tracked_dirty, after.tracked_dirty),
    ):
        touched = sorted(p for p in set(old_map) & set(new_map) if old_map[p] != new_map[p])
        if touched:
            changes.append(f"{label} files were rewritten: {', '.join(touched[:20])}")
    return changes
