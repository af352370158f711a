"""Live supervision of a CLI round: what the worker does to the tree, and how it fails.

Three signals, each one event the moment it holds (the audit after the round still judges
every change; these only let a person, or the spec, act sooner):

- `scope_expansion`: a path outside the owned paths was written (created, changed or
  removed) in the work tree. With the spec's `on_scope: stop` it ends the round at once;
  the default, `warn`, lets it go on. Paths git ignores (build output, caches) are not
  writes the audit keeps, so they are not reported either.
- `repeating_failure`: the same command failed `repeat_failures` times in the CLI's own
  events. Advisory.
- `no_progress`: the CLI kept writing output while the tree did not change for
  `no_progress_s`. Advisory, never a kill: a quiet worker is not a stuck one.

The tree is watched by scanning it (`os.scandir`, no git, `.git` skipped) at most every
`scan_interval_s`, and never more often than keeps the scans under `max_duty` of the
wall clock: a scan that took 20 ms on a large tree waits 0.4 s at 5 %. A tree with more
than `max_entries` entries is not watched (one event says so); the audit still is.
`bench/tree_watch.py` measures the cost.
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code_runner.agents.cli_agents.supervisor import Ending, Moment
from code_runner.events import EventKind, EventSink
from code_runner.task.paths import Allowlist

Snapshot = dict[str, tuple[int, int, int]]  # path -> (mtime_ns, size, mode)


@dataclass(frozen=True)
class WatchLimits:
    scan_interval_s: float = 1.0
    max_duty: float = 0.05  # the share of wall clock scans may take
    max_entries: int = 100_000
    no_progress_s: float = 600.0
    repeat_failures: int = 3
    stop_on_scope: bool = False


class TooLarge(Exception):
    pass


def scan(root: Path, max_entries: int) -> Snapshot:
    """Every file and symlink under `root` (not `.git`), without following a symlink."""
    found: Snapshot = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = os.scandir(root / rel if rel else root)
        except OSError:
            continue
        with entries:
            for entry in entries:
                if not rel and entry.name == ".git":
                    continue
                path = f"{rel}/{entry.name}" if rel else entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(path)
                        continue
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                found[path] = (info.st_mtime_ns, info.st_size, info.st_mode)
                if len(found) > max_entries:
                    raise TooLarge
    return found


def changed(before: Snapshot, after: Snapshot) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


@dataclass
class TreeWatch:
    """An `EndingCheck` the supervisor polls: scope writes and the no-progress clock."""

    root: Path
    allowlist: Allowlist
    events: EventSink
    limits: WatchLimits = field(default_factory=WatchLimits)
    ignored: Callable[[list[str]], set[str]] = lambda paths: set()
    snapshot: Snapshot | None = None
    next_scan_s: float = 0.0
    last_change_s: float = 0.0
    reported: set[str] = field(default_factory=set)
    scans: int = 0
    scan_s: float = 0.0  # total time spent scanning
    stopped_watching: bool = False
    quiet_reported: bool = False
    last_scan_s: float = 0.0  # what the last scan took

    def start(self) -> None:
        """The tree before the CLI starts: what later scans are compared against."""
        self.snapshot = self._scan()

    def check(self, moment: Moment) -> tuple[Ending, str] | None:
        if self.snapshot is not None and moment.elapsed_s >= self.next_scan_s:
            found = self._scope(moment)
            if found is not None:
                return found
        self._no_progress(moment)
        return None

    def _scan(self) -> Snapshot | None:
        started = time.perf_counter()
        try:
            snapshot = scan(self.root, self.limits.max_entries)
        except TooLarge:
            self.stopped_watching = True
            self.events.emit(
                EventKind.AGENT_WARNING,
                message=f"the work tree has over {self.limits.max_entries} files: it is not "
                "watched during the round (the audit after it still judges every change)",
            )
            return None
        finally:
            cost = time.perf_counter() - started
            self.scans += 1
            self.scan_s += cost
            self.last_scan_s = cost
        return snapshot

    def _scope(self, moment: Moment, *, may_stop: bool = True) -> tuple[Ending, str] | None:
        before = self.snapshot or {}
        after = self._scan()
        self.next_scan_s = moment.elapsed_s + max(
            self.limits.scan_interval_s, self.last_scan_s / self.limits.max_duty
        )
        if after is None:
            self.snapshot = None
            return None
        self.snapshot = after
        paths = changed(before, after)
        if not paths:
            return None
        self.last_change_s = moment.elapsed_s
        self.quiet_reported = False
        outside = [p for p in paths if not self.allowlist.allows(p) and p not in self.reported]
        if outside:
            outside = [p for p in outside if p not in self.ignored(outside)]
        if not outside:
            return None
        self.reported.update(outside)
        stopping = self.limits.stop_on_scope and may_stop
        action = "stop" if stopping else "warn"
        self.events.emit(
            EventKind.SCOPE_EXPANSION, paths=outside, action=action, elapsed_s=moment.elapsed_s
        )
        if stopping:
            return Ending.SCOPE_EXPANSION, (
                "the worker wrote outside the owned paths (" + ", ".join(outside[:5]) + "); "
                "the round was stopped (on_scope: stop)"
            )
        return None

    def _no_progress(self, moment: Moment) -> None:
        quiet_tree_s = moment.elapsed_s - self.last_change_s
        output_flowing = moment.silent_s < self.limits.scan_interval_s * 5
        if (
            quiet_tree_s >= self.limits.no_progress_s
            and output_flowing
            and not self.quiet_reported
            and not self.stopped_watching
        ):
            self.quiet_reported = True  # again only after the tree changes
            self.events.emit(
                EventKind.NO_PROGRESS,
                unchanged_s=round(quiet_tree_s, 1),
                advisory=True,
                message=f"output keeps coming but the work tree has not changed for "
                f"{quiet_tree_s:.0f} s",
            )

    def finish(self, elapsed_s: float) -> None:
        """One last look after the CLI ended: a write in its last moments is reported too."""
        if self.snapshot is not None:
            self._scope(Moment(elapsed_s, 0.0, None), may_stop=False)

    def summary(self) -> dict[str, Any]:
        return {
            "scans": self.scans,
            "scan_s": round(self.scan_s, 4),
            "watched": not self.stopped_watching,
            "scope_expansions": sorted(self.reported),
        }


@dataclass
class FailureCounter:
    """An `EventSink` in front of the record: counts failing commands in the CLI's events."""

    inner: EventSink
    repeat_failures: int = 3
    pending: deque[str] = field(default_factory=deque)
    failures: Counter[str] = field(default_factory=Counter)

    def emit(self, kind: EventKind, /, **data: object) -> None:
        self.inner.emit(kind, **data)
        if kind is EventKind.TOOL_CALL:
            self.pending.append(_command_key(data))
        elif kind is EventKind.TOOL_RESULT:
            key = self.pending.popleft() if self.pending else str(data.get("name"))
            if data.get("ok") is False:
                self.failures[key] += 1
                if self.failures[key] == self.repeat_failures:
                    self.inner.emit(
                        EventKind.REPEATING_FAILURE,
                        command=key,
                        times=self.repeat_failures,
                        advisory=True,
                        error=data.get("error"),
                    )


