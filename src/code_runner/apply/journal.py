"""The apply journal: what every touched source path held before, so it can go back.

Written (with the prior bytes saved beside it, in the state dir) before the first byte of
the source changes, and saved again at every phase change. Restoring from it is idempotent:
a rollback, or a repair after the process died anywhere in the middle, puts exactly the
journaled paths back and nothing else. A pointer in the state dir lets `code-runner gc` find
an open journal whose process is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import code_runner.apply.fs as fs
from code_runner import dirs, files, workspace
from code_runner.apply.fs import FileState, Kind
from code_runner.errors import CodeRunnerError

LOCK_TIMEOUT_S = 600.0
JOURNAL_VERSION = 1


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
    record_dir: str = ""  # the run's output dir (the journal itself is in the state dir)

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
            "record_dir": self.record_dir,
        }

    def save(self) -> None:
        # in the state dir (RecordPaths.apply_journal), which only the runner's user may write
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        files.atomic_write_json(self.path, self.to_dict(), durable=True)

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
                record_dir=str(data.get("record_dir") or ""),
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


def registry_dir() -> Path:
    return dirs.state_dir() / "applies"


def register(journal: Journal) -> Path:
    """Point the state dir at an open journal, before it is written, so `gc` can find it."""
    pointer = registry_dir() / f"{journal.run_id}.json"
    files.atomic_write_json(
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


def apply_lock(git_dir: Path) -> contextlib.AbstractContextManager[None]:
    """One apply (or repair) at a time per source."""
    return workspace.source_lock(Path(f"{git_dir}#apply"), timeout_s=LOCK_TIMEOUT_S)


def dir_state(root: Path, rel: str) -> DirEntry:
    state, _ = fs.read_state(root, rel)
    if state.kind is Kind.MISSING:
        return DirEntry(rel, existed=False)
    if state.kind is not Kind.DIR:
        what = "a file" if state.kind is Kind.FILE else "a symlink or special file"
        raise fs.UnsafePath(f"{rel} is {what}, not a directory.")
    return DirEntry(rel, existed=True, mode=state.mode)


def tmp_name(token: str, index: int) -> str:
    return f".code-runner-{token}-{index}.tmp"


def classify(root: Path, entry: Entry) -> str:
    """'before', 'after' or 'other': which state `entry`'s path holds right now."""
    state, _ = fs.read_state(root, entry.path)
    if state == entry.before:
        return "before"
    if state == entry.after:
        return "after"
    return "other"


def foreign(journal: Journal) -> list[str]:
    """Paths that hold neither their prior nor their target state (changed by someone else)."""
    root = Path(journal.work_tree)
    return [e.path for e in journal.entries if classify(root, e) == "other"]


def restore(journal: Journal) -> list[str]:  # noqa: C901 - ordered passes that are idempotent only together
    """Put every journaled path and directory back to its prior state. Idempotent.

    Returns the directories that could not be removed because something else is in them
    now (reported, never deleted).
    """
    root = Path(journal.work_tree)
    for index, entry in enumerate(journal.entries):
        fs.remove_stray(root, entry.path, tmp_name(journal.token, index))
        if entry.before.kind is Kind.MISSING:
            fs.remove_file(root, entry.path)
    kept: list[str] = []
    for d in sorted(journal.dirs, key=lambda d: -d.path.count("/")):
        if not d.existed and not fs.remove_dir_if_empty(root, d.path):
            kept.append(d.path)
    for d in journal.dirs:  # shallowest first
        if d.existed:
            fs.ensure_dir(root, d.path, d.mode)
    for index, entry in enumerate(journal.entries):
        if entry.before.kind is not Kind.FILE:
            continue
        if classify(root, entry) == "before":
            continue
        assert entry.saved is not None
        saved = journal.prior_dir / entry.saved
        if fs.digest_file(saved)[0] != entry.before.sha256:
            raise JournalError(
                f"the saved copy of {entry.path} ({journal.prior_dir / entry.saved}) does not "
                "match the digest in the journal.",
                fix="the apply record was changed; restore the file from your own backup.",
            )
        fs.put_file(  # streamed from the saved copy; `differing` checks it after
            root, entry.path, saved, entry.before.mode, tmp_name=tmp_name(journal.token, index)
        )
    return kept


def differing(journal: Journal, which: str) -> list[str]:
    """Paths that do not hold their `which` ('before' or 'after') state."""
    root = Path(journal.work_tree)
    return [e.path for e in journal.entries if classify(root, e) != which]
