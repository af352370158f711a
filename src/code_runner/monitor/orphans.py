"""Experiment records whose monitor is gone: finish them, and let `code-runner gc` find them.

Every exec run registers its run dir in the state dir (`exec-runs/`). `gc` walks that list:
a finished record is dropped from it, a live monitor is left alone, a dead monitor whose
watchdog lives is reported (the watchdog holds the timeout), and a record that has neither is
taken over: a new watchdog if the deadline is still ahead and the command runs, else the tree
is ended and the record finished now.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import code_runner.monitor.watchdog as watchdog
from code_runner import dirs, files
from code_runner.clock import utc_now
from code_runner.monitor.record import ExperimentRecord
from code_runner.monitor.salvage import finish_orphan


def registry_dir() -> Path:
    return dirs.state_dir() / "exec-runs"


def _entry(run_dir: Path) -> Path:
    key = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:20]
    return registry_dir() / f"{key}.json"


def unregister(run_dir: Path) -> None:
    """The record is complete: gc has nothing to look for."""
    _entry(run_dir).unlink(missing_ok=True)


def register(run_dir: Path) -> Path:
    """Note a run dir so `gc` can find it if its monitor dies."""
    path = _entry(run_dir)
    files.atomic_write_json(path, {"run_dir": str(run_dir.resolve()), "registered_at": utc_now()})
    return path


@dataclass(frozen=True)
class Orphan:
    """An exec record whose monitor is gone, and what `gc` did about it."""

    run_dir: str
    reason: str
    action: str
    killed: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "run_dir": self.run_dir,
            "reason": self.reason,
            "action": self.action,
            "killed": self.killed,
        }


def collect_orphans(*, dry_run: bool = False) -> list[Orphan]:
    """Find exec records whose monitor is gone; finish or re-guard them unless `dry_run`."""
    found: list[Orphan] = []
    for entry in sorted(registry_dir().glob("*.json")):
        try:
            run_dir = Path(json.loads(entry.read_text(encoding="utf-8"))["run_dir"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        record = ExperimentRecord.reopen(run_dir)
        if record.result_path.exists() or not run_dir.is_dir():
            if not dry_run:
                entry.unlink(missing_ok=True)  # finished, or its record was removed
            continue
        if not record.watchdog_path.exists():
            continue  # still starting
        orphan = _take_over(record, dry_run=dry_run)
        if orphan is not None:
            found.append(orphan)
    return found


def _take_over(record: ExperimentRecord, *, dry_run: bool) -> Orphan | None:
    config = watchdog.load_config(record)
    if watchdog.is_alive(config.monitor_pid, config.monitor_started_at):
        return None
    status = record.read_status()
    why = f"monitor pid {config.monitor_pid} is gone"
    guard = status.get("watchdog_pid")
    if isinstance(guard, int) and _is_watchdog(guard, record.run_dir):
        return Orphan(str(record.run_dir), why, f"watched: watchdog pid {guard} holds the timeout")
    tree = watchdog.Tree(config)
    tree.scan(monitor_alive=False)
    running = bool(tree.alive())
    past = time.time() >= watchdog.deadline_at(record, config)
    if dry_run:
        action = "would restart its watchdog" if running and not past else "would finish it"
        return Orphan(str(record.run_dir), why + " and so is its watchdog", action)
    if running and not past:
        pid = watchdog.restart(record)
        record.write_status({**status, "watchdog_pid": pid})
        return Orphan(
            str(record.run_dir),
            why + " and so is its watchdog",
            f"restarted its watchdog (pid {pid})",
        )
    kill = tree.kill(config.grace_s) if running else None
    result = finish_orphan(record, timed_out=running, kill=kill)
    return Orphan(
        str(record.run_dir),
        why + " and so is its watchdog",
        f"finished it as {result.state.value}",
        kill.signalled if kill else 0,
    )


def _is_watchdog(pid: int, run_dir: Path) -> bool:
    if not watchdog.is_alive(pid, watchdog.started_at(pid)):
        return False  # gone, or a zombie
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"code_runner.monitor.watchdog" in cmdline and str(run_dir.resolve()).encode() in cmdline
