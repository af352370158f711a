"""What a person does to a plan: stop, cancel, amend, approve; each one idempotent.

Each runs as a user action (`code_runner.plans.user_action`): the same command against the
same state replays its saved outcome and exit code and applies nothing.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from code_runner.clock import utc_now
from code_runner.plans.database import PlanRefused
from code_runner.plans.model import Plan, item_sha256
from code_runner.plans.states import AttemptState, FirstReason, PlanStatus
from code_runner.plans.store import PlanStore
from code_runner.plans.user_action import ActionResult as ActionResult
from code_runner.plans.user_action import Apply as Apply
from code_runner.plans.user_action import check_action_id as check_action_id
from code_runner.plans.user_action import run_action as run_action

# --- stop and cancel ----------------------------------------------------------------------


def stop(store: PlanStore) -> Apply:
    """Record `cancelled` as the active attempt's first reason (the first one stands)."""

    def apply(db: sqlite3.Connection, row: sqlite3.Row) -> dict[str, Any]:
        plan_id = row["plan_id"]
        active = store._active(db, plan_id)
        if active is not None:
            _first_reason(db, active, FirstReason.CANCELLED)
            store._update_plan(db, row)
            return {
                "message": f"stop requested for {active['item']} (attempt {active['id']})",
                "attempt": active["id"],
                "signal": True,
            }
        if PlanStatus(row["status"]) is PlanStatus.RUNNING:
            return {"message": "stop requested between items", "signal": True}
        return {"message": f"plan {plan_id} is {row['status']}: nothing is running"}

    return apply


def cancel(store: PlanStore, reason: str) -> Apply:
    """Close the plan: at once, or (an attempt active) when that attempt settles."""

    def apply(db: sqlite3.Connection, row: sqlite3.Row) -> dict[str, Any]:
        plan_id = row["plan_id"]
        status = PlanStatus(row["status"])
        if status is PlanStatus.CANCELLED:
            raise PlanRefused(f"plan {plan_id} is already cancelled.", fix="nothing to do.")
        text = f"cancelled: {reason}" if reason else "cancelled"
        active = store._active(db, plan_id)
        if active is not None:
            _first_reason(db, active, FirstReason.CANCELLED)
            store._update_plan(db, row, cancel_requested=text)
            return {
                "message": f"stopping {active['item']}, then cancelling plan {plan_id}",
                "attempt": active["id"],
                "signal": True,
            }
        store._update_plan(db, row, status=PlanStatus.CANCELLED, reason=text)
        return {
            "message": f"plan {plan_id} is cancelled",
            "signal": status is PlanStatus.RUNNING,
        }

    return apply


def _first_reason(db: sqlite3.Connection, attempt: sqlite3.Row, reason: FirstReason) -> None:
    if attempt["first_reason"] is None:
        db.execute("UPDATE attempts SET first_reason = ? WHERE id = ?", (reason, attempt["id"]))


# --- amend --------------------------------------------------------------------------------


def amend(
    store: PlanStore, plan: Plan, expected_revision: int | None, origin: str = "amend"
) -> Apply:
    """A new revision (`origin`: `amend` for a whole plan, `edit` for edit operations);
    completed items whose content (or whose parent) changed are rerun."""

    def apply(db: sqlite3.Connection, row: sqlite3.Row) -> dict[str, Any]:
        plan_id = row["plan_id"]
        _no_active(store, db, row, "amended")
        if PlanStatus(row["status"]) is PlanStatus.CANCELLED:
            raise PlanRefused(f"plan {plan_id} is cancelled.", fix="import a new plan.")
        expected = row["revision"] if expected_revision is None else expected_revision
        if row["revision"] != expected:
            raise PlanRefused(
                f"plan {plan_id} is at revision {row['revision']}, not {expected}.",
                fix="read `code-runner plan status` and amend the current revision.",
            )
        revision = row["revision"] + 1
        store._add_revision(db, plan_id, revision, plan, origin, None)
        store._update_plan(db, row, revision=revision, bump=True)
        rerun: list[str] = []
        if not _open(db, plan_id, "scope"):  # a scope pause is settled by `approve`
            rerun = _rechain(store, db, plan_id)
        _reopen(store, db, plan_id)
        return {
            "message": f"plan {plan_id} is at revision r{revision}",
            "revision": revision,
            "rerun": rerun,
        }

    return apply


