"""Every run under the roots, one `RunEntry` each: task runs, exec runs, plans and batches.

A task run is found by its `TASK.status.json` and read through `record` (`load_result` once
it has a result); an exec run is a directory holding the monitor's `status.json` and
`spec.json`, read through `monitor`; a plan is a `plan.status.json`; a batch is a
directory holding `batch.json` and `results.jsonl` (its items' runs are listed too). What
was read is cached by file size and mtime, so a page over a thousand runs reads only what
changed.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from code_runner import monitor
from code_runner.errors import RecordError
from code_runner.record import RecordPaths, RunResult, load_result
from code_runner.web.roots import Roots, RunKey, is_plain_file, open_file
from code_runner.web.text import clean

_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".tools", "workspaces", "agent"}
MAX_RUNS = 20_000
MAX_JSON_BYTES = 16 * 1024 * 1024


class Kind(StrEnum):
    TASK = "task"
    EXEC = "exec"
    PLAN = "plan"
    BATCH = "batch"


@dataclass(frozen=True)
class RunEntry:
    """One line of the runs page."""

    kind: Kind
    key: RunKey
    name: str
    status: str
    live: bool
    what: str  # the backend of a task run, the command of an exec run
    started_at: str
    duration_s: float | None
    dod: str  # "pass", "fail", criteria met or not, "" when not known yet
    mismatches: int

    @property
    def url(self) -> str:
        return f"/{self.kind.value}/{self.key.url_part}"

    @property
    def day(self) -> str:
        return self.started_at[:10]


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or {} when it is missing, partial or not an object."""
    try:
        with open_file(path) as handle:
            data = json.loads(handle.read(MAX_JSON_BYTES).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def task_result(paths: RecordPaths) -> RunResult | None:
    """The run's result, or None while it runs (or when the file cannot be trusted)."""
    if not is_plain_file(paths.result):
        return None
    try:
        return load_result(paths.result)
    except RecordError:
        return None


def exec_result(run_dir: Path) -> monitor.ExperimentResult | None:
    """The exec run's result, or None while it runs (or when it cannot be trusted)."""
    if not is_plain_file(run_dir / "result.json"):
        return None
    try:
        return monitor.load_result(run_dir)
    except RecordError:
        return None


def _task_entry(key: RunKey, paths: RecordPaths) -> RunEntry:
    status = read_json(paths.status)
    result = task_result(paths) if status.get("terminal") else None
    if result is None:
        request = read_json(paths.request)
        started = str(status.get("started_at") or request.get("started_at") or "")
        return RunEntry(
            Kind.TASK,
            key,
            paths.task_id,
            str(status.get("state") or "unknown"),
            not status.get("terminal"),
            clean(str((request.get("spec") or {}).get("backend", ""))),
            started or str(status.get("updated_at", "")),
            None,
            "",
            0,
        )
    contract = result.result_contract
    return RunEntry(
        Kind.TASK,
        key,
        paths.task_id,
        result.status.value,
        False,
        clean(result.backend),
        result.started_at,
        result.duration_s,
        "pass" if result.dod_passed else "fail",
        len(contract.mismatches) if contract else 0,
    )


def exec_label(run_dir: Path) -> str:
    """An exec run's name: its dir's name, or `batch/item` for a batch item's run."""
    if run_dir.name == "run" and len(run_dir.parents) > 3 and run_dir.parents[2].name == "items":
        return clean(f"{run_dir.parents[3].name}/{run_dir.parents[1].name}")
    return clean(run_dir.name)


def _exec_entry(key: RunKey, run_dir: Path) -> RunEntry:
    status = read_json(run_dir / "status.json")
    result = exec_result(run_dir)
    if result is None:
        spec = read_json(run_dir / "spec.json")
        command = spec.get("display_command") or " ".join(map(str, spec.get("command") or []))
        return RunEntry(
            Kind.EXEC,
            key,
            exec_label(run_dir),
            str(status.get("state") or "starting"),
            not status.get("finished"),
            clean(str(command)),
            str(spec.get("started_at") or status.get("updated_at") or ""),
            status.get("elapsed_s"),
            "",
            0,
        )
    return RunEntry(
        Kind.EXEC,
        key,
        exec_label(run_dir),
        result.state.value,
        False,
        clean(result.display_command),
        result.started_at,
        result.duration_s,
        "criteria met" if result.success else "criteria not met",
        0,
    )


def _plan_entry(key: RunKey, path: Path) -> RunEntry:
    status = read_json(path)
    items = status.get("items") or []
    done = sum(1 for item in items if isinstance(item, dict) and item.get("state") == "committed")
    return RunEntry(
        Kind.PLAN,
        key,
        clean(str(status.get("plan_id") or path.parent.name)),
        clean(str(status.get("status") or "unknown")),
        str(status.get("status")) in ("running", "pending"),
        f"{done}/{len(items)} items committed",
        str(status.get("updated_at") or ""),
        None,
        "",
        0,
    )


def _batch_entry(key: RunKey, path: Path) -> RunEntry:
    """A batch: its items' statuses counted from `results.jsonl` (the last line of each)."""
    statuses: dict[str, str] = {}
    try:
        with open_file(path) as handle:
            for line in handle.read(MAX_JSON_BYTES).splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and "item_id" in record:
                    statuses[str(record["item_id"])] = str(record.get("status"))
    except OSError:
        pass
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    overall = "passed" if set(counts) == {"passed"} else ("failed" if counts else "running")
    try:
        stamp = datetime.fromtimestamp((path.parent / "batch.json").stat().st_mtime, UTC)
    except OSError:
        stamp = datetime.fromtimestamp(0, UTC)
    return RunEntry(
        Kind.BATCH,
        key,
        clean(path.parent.name),
        overall,
        False,
        clean(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no item finished"),
        stamp.isoformat(timespec="seconds").replace("+00:00", "Z"),
        None,
        "",
        0,
    )


@dataclass(frozen=True)
class _Folder:
    """What a folder holds that the catalog needs: run markers and the folders to descend."""

    markers: tuple[tuple[Kind, str], ...]  # (kind, file name)
    subdirs: tuple[str, ...]


class Catalog:
    """The runs under the roots, re-read only where a file changed.

    A folder is listed again only when its mtime changed (a new file, or a record file
    replaced atomically, changes it); a run is read again only when its marker changed."""

    def __init__(self, roots: Roots) -> None:
        self.roots = roots
        self._cache: dict[str, tuple[tuple[int, int], RunEntry]] = {}
        self._folders: dict[str, tuple[int, _Folder]] = {}
        self._lock = threading.Lock()

    def entries(self) -> list[RunEntry]:
        """Every run, newest first."""
        found: list[RunEntry] = []
        seen: set[str] = set()
        for kind, marker, number, rel in self._markers():
            seen.add(marker)
            entry = self._entry(kind, marker, number, rel)
            if entry is not None:
                found.append(entry)
        with self._lock:
            for gone in set(self._cache) - seen:
                del self._cache[gone]
        found.sort(key=lambda e: (e.started_at, e.key.url_part), reverse=True)
        return found

    def _entry(self, kind: Kind, marker: str, number: int, rel: str) -> RunEntry | None:
        try:
            st = os.stat(marker, follow_symlinks=False)
        except OSError:
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            cached = self._cache.get(marker)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        path = Path(marker)
        if kind is Kind.TASK:
            task_id = path.name.removesuffix(".status.json")
            key = RunKey(number, task_id if rel == "." else f"{rel}/{task_id}")
            entry = _task_entry(key, RecordPaths(path.parent, task_id))
        elif kind is Kind.EXEC:
            entry = _exec_entry(RunKey(number, rel), path.parent)
        elif kind is Kind.BATCH:
            entry = _batch_entry(RunKey(number, rel), path)
        else:
            entry = _plan_entry(RunKey(number, rel), path)
        with self._lock:
            self._cache[marker] = (stamp, entry)
        return entry

    def _markers(self) -> Iterator[tuple[Kind, str, int, str]]:
        """(kind, marker file, root number, folder relative to the root) of every run."""
        count = 0
        for number, root in enumerate(self.roots.dirs):
            stack = [(str(root), ".")]
            while stack:
                folder, rel = stack.pop()
                listed = self._folder(folder)
                for kind, name in listed.markers:
                    count += 1
                    if count > MAX_RUNS:
                        return
                    yield kind, f"{folder}/{name}", number, rel
                prefix = "" if rel == "." else rel + "/"
                stack.extend((f"{folder}/{name}", prefix + name) for name in listed.subdirs)

    def _folder(self, folder: str) -> _Folder:
        try:
            mtime = os.stat(folder, follow_symlinks=False).st_mtime_ns
        except OSError:
            return _Folder((), ())
        with self._lock:
            cached = self._folders.get(folder)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        listed = _list(folder)
        with self._lock:
            self._folders[folder] = (mtime, listed)
        return listed


def _list(folder: str) -> _Folder:
    """The run markers in `folder` and the subfolders to descend (no symlink is followed)."""
    files: set[str] = set()
    subdirs: list[str] = []
    try:
        with os.scandir(folder) as scan:
            for entry in scan:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in _SKIP_DIRS:
                        subdirs.append(entry.name)
                elif entry.is_file(follow_symlinks=False):
                    files.add(entry.name)
    except OSError:
        return _Folder((), ())
    markers = _markers_in(files)
    if any(kind is Kind.EXEC for kind, _ in markers):
        subdirs = []  # an exec run dir holds no other run
    return _Folder(tuple(markers), tuple(sorted(subdirs, reverse=True)))


def _markers_in(files: set[str]) -> list[tuple[Kind, str]]:
    markers: list[tuple[Kind, str]] = []
    if "status.json" in files and "spec.json" in files:
        markers.append((Kind.EXEC, "status.json"))
    if "results.jsonl" in files and "batch.json" in files:
        markers.append((Kind.BATCH, "results.jsonl"))
    if "plan.status.json" in files:
        markers.append((Kind.PLAN, "plan.status.json"))
    for name in sorted(files):
        if name.endswith(".status.json") and name != "plan.status.json":
            markers.append((Kind.TASK, name))
    return markers


def after(stamp: str, since: datetime) -> bool:
    """True when the record's time stamp is at or after `since`."""
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return False
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)) >= since


__all__ = [
    "Catalog",
    "Kind",
    "RunEntry",
    "after",
    "exec_label",
    "exec_result",
    "read_json",
    "task_result",
]
