"""Every run under the roots, one `RunEntry` each: task runs, exec runs and plans.

A task run is found by its `TASK.status.json` and read through `record` (`load_result` once
it has a result); an exec run is a directory holding the monitor's `status.json` and
`spec.json`, read through `monitor`; a plan is a `plan.status.json`. What was read is cached
by file size and mtime, so a page over a thousand runs reads only what changed.
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
from code_runner.web.roots import Roots, RunKey
from code_runner.web.text import clean

_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".tools", "workspaces", "agent"}
MAX_RUNS = 20_000


class Kind(StrEnum):
    TASK = "task"
    EXEC = "exec"
    PLAN = "plan"


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
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def task_result(paths: RecordPaths) -> RunResult | None:
    """The run's result, or None while it runs (or when the file cannot be trusted)."""
    try:
        return load_result(paths.result)
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


def _exec_entry(key: RunKey, run_dir: Path) -> RunEntry:
    status = read_json(run_dir / "status.json")
    try:
        result: monitor.ExperimentResult | None = monitor.load_result(run_dir)
    except RecordError:
        result = None
    if result is None:
        spec = read_json(run_dir / "spec.json")
        command = spec.get("display_command") or " ".join(map(str, spec.get("command") or []))
        return RunEntry(
            Kind.EXEC,
            key,
            run_dir.name,
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
        run_dir.name,
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


class Catalog:
    """The runs under the roots, re-read only where a file changed."""

    def __init__(self, roots: Roots) -> None:
        self.roots = roots
        self._cache: dict[Path, tuple[tuple[int, int], RunEntry]] = {}
        self._lock = threading.Lock()

    def entries(self) -> list[RunEntry]:
        """Every run, newest first."""
        found: list[RunEntry] = []
        seen: set[Path] = set()
        for kind, marker, key in self._markers():
            seen.add(marker)
            found.append(self._entry(kind, marker, key))
        with self._lock:
            for gone in set(self._cache) - seen:
                del self._cache[gone]
        found.sort(key=lambda e: (e.started_at, e.key.url_part), reverse=True)
        return found

    def _entry(self, kind: Kind, marker: Path, key: RunKey) -> RunEntry:
        try:
            st = marker.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = (0, 0)
        with self._lock:
            cached = self._cache.get(marker)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        if kind is Kind.TASK:
            task_id = marker.name.removesuffix(".status.json")
            entry = _task_entry(key, RecordPaths(marker.parent, task_id))
        elif kind is Kind.EXEC:
            entry = _exec_entry(key, marker.parent)
        else:
            entry = _plan_entry(key, marker)
        with self._lock:
            self._cache[marker] = (stamp, entry)
        return entry

    def _markers(self) -> Iterator[tuple[Kind, Path, RunKey]]:
        count = 0
        for number, root in enumerate(self.roots.dirs):
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
                here = Path(dirpath)
                rel = here.relative_to(root).as_posix()
                for found in _markers_in(here, rel, number, filenames):
                    count += 1
                    if count > MAX_RUNS:
                        return
                    yield found


def _markers_in(
    here: Path, rel: str, number: int, filenames: list[str]
) -> Iterator[tuple[Kind, Path, RunKey]]:
    prefix = "" if rel == "." else rel + "/"
    names = set(filenames)
    if "status.json" in names and "spec.json" in names:
        yield Kind.EXEC, here / "status.json", RunKey(number, rel)
    if "plan.status.json" in names:
        yield Kind.PLAN, here / "plan.status.json", RunKey(number, rel)
    for name in names:
        if name.endswith(".status.json") and name != "plan.status.json":
            task_id = name.removesuffix(".status.json")
            yield Kind.TASK, here / name, RunKey(number, prefix + task_id)


def after(stamp: str, since: datetime) -> bool:
    """True when the record's time stamp is at or after `since`."""
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return False
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)) >= since


__all__ = ["Catalog", "Kind", "RunEntry", "after", "read_json", "task_result"]
