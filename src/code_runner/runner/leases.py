"""One lease per live run, in the state dir, so `gc` finds every run that died.

A workspace's own lease only covers the part of a run that has a workspace: a run killed
before its workspace exists (or between `mkdir` and the workspace lease), or after the
workspace is released but before the record is final, would leave a record stuck in a
working state, or a workspace `gc` cannot attribute. The run lease is written (atomically)
before the record is opened and removed only once the record is terminal, so every kill
point is covered: `gc` sees the owner is gone, removes `workspaces/<run_id>` if it is there,
and marks the record abandoned.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psutil

from code_runner import dirs, files


def leases_dir() -> Path:
    return dirs.state_dir() / "runs"


def take(run_id: str, output_dir: Path, task_id: str) -> Path:
    """Record that this process owns run `run_id` (whose record is in `output_dir`)."""
    path = leases_dir() / f"{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    files.atomic_write_json(
        path,
        {
            "run_id": run_id,
            "pid": pid,
            "pid_started": psutil.Process(pid).create_time(),
            "output_dir": str(output_dir),
            "task_id": task_id,
            "created_at": time.time(),
        },
        durable=False,
    )
    return path


def drop(run_id: str) -> None:
    (leases_dir() / f"{run_id}.json").unlink(missing_ok=True)


def registered() -> list[tuple[Path, dict[str, Any]]]:
    """Every run lease (unreadable ones included, as an empty dict)."""
    base = leases_dir()
    if not base.is_dir():
        return []
    found: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted(base.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        found.append((path, data if isinstance(data, dict) else {}))
    return found


__all__ = ["drop", "leases_dir", "registered", "take"]