def _rechain(store: PlanStore, db: sqlite3.Connection, plan_id: str) -> list[str]:
    """Keep the completed items that still match the current revision, in order, each on
    the previous one's commit; supersede the rest and move the head back to the last kept
    commit. Returns the items that will run again."""
    row = store._plan(db, plan_id)
    plan = store.revision(plan_id)
    live = {
        a["item"]: a
        for a in db.execute(
            "SELECT * FROM attempts WHERE plan_id = ? AND state = ? AND superseded = 0"
            " ORDER BY settled_at, rowid",
            (plan_id, AttemptState.COMPLETED),
        )
    }
    owned = {r["attempt_id"]: r["sha"] for r in store.ledger(plan_id)}
    head, kept = row["base"], set()
    for item in plan.items:
        attempt = live.get(item.id)
        if attempt is None or attempt["item_sha256"] != item_sha256(item):
            break
        if attempt["parent"] != head:
            break
        kept.add(attempt["id"])
        head = owned.get(attempt["id"], head)
    dropped = sorted((a for a in live.values() if a["id"] not in kept), key=lambda a: a["item"])
    for attempt in dropped:
        db.execute("UPDATE attempts SET superseded = 1 WHERE id = ?", (attempt["id"],))
        _resolve(db, attempt["id"], "superseded", row["revision"])
    if head != row["head"]:
        store._update_plan(db, row, head=head, bump=True)
    return [a["item"] for a in dropped]


def _reopen(store: PlanStore, db: sqlite3.Connection, plan_id: str) -> None:
    """A done plan with an item to run again is ready; a gate nothing holds any more too."""
    row = store._plan(db, plan_id)
    status = PlanStatus(row["status"])
    nothing_open = not _open(db, plan_id, None) and not _open_findings(db, plan_id)
    rerun = status is PlanStatus.DONE and store.next_item(plan_id) is not None
    released = status in (PlanStatus.NEEDS_AMENDMENT, PlanStatus.NEEDS_APPROVAL) and nothing_open
    if rerun or released:
        store._update_plan(db, row, status=PlanStatus.READY, reason="amended")


# --- approve ------------------------------------------------------------------------------


def approve(store: PlanStore, mode: str) -> Apply:
    """Leave a gate: `continue` (adopt the paused commit under an amended revision), `redo`
    (roll the item back and run it again) or `changes` (accept a protected change)."""

    def apply(db: sqlite3.Connection, row: sqlite3.Row) -> dict[str, Any]:
        plan_id = row["plan_id"]
        status = PlanStatus(row["status"])
        if not status.gate:
            raise PlanRefused(
                f"plan {plan_id} is {status}, not waiting for a person.",
                fix=f"see `code-runner plan status {plan_id}`.",
            )
        _no_active(store, db, row, "approved")
        if status is PlanStatus.NEEDS_HUMAN:
            return _leave_human_gate(store, db, row, mode)
        kind = "scope" if status is PlanStatus.NEEDS_AMENDMENT else "approval"
        checkpoint = _open(db, plan_id, kind)
        if checkpoint is None:
            raise PlanRefused(f"plan {plan_id} has no open {kind} checkpoint.", fix="none.")
        if mode == "redo":
            return _redo(store, db, row, checkpoint)
        if kind == "scope" and mode == "continue":
            return _continue(store, db, row, checkpoint)
        if kind == "approval" and mode == "changes":
            _resolve_checkpoint(db, checkpoint, "changes", row["revision"])
            store._update_plan(db, row, status=PlanStatus.READY, reason="protected change approved")
            return {"message": f"the protected change of {checkpoint['item']} is approved"}
        wanted = "--continue or --redo" if kind == "scope" else "--changes or --redo"
        raise PlanRefused(
            f"plan {plan_id} is {status}: --{mode} does not leave it.", fix=f"use {wanted}."
        )

    return apply


