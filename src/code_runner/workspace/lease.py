"""Who holds a workspace: a per-source lock for clones, a lease naming the owning process
(pid and start time, so a recycled pid is not mistaken for a live run), and the search for
workspaces whose owner is gone."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from code_runner import dirs, files
from code_runner.errors import LockHeld

LOCK_TIMEOUT_S = 120.0


@contextlib.contextmanager
def source_lock(source_git_dir: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Serialise workspace set-up per source, so concurrent runs can share one source."""
    lock_dir = dirs.locks_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(str(source_git_dir).encode()).hexdigest()[:24]

    def held() -> LockHeld:
        return LockHeld(
            f"another code-runner process has held the lock for {source_git_dir} "
            f"for over {timeout_s:.0f} s.",
            fix="wait for it to finish, or run `code-runner gc` if it was killed.",
        )

    with files.flocked(lock_dir / f"{key}.lock", mode=0o644, timeout_s=timeout_s, held=held):
        yield


def process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def write_lease(root: Path, run_id: str, source_dir: Path, output_dir: Path | None) -> None:
    files.atomic_write_json(
        root / "lease.json",
        {
            "run_id": run_id,
            "pid": os.getpid(),
            "pid_started": process_start(os.getpid()),
            "source": str(source_dir),
            "output_dir": str(output_dir) if output_dir else None,
            "created_at": time.time(),
        },
    )


def read_lease(root: Path) -> dict[str, object] | None:
    try:
        data = json.loads((root / "lease.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def lease_is_live(lease: dict[str, object]) -> bool:
    """True when the process that made the lease is still the same process, still running."""
    pid = lease.get("pid")
    started = lease.get("pid_started")
    if not isinstance(pid, int):
        return False
    actual = process_start(pid)
    if actual is None:
        return False
    return not isinstance(started, int | float) or abs(actual - started) < 1.0


@dataclass(frozen=True)
class Leftover:
    root: Path
    run_id: str
    source: str | None
    output_dir: str | None
    reason: str


def find_leftovers(stale_after_s: float = 60.0) -> list[Leftover]:
    """Workspaces whose owning process is gone (killed runs)."""
    found: list[Leftover] = []
    base = dirs.workspaces_dir()
    if not base.is_dir():
        return found
    for root in sorted(base.iterdir()):
        if not root.is_dir() or root.is_symlink():
            continue
        lease = read_lease(root)
        if lease is None:
            age = time.time() - root.lstat().st_mtime
            if age > stale_after_s:
                found.append(Leftover(root, root.name, None, None, "no lease (crash at start)"))
            continue
        if lease_is_live(lease):
            continue
        found.append(
            Leftover(
                root=root,
                run_id=str(lease.get("run_id", root.name)),
                source=str(lease.get("source")) if lease.get("source") else None,
                output_dir=str(lease.get("output_dir")) if lease.get("output_dir") else None,
                reason=f"owner pid {lease.get('pid')} is gone",
            )
        )
    return found
