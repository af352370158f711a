"""Before/after fingerprints of the source repo: the evidence behind `source_unchanged`.

A snapshot records HEAD, every ref, the bytes of the index, config, packed-refs, hooks and
info files, `git status`, a stat fingerprint of every untracked, modified and ignored file,
and a fingerprint of every entry of the git dir, objects included. A stat fingerprint holds
size, mtime, ctime and inode: a rewrite that keeps size and mtime still moves the ctime,
which no user can set back. Entries of the git dir up to 1 MiB are also hashed. Objects
are fingerprinted by inode, size and (up to 1 MiB) content, not by times: git "freshens"
an object it finds already stored (it sets the mtime, through alternates too), which is
how the workspace clone's own writes touch them. Git never rewrites a pack in place.

Taking one never writes to the repo (`GIT_OPTIONAL_LOCKS=0` keeps `git status` from
refreshing the index) and never blocks: files are opened with `O_NONBLOCK | O_NOFOLLOW`,
symlinks are recorded (never followed) and FIFOs, sockets and devices are recorded, never
read. Comparing two snapshots names each thing that changed.

The index is also recorded as what it says (each entry's mode, object, stage, path and
flags), apart from its bytes: a refresh of its stat data (any `git status` or `git describe
--dirty`, as pytest plugins run at start) rewrites the bytes and keeps the entries, and the
apply step's DoD may do that.

A snapshot taken `since` an earlier one reads again only the git-dir files whose stat
changed: an entry with the same kind, mode, inode, size, mtime and ctime as then keeps the
content hash it had, when its ctime was already well in the past at the earlier snapshot
(any write since would have moved the ctime; one in the same clock tick as the earlier
read is what the margin rules out, as git's "racy" check does for its index).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import code_runner.repo.git as git
from code_runner.repo.object_files import self_consistent

_GIT_FILES = ("HEAD", "index", "config", "packed-refs", "info/exclude", "info/attributes")
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HASH_LIMIT = 1024 * 1024  # content hashes for git-dir files (outside objects/) this small
_MAX_DEPTH = 128
# A hash is reused only for an entry whose ctime is this much older than the snapshot it
# comes from: far more than the tick of the clock that stamps file times.
_RACY_MARGIN_NS = 1_000_000_000
_SHOWN = 20
_KINDS = {
    stat.S_IFREG: "file",
    stat.S_IFDIR: "dir",
    stat.S_IFLNK: "link",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "chardev",
    stat.S_IFBLK: "blockdev",
}
# What a commit writes into the git dir besides new objects (refs are compared by value).
_COMMIT_WRITES = frozenset({"HEAD", "ORIG_HEAD", "COMMIT_EDITMSG", "index"})


@dataclass(frozen=True)
class SourceSnapshot:
    head: str | None
    head_ref: str
    refs: dict[str, str]
    git_files: dict[str, str]  # name -> sha256 of bytes ("" when absent)
    hooks: dict[str, str]
    status: tuple[str, ...]  # porcelain v1 lines (human-readable)
    untracked: dict[str, str]  # path -> stat fingerprint
    tracked_dirty: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)  # path (a dir ends in /) -> print
    git_tree: dict[str, str] = field(default_factory=dict)  # git-dir entry -> fingerprint
    index_entries: str = ""  # sha256 of `ls-files --stage -v`: the entries, not stat data
    # each hashed git-dir file's full stat key (times included), and when the walk began:
    # what a later snapshot `since` this one needs to keep a hash without reading the file
    hashed_stats: dict[str, str] = field(default_factory=dict)
    taken_ns: int = 0

    @property
    def non_regular(self) -> list[str]:
        """Entries of the git dir that are neither files, dirs nor symlinks (never read)."""
        plain = ("file:", "dir:", "link:")
        return sorted(p for p, v in self.git_tree.items() if not v.startswith(plain))

    def to_dict(self) -> dict[str, object]:
        found: dict[str, object] = {
            "head": self.head,
            "head_ref": self.head_ref,
            "refs": dict(sorted(self.refs.items())),
            "status": list(self.status),
        }
        if self.non_regular:
            found["git_dir_non_regular"] = self.non_regular
        return found


# --- reading without blocking or following ---------------------------------------------


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "other")


def stat_key(st: os.stat_result, *, times: bool = True) -> str:
    """Kind, mode and inode; for a non-directory also size, mtime and ctime."""
    kind = _kind(st.st_mode)
    base = f"{kind}:{stat.S_IMODE(st.st_mode):o}:{st.st_ino}"
    if kind == "dir":
        return base
    base += f":{st.st_size}"
    return f"{base}:{st.st_mtime_ns}:{st.st_ctime_ns}" if times else base


def read_regular(name: str | Path, dir_fd: int | None = None) -> bytes | None:
    """The bytes of a regular file; None for anything else (a symlink, FIFO, device, a
    missing path). Opens with O_NONBLOCK and O_NOFOLLOW, so it never blocks or follows."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _digest(path: Path) -> str:
    """sha256 of a regular file's bytes; "" when absent; a marker for anything else."""
    data = read_regular(path)
    if data is not None:
        return hashlib.sha256(data).hexdigest()
    try:
        st = path.lstat()
    except OSError:
        return ""
    return f"not a regular file ({_kind(st.st_mode)})"