def _leave_human_gate(
    store: PlanStore, db: sqlite3.Connection, row: sqlite3.Row, mode: str
) -> dict[str, Any]:
    if mode != "redo":
        raise PlanRefused(
            f"plan {row['plan_id']} needs a person: only --redo leaves it.",
            fix="read the finding in `plan status`, then `plan approve PLAN --redo`.",
        )
    now = utc_now()
    db.execute(
        "UPDATE findings SET resolved_action = 'redo', resolved_at = ?"
        " WHERE plan_id = ? AND resolved_at IS NULL",
        (now, row["plan_id"]),
    )
    for checkpoint in db.execute(
        "SELECT * FROM checkpoints WHERE plan_id = ? AND resolved_at IS NULL", (row["plan_id"],)
    ).fetchall():
        _resolve_checkpoint(db, checkpoint, "redo", row["revision"])
    store._update_plan(
        db, row, status=PlanStatus.READY, reason="finding acknowledged", budget_deadline=None
    )
    return {"message": "the finding is acknowledged; the item runs again on resume"}


def _redo(
    store: PlanStore, db: sqlite3.Connection, row: sqlite3.Row, checkpoint: sqlite3.Row
) -> dict[str, Any]:
    attempt = store.attempt(checkpoint["attempt_id"])
    db.execute("UPDATE attempts SET superseded = 1 WHERE id = ?", (attempt["id"],))
    _resolve_checkpoint(db, checkpoint, "redo", row["revision"])
    store._update_plan(
        db, row, status=PlanStatus.READY, reason="rolled back", head=attempt["parent"], bump=True
    )
    rerun = [attempt["item"], *_rechain(store, db, row["plan_id"])]
    return {"message": f"{attempt['item']} is rolled back and runs again on resume", "rerun": rerun}


def _continue(
    store: PlanStore, db: sqlite3.Connection, row: sqlite3.Row, checkpoint: sqlite3.Row
) -> dict[str, Any]:
    """Adopt the paused item's commit under an amended revision that declares exactly its
    out-of-scope paths and leaves every completed item as it was."""
    plan_id, item_id = row["plan_id"], checkpoint["item"]
    if row["revision"] <= checkpoint["revision"]:
        raise PlanRefused(
            f"{item_id} paused at revision r{checkpoint['revision']}; nothing amends it yet.",
            fix=f"declare {', '.join(json.loads(checkpoint['paths']))} in {item_id}:"
            f" `code-runner plan amend {plan_id} FILE`, then approve again.",
        )
    old, new = store.revision(plan_id, checkpoint["revision"]), store.revision(plan_id)
    problems = continuation_problems(old, new, checkpoint)
    if problems:
        raise PlanRefused(
            f"revision r{row['revision']} cannot continue {item_id}: " + "; ".join(problems),
            fix="amend again, or `plan approve PLAN --redo` to run the item again.",
        )
    attempt = store.attempt(checkpoint["attempt_id"])
    db.execute(
        "UPDATE attempts SET item_sha256 = ? WHERE id = ?",
        (item_sha256(new.item(item_id)), attempt["id"]),
    )
    _resolve_checkpoint(db, checkpoint, "continue", row["revision"])
    protected = json.loads(attempt["result"] or "{}").get("protected", [])
    status, reason = PlanStatus.READY, "amendment approved"
    if protected:
        _approval_checkpoint(db, attempt, checkpoint, protected)
        status, reason = PlanStatus.NEEDS_APPROVAL, "changes to protected files"
    store._update_plan(db, row, status=status, reason=reason)
    rerun = _rechain(store, db, plan_id)
    return {"message": f"{item_id} is adopted under r{row['revision']}", "rerun": rerun}


