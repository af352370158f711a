"""One run per plan: an OS lock the kernel releases when its holder dies.

The lock file is never deleted (deleting it would let two processes hold two different
files under one name); beside it, a lease names the holder's pid and start time so the
second taker can say who holds it. Taking the lock is the first thing a run does, before
the store is opened, so a second run writes nothing at all. An export holds a lock of its
own (`export_lock`), so an export and a run of the same plan may overlap, two exports may
not, and recovery knows an `exporting` row whose lock is free was left by a dead process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
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


def _lock_path(plan_id: str, what: str) -> Path:
    return plans_dir() / "locks" / f"{check_plan_id(plan_id)}{what}.lock"


_EXPORT = ".export"


def export_lock(plan_id: str) -> contextlib.AbstractContextManager[Path]:
    """Hold the lock of the plan's exports for the block (exit 3 when one is running)."""
    return plan_lock(plan_id, _EXPORT)


@contextlib.contextmanager
def plan_lock(plan_id: str, what: str = "") -> Iterator[Path]:
    """Hold the plan's lock for the block; LockHeld (exit 3) when another process has it."""
    path = _lock_path(plan_id, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = files.open_lock(path, 0o644)
    try:
        if not files.try_flock(fd):
            holder = read_lease(plan_id, what)
            pid = holder.get("pid") if holder else None
            doing = f"an export of plan {plan_id}" if what else f"plan {plan_id}"
            doing += " is running"
            raise LockHeld(
                f"{doing} in pid {pid}." if pid else f"{doing} in another process.",
                fix="wait for it to finish"
                if what
                else f"wait for it, or stop it with `code-runner plan stop {plan_id}`.",
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


CRASH_AT_ENV = "CODE_RUNNER_PLAN_CRASH_AT"
CRASH_SIGNAL_ENV = "CODE_RUNNER_PLAN_CRASH_SIGNAL"


def crash_point(item: str, step: str) -> None:
    """Die here by SIGKILL when `CODE_RUNNER_PLAN_CRASH_AT` names this step (`audited`, or
    `P2:audited`): how the crash tests stop the real process at an exact step of an item
    (admitted, audited, committed) or of an export, to prove recovery.
    `CODE_RUNNER_PLAN_CRASH_SIGNAL=SIGTERM` sends a stop the process may handle instead."""
    if os.environ.get(CRASH_AT_ENV) in (step, f"{item}:{step}"):
        name = os.environ.get(CRASH_SIGNAL_ENV, "SIGKILL")
        chosen = signal.Signals[name] if name in signal.Signals.__members__ else signal.SIGKILL
        os.kill(os.getpid(), chosen)


def read_lease(plan_id: str, what: str = "") -> dict[str, object] | None:
    path = _lock_path(plan_id, what).with_suffix(".lease.json")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