def _stat_key(path: Path) -> str:
    try:
        return stat_key(path.lstat())
    except OSError:
        return "missing"


def _walk(dir_fd: int, prefix: str, depth: int) -> Iterator[tuple[str, os.stat_result, int]]:
    """(relative path, lstat, parent dir fd) for every entry below `dir_fd`, depth first.
    Never follows a symlink; a directory that cannot be opened is listed, not entered."""
    found: list[tuple[str, os.stat_result]] = []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            try:
                found.append((entry.name, entry.stat(follow_symlinks=False)))
            except OSError:
                continue  # gone since it was listed
    for name, st in sorted(found, key=lambda item: item[0]):
        yield prefix + name, st, dir_fd
        if not stat.S_ISDIR(st.st_mode) or depth >= _MAX_DEPTH:
            continue
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            yield from _walk(child, prefix + name + "/", depth + 1)
        finally:
            os.close(child)


@dataclass
class _Hashed:
    """The content hashes of a git-dir walk: each file's full stat key, and what an earlier
    snapshot lets the walk keep (`since`, and the newest ctime it may trust)."""

    stats: dict[str, str] = field(default_factory=dict)
    since: SourceSnapshot | None = None
    trusted_before_ns: int = 0
    prefix: str = ""  # how the snapshot names this walk's entries (a linked worktree's own)

    def known(self, rel: str, st: os.stat_result) -> str | None:
        """The earlier snapshot's fingerprint of `rel`, when the file cannot have changed;
        records its stat key either way."""
        name = self.prefix + rel
        full = self.stats[name] = stat_key(st)
        since = self.since
        if since is None or st.st_ctime_ns >= self.trusted_before_ns:
            return None
        if since.hashed_stats.get(name) != full:
            return None
        return since.git_tree.get(name)

    def moved(self, rel: str, st: os.stat_result) -> bool:
        """Whether a large file under objects/ (no content hash, no times in its key) has a
        stat other than the earlier snapshot's: written in place, or only freshened by git
        (a utime); records its stat key either way."""
        name = self.prefix + rel
        full = self.stats[name] = stat_key(st)
        if self.since is None:
            return False
        earlier = self.since.hashed_stats.get(name)
        return earlier is not None and earlier != full


def _entries(root: Path, *, hashed: _Hashed | None = None) -> dict[str, str]:
    """A fingerprint of every entry under `root` (a missing root gives {}). With `hashed`
    (a git dir), regular files up to 1 MiB carry a content hash too, and objects no times."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return {}
    found: dict[str, str] = {}
    try:
        for rel, st, parent in _walk(fd, "", 0):
            key = stat_key(st, times=not (hashed is not None and rel.startswith("objects/")))
            name = rel.rsplit("/", 1)[-1]
            if stat.S_ISLNK(st.st_mode):
                try:
                    key += ":" + os.readlink(name, dir_fd=parent)
                except OSError:
                    key += ":?"
            elif hashed is not None and stat.S_ISREG(st.st_mode) and _cheap(rel, st):
                known = hashed.known(rel, st)
                if known is not None:
                    found[rel] = known
                    continue
                data = read_regular(name, dir_fd=parent)
                key += ":" + (hashlib.sha256(data).hexdigest() if data is not None else "?")
            elif (
                hashed is not None
                and stat.S_ISREG(st.st_mode)
                and rel.startswith("objects/")
                and hashed.moved(rel, st)
                and not self_consistent(name, parent)
            ):
                key += ":rewritten"  # its bytes no longer match its own hash
            found[rel] = key
    finally:
        os.close(fd)
    return found


def _cheap(rel: str, st: os.stat_result) -> bool:
    return st.st_size <= _HASH_LIMIT


def _tree_print(root: Path) -> str:
    """One fingerprint for a whole directory: its entry count and a hash of every stat key."""
    entries = _entries(root)
    digest = hashlib.sha256()
    for rel, key in entries.items():
        digest.update(f"{rel}\0{key}\n".encode("utf-8", "surrogateescape"))
    return f"tree:{_stat_key(root)}:{len(entries)}:{digest.hexdigest()}"


# --- the git dir -------------------------------------------------------------------------


def _common_dir(git_dir: Path) -> Path:
    """A linked worktree keeps refs, config and hooks in the main repo's git dir."""
    data = read_regular(git_dir / "commondir")
    if data is None:
        return git_dir
    return (git_dir / data.decode(errors="surrogateescape").strip()).resolve()