def continuation_problems(old: Plan, new: Plan, checkpoint: sqlite3.Row) -> list[str]:
    item_id = checkpoint["item"]
    problems = []
    for done in json.loads(checkpoint["completed_items"]):
        if done == item_id:
            continue
        if done not in {i.id for i in new.items}:
            problems.append(f"{done} was done and is gone")
        elif item_sha256(new.item(done)) != item_sha256(old.item(done)):
            problems.append(f"{done} was done and changed")
    if item_id not in {i.id for i in new.items}:
        return [*problems, f"{item_id} is gone"]
    before, after = old.item(item_id), new.item(item_id)
    same = before.model_dump(exclude={"files"}) == after.model_dump(exclude={"files"})
    if not same or after.files[: len(before.files)] != before.files:
        problems.append(f"{item_id} may only gain file declarations")
    added = {f.path for f in after.files[len(before.files) :]}
    wanted = set(json.loads(checkpoint["paths"]))
    if added - wanted:
        problems.append(f"{', '.join(sorted(added - wanted))} were not out of scope")
    if wanted - added:
        problems.append(f"{', '.join(sorted(wanted - added))} are not declared")
    return problems


# --- helpers ------------------------------------------------------------------------------


def _no_active(store: PlanStore, db: sqlite3.Connection, row: sqlite3.Row, verb: str) -> None:
    active = store._active(db, row["plan_id"])
    if active is not None:
        raise PlanRefused(
            f"plan {row['plan_id']} cannot be {verb} while {active['item']} runs.",
            fix=f"`code-runner plan stop {row['plan_id']}` first, or wait for it.",
        )
    if row["cancel_requested"]:
        raise PlanRefused(f"plan {row['plan_id']} is being cancelled.", fix="nothing to do.")


def _open(db: sqlite3.Connection, plan_id: str, kind: str | None) -> sqlite3.Row | None:
    query = "SELECT * FROM checkpoints WHERE plan_id = ? AND resolved_at IS NULL"
    args: tuple[str, ...] = (plan_id,)
    if kind is not None:
        query, args = query + " AND kind = ?", (plan_id, kind)
    return db.execute(query + " ORDER BY id DESC", args).fetchone()  # type: ignore[no-any-return]


def _open_findings(db: sqlite3.Connection, plan_id: str) -> bool:
    found = db.execute(
        "SELECT 1 FROM findings WHERE plan_id = ? AND resolved_at IS NULL", (plan_id,)
    ).fetchone()
    return found is not None


def _resolve_checkpoint(
    db: sqlite3.Connection, checkpoint: sqlite3.Row, action: str, revision: int
) -> None:
    db.execute(
        "UPDATE checkpoints SET resolved_action = ?, resolved_revision = ?, resolved_at = ?"
        " WHERE id = ?",
        (action, revision, utc_now(), checkpoint["id"]),
    )


def _resolve(db: sqlite3.Connection, attempt_id: str, action: str, revision: int) -> None:
    db.execute(
        "UPDATE checkpoints SET resolved_action = ?, resolved_revision = ?, resolved_at = ?"
        " WHERE attempt_id = ? AND resolved_at IS NULL",
        (action, revision, utc_now(), attempt_id),
    )


def _approval_checkpoint(
    db: sqlite3.Connection, attempt: sqlite3.Row, scope: sqlite3.Row, protected: list[str]
) -> None:
    db.execute(
        "INSERT OR IGNORE INTO checkpoints (plan_id, attempt_id, kind, item, revision, head,"
        " completed_items, paths, created_at) VALUES (?, ?, 'approval', ?, ?, ?, ?, ?, ?)",
        (
            attempt["plan_id"],
            attempt["id"],
            attempt["item"],
            attempt["revision"],
            scope["head"],
            scope["completed_items"],
            json.dumps(protected),
            utc_now(),
        ),
    )