def _command_key(data: Mapping[str, object]) -> str:
    """What makes two calls "the same command": the command line, else the tool and args."""
    command = data.get("command")
    if command:
        return str(command)[:500]
    return f"{data.get('name')} {data.get('args')}"[:500]


def _git_dir(work_tree: Path) -> Path:
    """The git dir a work tree's `.git` names (a `gitdir:` file), or `.git` itself."""
    pointer = work_tree / ".git"
    try:
        if pointer.is_file() and not pointer.is_symlink():
            text = pointer.read_text(encoding="utf-8").strip()
            if text.startswith("gitdir:"):
                named = Path(text.removeprefix("gitdir:").strip())
                return named if named.is_absolute() else work_tree / named
    except OSError:
        pass
    return pointer


def git_ignored(work_tree: Path) -> Callable[[list[str]], set[str]]:
    """Which of some paths the work tree's git ignores (one `check-ignore` per question)."""
    from code_runner.repo import git

    def ask(paths: Iterable[str]) -> set[str]:
        listed = [p for p in paths if p]
        if not listed:
            return set()
        repo = git.Repo(git_dir=_git_dir(work_tree), work_tree=work_tree)
        data = "\0".join(listed).encode("utf-8", "surrogateescape") + b"\0"
        try:
            found = repo.z("check-ignore", "--stdin", "-z", input_bytes=data, check=False)
        except OSError:
            return set()
        return {git.decode_path(raw) for raw in found if raw}

    return ask


__all__ = [
    "FailureCounter",
    "TreeWatch",
    "WatchLimits",
    "changed",
    "git_ignored",
    "scan",
]