def _git_tree(git_dir: Path, common: Path, hashed: _Hashed) -> dict[str, str]:
    tree = _entries(common, hashed=hashed)
    if git_dir != common and common not in git_dir.parents:
        own = dataclasses.replace(hashed, prefix=f"{git_dir}/")  # the same `stats`
        tree.update({f"{git_dir}/{k}": v for k, v in _entries(git_dir, hashed=own).items()})
    return tree


def _refs(common: Path, tree: dict[str, str]) -> dict[str, str]:
    """Every ref as {name: value}: loose refs override packed ones, as in git."""
    refs: dict[str, str] = {}
    packed = read_regular(common / "packed-refs") or b""
    for line in packed.decode(errors="surrogateescape").splitlines():
        if line and line[0] not in "#^":
            sha, _, name = line.partition(" ")
            refs[name] = sha
    for rel, key in tree.items():
        if not rel.startswith("refs/") or key.startswith("dir:"):
            continue
        data = read_regular(common / rel)
        refs[rel] = (
            data.decode(errors="surrogateescape").strip()
            if data is not None
            else f"<{key.split(':', 1)[0]}>"
        )
    return refs


# --- the work tree -----------------------------------------------------------------------


@dataclass
class _Status:
    head: str | None = None
    lines: list[str] = field(default_factory=list)
    untracked: dict[str, str] = field(default_factory=dict)
    dirty: dict[str, str] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)


def _status(repo: git.Repo, work_tree: Path) -> _Status:
    fields = repo.z(
        "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all",
        "--ignored=matching", "--ignore-submodules=all",
    )  # fmt: skip
    found = _Status()
    i = 0
    while i < len(fields):
        entry = git.decode_path(fields[i])
        i += 1
        kind = entry[:1]
        if kind == "#":
            if entry.startswith("# branch.oid "):
                oid = entry.split(" ", 2)[2]
                found.head = None if oid == "(initial)" else oid
            continue
        if kind == "!":
            path = entry[2:]
            full = work_tree / path.rstrip("/")
            found.ignored[path] = _tree_print(full) if path.endswith("/") else _stat_key(full)
            continue
        if kind == "?":
            path = entry[2:]
            found.lines.append(f"?? {path}")
            found.untracked[path] = _stat_key(work_tree / path)
            continue
        xy = entry.split(" ")[1].replace(".", " ")
        if kind == "1":
            path = entry.split(" ", 8)[8]
        elif kind == "2":
            path = entry.split(" ", 9)[9]
            i += 1  # the rename's original path follows in its own field
        else:  # "u": unmerged
            path = entry.split(" ", 10)[10]
        found.lines.append(f"{xy} {path}")
        found.dirty[path] = _stat_key(work_tree / path)
    return found


def take(repo: git.Repo, *, since: SourceSnapshot | None = None) -> SourceSnapshot:
    """Fingerprint `repo` without changing a byte of it. Two git calls; the rest is reads.
    `since`, an earlier snapshot of the same repo, spares reading the git-dir files whose
    stat says they are as they were then (see the module's note)."""
    assert repo.work_tree is not None
    taken_ns = time.time_ns()
    trusted = since.taken_ns - _RACY_MARGIN_NS if since is not None else 0
    hashed = _Hashed(since=since, trusted_before_ns=trusted)
    common = _common_dir(repo.git_dir)
    head_bytes = read_regular(repo.git_dir / "HEAD") or b""
    found = _status(repo, repo.work_tree)
    tree = _git_tree(repo.git_dir, common, hashed)
    git_files = {name: _digest(repo.git_dir / name) for name in ("HEAD", "index")}
    for name in _GIT_FILES:
        if name not in git_files:
            git_files[name] = _digest(common / name)
    return SourceSnapshot(
        head=found.head,
        head_ref=head_bytes.decode(errors="replace").strip(),
        refs=_refs(common, tree),
        git_files=git_files,
        hooks={k[len("hooks/") :]: v for k, v in tree.items() if k.startswith("hooks/")},
        status=tuple(found.lines),
        untracked=found.untracked,
        tracked_dirty=found.dirty,
        ignored=found.ignored,
        git_tree=tree,
        index_entries=_index_entries(repo),
        hashed_stats=hashed.stats,
        taken_ns=taken_ns,
    )


