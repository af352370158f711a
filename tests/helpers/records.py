"""Run records made elsewhere (committed fixtures), sealed as this machine's runner would."""

from __future__ import annotations

import shutil
from pathlib import Path

from code_runner.record import RecordPaths
from code_runner.record.seal import seal


def sealed_copy(recorded: Path, dest: Path, task_id: str) -> Path:
    """Copy a record to `dest` and seal it with the current state dir's key."""
    shutil.copytree(recorded, dest)
    seal(RecordPaths(dest, task_id))
    return dest


def reseal(run_dir: Path, task_id: str) -> None:
    """Seal a record's files as they are now (a test that edits one on purpose)."""
    seal(RecordPaths(run_dir, task_id))
