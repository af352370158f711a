"""Touching the user's work tree safely, and the journal that makes every touch undoable.

The apply step is the only code that writes into a source repo, and it writes only through
this module. Every path is reached through directory file descriptors opened with
`O_NOFOLLOW`, so a symlink anywhere on the way (planted, or the user's own) stops the write
instead of redirecting it outside the repo. A file is replaced atomically (temp file in the
same directory, fchmod, fsync, rename), so each path is always in its prior state or its
target state, never torn.

The journal records, before the first byte changes, the prior state of every path the patch
touches and of every directory above them (prior bytes saved beside it under the output dir).
Restoring from it is idempotent: a rollback, or a repair after the process died anywhere in
the middle, puts exactly those paths back and nothing else.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from code_runner import dirs, fsx, workspace
from code_runner.errors import CodeRunnerError

JOURNAL_VERSION = 1
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(CodeRunnerError):
    """A path in the source cannot be touched safely (a symlink or a file on the way)."""

    exit_code = 3


class Kind(StrEnum):
    MISSING = "missing"
    FILE = "file"
    DIR = "dir"
    OTHER = "other"  # symlink, fifo, socket, device: never written, never replaced


@dataclass(frozen=True)
class FileState:
    """What one path holds: its kind, permission bits and content digest."""

    kind: Kind
    mode: int = 0
    sha256: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind.value, "mode": f"{self.mode:o}", "sha256": self.sha256}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileState:
        return cls(Kind(data["kind"]), int(str(data.get("mode") or "0"), 8), data["sha256"])

    @classmethod
    def of_bytes(cls, data: bytes, mode: int) -> FileState:
        return cls(Kind.FILE, mode, hashlib.sha256(data).hexdigest())


MISSING = FileState(Kind.MISSING)


class Phase(StrEnum):
    """Where an apply got to. Open phases mean the source may hold a half-applied patch."""

    APPLYING = "applying"  # journal written; writes may be partial
    VERIFYING = "verifying"  # every path holds its target; the DoD runs in the source
    COMMITTING = "committing"  # a commit may exist; the ref may have moved
    FINISHED = "finished"  # applied (and committed when asked)
    ROLLED_BACK = "rolled_back"
    LEFT_APPLIED = "left_applied"  # the DoD failed and rollback_on_failure was false
    REPAIRED = "repaired"  # a later process finished or undid it from this journal


OPEN_PHASES = frozenset({Phase.APPLYING, Phase.VERIFYING, Phase.COMMITTING})


@dataclass(frozen=True)
class Entry:
    """One file the patch touches: before, after, and where the prior bytes are saved."""

    path: str
    before: FileState
    after: FileState
    saved: str | None  # file name under `apply_dir/prior` when `before` is a file

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "saved": self.saved,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        return cls(
            data["path"],
            FileState.from_dict(data["before"]),
            FileState.from_dict(data["after"]),
            data.get("saved"),
        )


@dataclass(frozen=True)
class DirEntry:
    """A directory above a touched file, as it was before: present (with mode) or not."""

    path: str
    existed: bool
    mode: int = 0

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "existed": self.existed, "mode": f"{self.mode:o}"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DirEntry:
        return cls(data["path"], bool(data["existed"]), int(str(data.get("mode") or "0"), 8))


@dataclass
class Journal:
    """The apply step's durable memory. Saved atomically at every phase change."""

    path: Path
    run_id: str
    task_id: str
    work_tree: str
    git_dir: str
    head_before: str
    tree: str  # the tree HEAD + patch gives; a commit is checked against it
    token: str  # names the temp files of this apply, so a repair can find strays
    entries: tuple[Entry, ...]
    dirs: tuple[DirEntry, ...]
    commit_requested: bool
    phase: Phase = Phase.APPLYING
    commit: str | None = None
    pid: int = field(default_factory=os.getpid)
    pid_started: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def apply_dir(self) -> Path:
        return self.path.with_suffix("")

    @property
    def prior_dir(self) -> Path:
        return self.apply_dir / "prior"

    @property
    def is_open(self) -> bool:
        return self.phase in OPEN_PHASES

    def to_dict(self) -> dict[str, object]:
        return {
            "journal_version": JOURNAL_VERSION,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "work_tree": self.work_tree,
            "git_dir": self.git_dir,
            "head_before": self.head_before,
            "tree": self.tree,
            "token": self.token,
            "entries": [e.to_dict() for e in self.entries],
            "dirs": [d.to_dict() for d in self.dirs],
            "commit_requested": self.commit_requested,
            "phase": self.phase.value,
            "commit": self.commit,
            "pid": self.pid,
            "pid_started": self.pid_started,
            "notes": list(self.notes),
        }

    def save(self) -> None:
        fsx.atomic_write_json(self.path, self.to_dict(), durable=True)

    def move_to(self, phase: Phase, note: str | None = None) -> None:
        self.phase = phase
        if note:
            self.notes.append(note)
        self.save()

    @classmethod
    def load(cls, path: Path) -> Journal:
        try:
            data = json.loads(path.read_text())
            if data.get("journal_version") != JOURNAL_VERSION:
                raise ValueError(f"unknown journal_version {data.get('journal_version')!r}")
            return cls(
                path=path,
                run_id=data["run_id"],
                task_id=data["task_id"],
                work_tree=data["work_tree"],
                git_dir=data["git_dir"],
                head_before=data["head_before"],
                tree=data["tree"],
                token=data["token"],
                entries=tuple(Entry.from_dict(e) for e in data["entries"]),
                dirs=tuple(DirEntry.from_dict(d) for d in data["dirs"]),
                commit_requested=bool(data["commit_requested"]),
                phase=Phase(data["phase"]),
                commit=data.get("commit"),
                pid=int(data["pid"]),
                pid_started=data.get("pid_started"),
                notes=list(data.get("notes") or []),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise JournalError(
                f"the apply journal {path} cannot be read ({exc}).",
                fix="the source paths it names may be half-applied: compare them with the "
                f"copies in {path.with_suffix('')}/prior and restore by hand, then delete "
                "the journal.",
            ) from exc

    def owner_alive(self) -> bool:
        return workspace.lease_is_live({"pid": self.pid, "pid_started": self.pid_started})


class JournalError(CodeRunnerError):
    exit_code = 5


# --- the registry of open journals: how `gc` finds them -------------------------------


def registry_dir() -> Path:
    return dirs.state_dir() / "applies"


def register(journal: Journal) -> Path:
    """Point the state dir at an open journal, before it is written, so `gc` can find it."""
    pointer = registry_dir() / f"{journal.run_id}.json"
    fsx.atomic_write_json(
        pointer,
        {
            "journal": str(journal.path),
            "run_id": journal.run_id,
            "git_dir": journal.git_dir,
            "pid": journal.pid,
            "pid_started": journal.pid_started,
        },
    )
    return pointer


def unregister(run_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (registry_dir() / f"{run_id}.json").unlink()


def registered() -> list[tuple[Path, dict[str, Any]]]:
    """(pointer, data) for every registered journal; unreadable pointers are skipped."""
    found: list[tuple[Path, dict[str, Any]]] = []
    root = registry_dir()
    if not root.is_dir():
        return found
    for pointer in sorted(root.glob("*.json")):
        try:
            data = json.loads(pointer.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("journal"), str):
            found.append((pointer, data))
    return found


# --- reaching paths without following symlinks ----------------------------------------


def _split(rel: str) -> list[str]:
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") for p in parts):
        raise UnsafePath(f"{rel!r} is not a plain repo-relative path.")
    return parts


@contextlib.contextmanager
def _parent(root: Path, rel: str, *, create: bool) -> Iterator[int | None]:
    """A descriptor of `rel`'s directory, reached without following any symlink.

    Yields None when a directory on the way is missing and `create` is false.
    """
    parts = _split(rel)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    yield None
                    return
                os.mkdir(part, 0o777, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise UnsafePath(
                        f"{rel}: {part!r} on the way is a symlink or a file, not a directory."
                    ) from exc
                raise
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_state(root: Path, rel: str) -> tuple[FileState, bytes | None]:
    """The state of `root/rel` and, for a regular file, its bytes."""
    with _parent(root, rel, create=False) as pfd:
        if pfd is None:
            return MISSING, None
        name = _split(rel)[-1]
        st = _lstat(name, pfd)
        if st is None:
            return MISSING, None
        if stat.S_ISDIR(st.st_mode):
            return FileState(Kind.DIR, stat.S_IMODE(st.st_mode)), None
        if not stat.S_ISREG(st.st_mode):
            return FileState(Kind.OTHER, stat.S_IMODE(st.st_mode)), None
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        with os.fdopen(fd, "rb") as f:
            mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
            data = f.read()
    return FileState.of_bytes(data, mode), data


def dir_state(root: Path, rel: str) -> DirEntry:
    state, _ = read_state(root, rel)
    if state.kind is Kind.MISSING:
        return DirEntry(rel, existed=False)
    if state.kind is not Kind.DIR:
        what = "a file" if state.kind is Kind.FILE else "a symlink or special file"
        raise UnsafePath(f"{rel} is {what}, not a directory.")
    return DirEntry(rel, existed=True, mode=state.mode)


def put_file(root: Path, rel: str, data: bytes, mode: int, *, tmp_name: str) -> None:
    """Make `root/rel` a regular file holding `data` with `mode`, atomically."""
    with _parent(root, rel, create=True) as pfd:
        assert pfd is not None
        name = _split(rel)[-1]
        existing = _lstat(name, pfd)
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            raise UnsafePath(f"{rel} is a directory; refusing to replace it with a file.")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name, dir_fd=pfd)
        fd = os.open(
            tmp_name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=pfd,
        )
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fchmod(f.fileno(), mode)
                os.fsync(f.fileno())
            os.replace(tmp_name, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name, dir_fd=pfd)
            raise
        os.fsync(pfd)


def remove_file(root: Path, rel: str) -> None:
    """Remove `root/rel` if it is there; never a directory, never through a symlink."""
    with _parent(root, rel, create=False) as pfd:
        if pfd is None:
            return
        name = _split(rel)[-1]
        st = _lstat(name, pfd)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"{rel} is a directory; refusing to remove it.")
        os.unlink(name, dir_fd=pfd)
        os.fsync(pfd)


def remove_stray(root: Path, rel: str, tmp_name: str) -> None:
    """Remove a temp file a killed write may have left beside `rel`."""
    with contextlib.suppress(UnsafePath, OSError), _parent(root, rel, create=False) as pfd:
        if pfd is not None:
            os.unlink(tmp_name, dir_fd=pfd)


def remove_dir_if_empty(root: Path, rel: str) -> bool:
    with _parent(root, rel, create=False) as pfd:
        if pfd is None:
            return True
        name = _split(rel)[-1]
        try:
            os.rmdir(name, dir_fd=pfd)
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                return False
            raise
        return True


def ensure_dir(root: Path, rel: str, mode: int) -> None:
    with _parent(root, rel, create=True) as pfd:
        assert pfd is not None
        name = _split(rel)[-1]
        st = _lstat(name, pfd)
        if st is None:
            os.mkdir(name, 0o700, dir_fd=pfd)
            os.chmod(name, mode, dir_fd=pfd)
        elif not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"{rel} should be a directory but is not.")


