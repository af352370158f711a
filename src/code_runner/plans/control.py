"""Reaching a plan's run from another terminal: resume it, signal it, wait for it.

A stop or cancel is first saved in the store (a user action); only after that transaction
committed is the running process told, through the item's stop-request file and a
SIGTERM to the pid its lock lease names (checked against the process start time, so a
reused pid is never signalled). When no process holds the plan's lock, its owner is dead:
recovery settles what it left at once, under the lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from code_runner import files
from code_runner.clock import utc_now
from code_runner.errors import LockHeld, UsageError
from code_runner.plans.commands import Approvals, show_argv
from code_runner.plans.item import item_argvs
from code_runner.plans.lock import _process_start, plan_lock, read_lease
from code_runner.plans.recovery import recover_plan
from code_runner.plans.report import plan_status, record_dir, write_views
from code_runner.plans.states import PlanStatus
from code_runner.plans.store import PlanStore
from code_runner.record import RecordPaths
from code_runner.repo import git


def tell_run(store: PlanStore, plan_id: str) -> str:
    """Make the saved stop reach the run: signal the live holder, or recover a dead one."""
    try:
        with plan_lock(plan_id):
            recover_plan(store, plan_id)
            write_views(store, plan_id, record_dir(plan_id, store.plan(plan_id)["settings"]))
            return "no process was running it; what it left is settled"
    except LockHeld:
        pass
    active = store.active_attempt(plan_id)
    if active is not None and active["record_dir"]:
        paths = RecordPaths(Path(active["record_dir"]), active["item"])
        with contextlib.suppress(OSError):
            files.atomic_write_json(
                paths.stop_request, {"requested_at": utc_now(), "by_pid": os.getpid()}
            )
    pid = (read_lease(plan_id) or {}).get("pid")
    if isinstance(pid, int) and _owner_alive(plan_id):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            return f"SIGTERM sent to pid {pid}"
    return "the run polls for the stop request"


def refresh_views(store: PlanStore, plan_id: str) -> None:
    """Rewrite the plan's record files from the store after a person's action, unless a live
    run holds the plan (it writes them itself)."""
    with contextlib.suppress(LockHeld), plan_lock(plan_id):
        write_views(store, plan_id, record_dir(plan_id, store.plan(plan_id)["settings"]))


def wait_settled(store: PlanStore, plan_id: str, wait_s: float) -> bool:
    """Until nothing of the plan is active and no process holds its lock (or `wait_s`)."""
    deadline = time.monotonic() + wait_s
    while True:
        quiet = store.active_attempt(plan_id) is None
        if quiet:
            try:
                with plan_lock(plan_id):
                    return True
            except LockHeld:
                pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def stored_settings(row: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(row["settings"] or "{}")
    return data


def plan_approvals(store: PlanStore, plan_id: str, given: Approvals) -> Approvals:
    """The approvals saved at the plan's import plus the user's current ones."""
    saved = [tuple(entry) for entry in stored_settings(store.plan(plan_id)).get("approved", [])]
    return Approvals(
        tuple(dict.fromkeys([*given.entries, *saved])), (*given.origins, "the plan's import")
    )


def resume_approvals(store: PlanStore, plan_id: str, given: Approvals) -> Approvals:
    """The approvals saved at import plus the user's current ones; every argv of the
    current revision must be among them, or the plan does not resume (exit 2)."""
    approvals = plan_approvals(store, plan_id, given)
    missing = [
        f"{item.id}: {show_argv(argv)}"
        for item in store.revision(plan_id).items
        for argv in item_argvs(item)
        if not approvals.approves(argv)
    ]
    if missing:
        raise UsageError(
            "the plan has commands you have not approved, so it did not resume:\n  "
            + "\n  ".join(missing),
            fix="approve each exact argv with --allow-cmd '<argv as JSON>' (as shown), or in"
            " [plans] allowed_commands of your config.",
        )
    return approvals


def resume(
    plan_id: str,
    options: dict[str, Any],
    given: Approvals,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """`plan resume`: the lock (exit 3 when held, before any write), recovery, then items
    from the first not done at the current revision."""
    from code_runner.plans.execute import PlanRun, RunSettings

    with plan_lock(plan_id), PlanStore.open() as store:
        assert isinstance(store, PlanStore)
        row = store.plan(plan_id)
        if PlanStatus(row["status"]) is PlanStatus.CANCELLED:
            raise UsageError(f"plan {plan_id} is cancelled.", fix="import a new plan.")
        resume_approvals(store, plan_id, given)
        saved = stored_settings(row)
        settings = RunSettings(
            backend=options.get("backend") or saved.get("backend", "openai"),
            max_rounds=options.get("max_rounds") or saved.get("max_rounds", 3),
            item_timeout_s=options.get("item_timeout_s") or saved.get("item_timeout_s", 1800.0),
            base_dir=Path(saved.get("base_dir") or row["source_dir"]),
            output_dir=Path(saved["output_dir"]) if saved.get("output_dir") else None,
            tmux=saved.get("tmux"),  # the plan's budget is kept in the store
            on_scope=saved.get("on_scope") or "warn",
        )
        source = git.open_source(Path(row["source_dir"]))
        out = record_dir(plan_id, row["settings"])
        return PlanRun(store, plan_id, source, settings, out, on_event).execute(row["base"])


def watch_status(store: PlanStore, plan_id: str, interval_s: float) -> Iterator[dict[str, Any]]:
    """`plan status --watch`: the status at each change, until the plan is not running."""
    last: dict[str, Any] | None = None
    while True:
        alive = _owner_alive(plan_id)  # before the read: a dead owner's last write is seen
        status = plan_status(store, plan_id)
        shown = {k: v for k, v in status.items() if k != "updated_at"}
        if shown != last:
            last = shown
            yield status
        if status["status"] != PlanStatus.RUNNING.value or not alive:
            return
        time.sleep(interval_s)


def _owner_alive(plan_id: str) -> bool:
    lease = read_lease(plan_id) or {}
    pid, started = lease.get("pid"), lease.get("started_at")
    return isinstance(pid, int) and started is not None and _process_start(pid) == started