def _index_entries(repo: git.Repo) -> str:
    fields = repo.z("ls-files", "--stage", "-v", "-z")
    return hashlib.sha256(b"\0".join(fields)).hexdigest()


# --- comparing ---------------------------------------------------------------------------


def expect_apply(pre: SourceSnapshot, post: SourceSnapshot, *, committed: bool) -> SourceSnapshot:
    """`pre` with what an apply step may change besides its own paths: ignored files (the
    source DoD's byproducts) and, after a commit, the git-dir entries a commit writes (new
    objects, reflogs, loose refs, HEAD, ORIG_HEAD, COMMIT_EDITMSG, the index), and an
    index rewritten with the same entries (a refresh of its stat data). An object that
    existed before must stay as it was."""
    tree = dict(pre.git_tree)
    git_files = dict(pre.git_files)
    if pre.index_entries and pre.index_entries == post.index_entries:
        git_files["index"] = post.git_files.get("index", "")
        if "index" in post.git_tree:
            tree["index"] = post.git_tree["index"]
    if committed:
        for rel, value in post.git_tree.items():
            top = rel.split("/", 1)[0]
            new_object = top == "objects" and rel not in pre.git_tree
            if new_object or top in ("logs", "refs") or rel in _COMMIT_WRITES:
                tree[rel] = value
    return dataclasses.replace(pre, ignored=dict(post.ignored), git_tree=tree, git_files=git_files)


def _named(paths: list[str]) -> str:
    more = f" (and {len(paths) - _SHOWN} more)" if len(paths) > _SHOWN else ""
    return ", ".join(paths[:_SHOWN]) + more


def _map_changes(label: str, old: dict[str, str], new: dict[str, str]) -> list[str]:
    changes: list[str] = []
    for what, paths in (
        ("created", sorted(set(new) - set(old))),
        ("removed", sorted(set(old) - set(new))),
        ("changed", sorted(p for p in set(old) & set(new) if old[p] != new[p])),
    ):
        if paths:
            changes.append(f"{label} {what}: {_named(paths)}")
    return changes


def _ref_changes(before: SourceSnapshot, after: SourceSnapshot) -> list[str]:
    changes: list[str] = []
    for name in sorted(set(before.refs) | set(after.refs)):
        old, new = before.refs.get(name), after.refs.get(name)
        if old != new:
            if old is None:
                changes.append(f"ref {name} was created ({new})")
            elif new is None:
                changes.append(f"ref {name} was deleted (was {old})")
            else:
                changes.append(f"ref {name} moved from {old} to {new}")
    return changes


def differences(before: SourceSnapshot, after: SourceSnapshot) -> list[str]:
    """Each thing that changed between two snapshots, in words. Empty means unchanged."""
    changes: list[str] = []
    if before.head != after.head:
        changes.append(f"HEAD moved from {before.head} to {after.head}")
    if before.head_ref != after.head_ref:
        changes.append(f"HEAD now points at {after.head_ref!r} (was {before.head_ref!r})")
    changes += _ref_changes(before, after)
    changes += [
        f".git/{name} changed"
        for name in _GIT_FILES
        if name != "HEAD" and before.git_files.get(name) != after.git_files.get(name)
    ]
    if before.hooks != after.hooks:
        changed = sorted(
            n
            for n in set(before.hooks) | set(after.hooks)
            if before.hooks.get(n) != after.hooks.get(n)
        )
        changes.append(f"hooks changed: {', '.join(changed)}")
    changes += _status_changes(before.status, after.status)
    for label, old_map, new_map in (
        ("untracked", before.untracked, after.untracked),
        ("modified", before.tracked_dirty, after.tracked_dirty),
    ):
        touched = sorted(p for p in set(old_map) & set(new_map) if old_map[p] != new_map[p])
        if touched:
            changes.append(f"{label} files were rewritten: {_named(touched)}")
    changes += _map_changes("ignored files", before.ignored, after.ignored)
    changes += _map_changes(".git entries", before.git_tree, after.git_tree)
    return changes


def _status_changes(before: Sequence[str], after: Sequence[str]) -> list[str]:
    gained = sorted(set(after) - set(before))
    lost = sorted(set(before) - set(after))
    return [
        f"git status {what}: {'; '.join(lines[:_SHOWN])}"
        for what, lines in (("gained", gained), ("lost", lost))
        if lines
    ]