def ancestors(paths: list[str]) -> list[str]:
    """Every directory above the given paths, shallowest first."""
    found: set[str] = set()
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts)):
            found.add("/".join(parts[:i]))
    return sorted(found, key=lambda p: (p.count("/"), p))


def tmp_name(token: str, index: int) -> str:
    return f".code-runner-{token}-{index}.tmp"


# --- restoring --------------------------------------------------------------------------


def classify(root: Path, entry: Entry) -> str:
    """'before', 'after' or 'other': which state `entry`'s path holds right now."""
    state, _ = read_state(root, entry.path)
    if state == entry.before:
        return "before"
    if state == entry.after:
        return "after"
    return "other"


def foreign(journal: Journal) -> list[str]:
    """Paths that hold neither their prior nor their target state (changed by someone else)."""
    root = Path(journal.work_tree)
    return [e.path for e in journal.entries if classify(root, e) == "other"]


def restore(journal: Journal) -> list[str]:
    """Put every journaled path and directory back to its prior state. Idempotent.

    Returns the directories that could not be removed because something else is in them
    now (reported, never deleted).
    """
    root = Path(journal.work_tree)
    for index, entry in enumerate(journal.entries):
        remove_stray(root, entry.path, tmp_name(journal.token, index))
        if entry.before.kind is Kind.MISSING:
            remove_file(root, entry.path)
    kept: list[str] = []
    for d in sorted(journal.dirs, key=lambda d: -d.path.count("/")):
        if not d.existed and not remove_dir_if_empty(root, d.path):
            kept.append(d.path)
    for d in journal.dirs:  # shallowest first
        if d.existed:
            ensure_dir(root, d.path, d.mode)
    for index, entry in enumerate(journal.entries):
        if entry.before.kind is not Kind.FILE:
            continue
        if classify(root, entry) == "before":
            continue
        assert entry.saved is not None
        data = (journal.prior_dir / entry.saved).read_bytes()
        if hashlib.sha256(data).hexdigest() != entry.before.sha256:
            raise JournalError(
                f"the saved copy of {entry.path} ({journal.prior_dir / entry.saved}) does not "
                "match the digest in the journal.",
                fix="the apply record was changed; restore the file from your own backup.",
            )
        put_file(root, entry.path, data, entry.before.mode, tmp_name=tmp_name(journal.token, index))
    return kept


def differing(journal: Journal, which: str) -> list[str]:
    """Paths that do not hold their `which` ('before' or 'after') state."""
    root = Path(journal.work_tree)
    return [e.path for e in journal.entries if classify(root, e) != which]


__all__ = [
    "OPEN_PHASES",
    "DirEntry",
    "Entry",
    "FileState",
    "Journal",
    "JournalError",
    "Kind",
    "Phase",
    "UnsafePath",
    "ancestors",
    "classify",
    "differing",
    "dir_state",
    "foreign",
    "put_file",
    "read_state",
    "register",
    "registered",
    "remove_dir_if_empty",
    "remove_file",
    "restore",
    "tmp_name",
    "unregister",
]
