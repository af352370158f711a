"""One run per plan: an OS lock the kernel releases when its holder dies.

The lock file is never deleted (deleting it would let two processes hold two different
files under one name); beside it, a lease names the holder's pid and start time so the
second taker can say who holds it. Taking the lock is the first thing a run does, before
the store is opened, so a second run writes nothing at all.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import psutil

from code_runner import dirs, files
from code_runner.clock import utc_now
from code_runner.errors import LockHeld, UsageError

PLAN_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,79}$"


def check_plan_id(plan_id: str) -> str:
    """Refuse an id before it is used in a path (`../x` never becomes a file name)."""
    if not re.fullmatch(PLAN_ID_PATTERN, plan_id):
        raise UsageError(
            f"{plan_id!r} is not a plan id.",
            fix="a plan id is lowercase letters, digits, '.', '_' or '-' (see `plan list`).",
        )
    return plan_id


def plans_dir() -> Path:
    return dirs.state_dir() / "plans"


def _process_start(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


@contextlib.contextmanager
def plan_lock(plan_id: str) -> Iterator[Path]:
    """Hold the plan's lock for the block; LockHeld (exit 3) when another process has it."""
    lock_dir = plans_dir() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / f"{check_plan_id(plan_id)}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = read_lease(plan_id)
            pid = holder.get("pid") if holder else None
            raise LockHeld(
                f"plan {plan_id} is running in pid {pid}."
                if pid
                else f"plan {plan_id} is running in another process.",
                fix=f"wait for it, or stop it with `code-runner plan stop {plan_id}`.",
            ) from None
        lease = {
            "pid": os.getpid(),
            "started_at": _process_start(os.getpid()),
            "taken_at": utc_now(),
        }
        files.atomic_write_json(path.with_suffix(".lease.json"), lease)
        yield path
    finally:
        os.close(fd)


def read_lease(plan_id: str) -> dict[str, object] | None:
    path = plans_dir() / "locks" / f"{check_plan_id(plan_id)}.lease.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
