"""The plan store: one SQLite file in the state dir that survives any crash.

WAL with `synchronous=FULL`, and every write one `BEGIN IMMEDIATE` transaction that either
lands whole or not at all, so a process killed at any instant leaves the store as it was
before or after a step, never between. The store, not the caller, decides how an attempt
ends (`code_runner.plans.states.settle_state`), and publishing an item is one transaction:
the attempt completed, its ledger row, the plan's new head, and any checkpoint or finding.

Phase-2 callers use: `import_plan`, `admit`, `mark_running`, `record_first_reason`,
`record_finding`, `settle`, `recover`, `end_run`, and the queries (`plan`, `attempts`,
`active_attempt`, `ledger`, `checkpoints`, `findings`, `next_item`).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import code_runner.plans.lock as lock
from code_runner.clock import utc_now
from code_runner.plans.database import PlanRefused, StoreBase, _context, default_plan_id
from code_runner.plans.model import Plan, canonical_sha256, item_sha256
from code_runner.plans.outcome import Commit, Outcome, Settled, plan_status_after
from code_runner.plans.states import (
    AttemptState,
    FirstReason,
    PlanStatus,
    RunEnd,
    check_attempt,
    settle_state,
)

MAX_DIAGNOSTIC = 4000
_ADMITTING = frozenset({PlanStatus.READY, PlanStatus.PAUSED, PlanStatus.RUNNING})


class PlanStore(StoreBase):
    """Every write a plan run makes, each one transaction."""

    # --- plans ----------------------------------------------------------------------------

    def import_plan(
        self,
        plan: Plan,
        *,
        source_dir: Path,
        source_git_dir: Path,
        base: str,
        plan_id: str | None = None,
        name: str = "plan",
        settings: Mapping[str, Any] | None = None,
    ) -> tuple[sqlite3.Row, bool]:
        """(plan row, created). The same plan for the same source and base is one plan."""
        digest = plan.content_sha256()
        now = utc_now()
        with self.write() as db:
            same = db.execute(
                "SELECT * FROM plans WHERE content_sha256 = ? AND source_git_dir = ? AND base = ?",
                (digest, str(source_git_dir), base),
            ).fetchone()
            if same is not None:
                return same, False
            plan_id = lock.check_plan_id(plan_id or default_plan_id(name, digest))
            if db.execute("SELECT 1 FROM plans WHERE plan_id = ?", (plan_id,)).fetchone():
                raise PlanRefused(
                    f"a different plan already has the id {plan_id}.",
                    fix="choose another id, or amend that plan with `code-runner plan amend`.",
                )
            db.execute(
                "INSERT INTO plans (plan_id, content_sha256, source_dir, source_git_dir, base,"
                " revision, head, status, settings, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)",
                (
                    plan_id,
                    digest,
                    str(source_dir),
                    str(source_git_dir),
                    base,
                    base,
                    PlanStatus.READY,
                    json.dumps(dict(settings or {})),
                    now,
                    now,
                ),
            )
            self._add_revision(db, plan_id, 1, plan, "import", None)
        return self.plan(plan_id), True

    def _add_revision(
        self,
        db: sqlite3.Connection,
        plan_id: str,
        revision: int,
        plan: Plan,
        origin: str,
        action_id: str | None,
    ) -> None:
        data = plan.model_copy(update={"revision": revision}).canonical()
        db.execute(
            "INSERT INTO revisions VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                plan_id,
                revision,
                json.dumps(data, sort_keys=True),
                canonical_sha256(data),
                origin,
                action_id,
                utc_now(),
            ),
        )

    def amend(
        self, plan_id: str, plan: Plan, *, expected_revision: int, action_id: str | None = None
    ) -> sqlite3.Row:
        """A new revision; the context generation bumps, so running attempts end stale."""
        with self.write() as db:
            row = self._plan(db, plan_id)
            if row["revision"] != expected_revision:
                raise PlanRefused(
                    f"plan {plan_id} is at revision {row['revision']}, not {expected_revision}.",
                    fix="read `code-runner plan status` and amend the current revision.",
                )
            if PlanStatus(row["status"]) is PlanStatus.CANCELLED:
                raise PlanRefused(f"plan {plan_id} is cancelled.", fix="import a new plan.")
            revision = row["revision"] + 1
            self._add_revision(db, plan_id, revision, plan, "amend", action_id)
            status = PlanStatus(row["status"])
            new_status = PlanStatus.READY if status is PlanStatus.DONE else status
            self._update_plan(db, row, status=new_status, revision=revision, bump=True)
        return self.plan(plan_id)

    # --- attempts -------------------------------------------------------------------------

    def admit(
        self,
        plan_id: str,
        item: str,
        *,
        expected_state_version: int,
        budget_s: float,
        deadline: float | None = None,
        record_dir: str | None = None,
    ) -> sqlite3.Row:
        """A new `pending` attempt for the plan's next item, owned by this process."""
        now = time.time()
        with self.write() as db:
            row = self._plan(db, plan_id)
            self._admission_guards(db, row, item, expected_state_version, now)
            attempt_id = str(uuid.uuid4())
            plan = self.revision(plan_id)
            db.execute(
                "INSERT INTO attempts (id, plan_id, item, item_sha256, revision, parent, state,"
                " context, deadline, record_dir, owner_pid, owner_started_at, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    attempt_id,
                    plan_id,
                    item,
                    item_sha256(plan.item(item)),
                    row["revision"],
                    row["head"],
                    AttemptState.PENDING,
                    _context(row).to_json(),
                    deadline,
                    record_dir,
                    os.getpid(),
                    lock._process_start(os.getpid()),
                    utc_now(),
                ),
            )
            self._update_plan(
                db,
                row,
                status=PlanStatus.RUNNING,
                reason="",
                current_attempt_id=attempt_id,
                budget_deadline=row["budget_deadline"] or now + budget_s,
            )
        return self.attempt(attempt_id)

    def _admission_guards(
        self, db: sqlite3.Connection, row: sqlite3.Row, item: str, expected: int, now: float
    ) -> None:
        plan_id = row["plan_id"]
        status = PlanStatus(row["status"])
        why = None
        if row["state_version"] != expected:
            why = "the plan changed since it was read"
        elif status not in _ADMITTING:
            why = f"the plan is {status}"
        elif row["cancel_requested"]:
            why = "a cancel is pending"
        elif self._active(db, plan_id) is not None:
            why = "another attempt of it is still active"
        elif self._open_gates(db, plan_id):
            why = "a checkpoint or finding is open"
        elif row["budget_deadline"] is not None and now > row["budget_deadline"]:
            why = "its time budget is spent"
        elif self.next_item(plan_id) != item:
            why = f"{item} is not its next item"
        if why:
            raise PlanRefused(
                f"plan {plan_id} cannot start {item}: {why}.",
                fix=f"see `code-runner plan status {plan_id}`.",
            )

    def record_first_reason(self, attempt_id: str, reason: FirstReason) -> FirstReason | None:
        """Record why the attempt must stop, unless a reason is already set; return the one
        that stands (None when the attempt already ended)."""
        with self.write() as db:
            row = db.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
            if row is None or not AttemptState(row["state"]).active:
                return None
            if row["first_reason"] is not None:
                return FirstReason(row["first_reason"])
            db.execute("UPDATE attempts SET first_reason = ? WHERE id = ?", (reason, attempt_id))
            self._update_plan(db, self._plan(db, row["plan_id"]))
        return reason

    def mark_running(self, attempt_id: str) -> sqlite3.Row:
        """pending -> running, after the launch check: still current, no stop reason."""
        with self.write() as db:
            row = self.attempt(attempt_id)
            plan = self._plan(db, row["plan_id"])
            current = (
                plan["current_attempt_id"] == attempt_id
                and row["context"] == _context(plan).to_json()
            )
            if row["first_reason"] is not None or not current:
                raise PlanRefused(
                    f"attempt {attempt_id} may not start: "
                    + ("a stop was requested." if current else "the plan changed."),
                    fix="settle it; `code-runner plan resume` starts a new attempt.",
                )
            check_attempt(AttemptState(row["state"]), AttemptState.RUNNING)
            db.execute(
                "UPDATE attempts SET state = ?, started_at = ? WHERE id = ?",
                (AttemptState.RUNNING, utc_now(), attempt_id),
            )
            self._update_plan(db, plan)
        return self.attempt(attempt_id)

    def record_finding(self, attempt_id: str, kind: str, detail: str) -> bool:
        """A safety finding from the runner's own audit; the first one per attempt is kept."""
        with self.write() as db:
            row = self.attempt(attempt_id)
            if not AttemptState(row["state"]).active:
                return False
            cursor = db.execute(
                "INSERT OR IGNORE INTO findings (plan_id, attempt_id, item, kind, detail,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (row["plan_id"], attempt_id, row["item"], kind, detail[:MAX_DIAGNOSTIC], utc_now()),
            )
            return bool(cursor.rowcount == 1)

    def settle(self, attempt_id: str, outcome: Outcome) -> Settled:
        """End the attempt by the settlement mapping and act on it, in one transaction."""
        with self.write() as db:
            return self._settle(db, self.attempt(attempt_id), outcome)

    def _settle(self, db: sqlite3.Connection, row: sqlite3.Row, outcome: Outcome) -> Settled:
        if not AttemptState(row["state"]).active:
            raise PlanRefused(f"attempt {row['id']} already ended ({row['state']}).", fix="none.")
        plan = self._plan(db, row["plan_id"])
        current = (
            plan["current_attempt_id"] == row["id"] and row["context"] == _context(plan).to_json()
        )
        reason = FirstReason(row["first_reason"]) if row["first_reason"] else None
        end, diagnostic = _checked_end(row, outcome)
        settled = settle_state(reason, end, context_current=current, diagnostic=diagnostic)
        state, text = settled.state, settled.reason
        if (
            state is AttemptState.COMPLETED
            and AttemptState(row["state"]) is not AttemptState.RUNNING
        ):
            state, text = AttemptState.FAILED, "The attempt never started its agent."
        if state is AttemptState.COMPLETED and plan["cancel_requested"]:
            state, text = (
                AttemptState.CANCELLED,
                "The plan was cancelled before the result was saved.",
            )
        check_attempt(AttemptState(row["state"]), state)
        db.execute(
            "UPDATE attempts SET state = ?, diagnostic = ?, diagnostic_ref = ?, stop_reason = ?,"
            " result = ?, settled_at = ? WHERE id = ?",
            (
                state,
                text[:MAX_DIAGNOSTIC],
                outcome.diagnostic_ref,
                outcome.stop_reason,
                json.dumps(outcome.result()),
                utc_now(),
                row["id"],
            ),
        )
        published = state is AttemptState.COMPLETED and outcome.commit is not None
        if published and outcome.commit is not None:
            _insert_ledger(db, row, outcome.commit)
        finding = db.execute(
            "SELECT id FROM findings WHERE attempt_id = ?", (row["id"],)
        ).fetchone()
        after = plan_status_after(
            state=state,
            outcome=outcome,
            cancel_requested=bool(plan["cancel_requested"]),
            time_limit=settled.needs_human,
            finding=finding is not None,
            last_item=self._is_last(row, state),
        )
        if finding is not None:
            db.execute("UPDATE findings SET escalated_at = ? WHERE id = ?", (utc_now(), finding[0]))
        if after.checkpoint and outcome.commit is not None:
            _insert_checkpoint(db, row, after.checkpoint, outcome, self._completed_items(db, row))
        fields: dict[str, Any] = {"current_attempt_id": None}
        if published and outcome.commit is not None:
            fields["head"] = outcome.commit.sha
        self._update_plan(
            db, plan, status=after.status, reason=after.reason or text, bump=published, **fields
        )
        return Settled(row["id"], state, text, after.status)

    def _is_last(self, row: sqlite3.Row, state: AttemptState) -> bool:
        if state is not AttemptState.COMPLETED:
            return False
        return self.next_item(row["plan_id"]) is None  # reads this transaction's own writes

    def _completed_items(self, db: sqlite3.Connection, row: sqlite3.Row) -> list[str]:
        return [
            r[0]
            for r in db.execute(
                "SELECT item FROM attempts WHERE plan_id = ? AND state = ? AND superseded = 0"
                " ORDER BY settled_at",
                (row["plan_id"], AttemptState.COMPLETED),
            )
        ]

    def recover(
        self,
        plan_id: str,
        ends: Mapping[str, RunEnd] | None = None,
        partial: Mapping[str, str] | None = None,
    ) -> list[Settled]:
        """Finalise every attempt a dead owner left active, by the same mapping, at once.

        The caller holds the plan lock (so the owner is gone) and passes what it learned of
        each run (`ends`, e.g. a timeout from the item record) and the partial patch saved
        from its workspace (`partial`); the rest end as interrupted.
        """
        out: list[Settled] = []
        with self.write() as db:
            for row in db.execute(
                "SELECT * FROM attempts WHERE plan_id = ? AND state IN (?, ?) ORDER BY created_at",
                (plan_id, AttemptState.PENDING, AttemptState.RUNNING),
            ).fetchall():
                end = (ends or {}).get(row["id"], RunEnd.FAILED)
                outcome = Outcome(
                    end=end,
                    diagnostic="Interrupted: code-runner stopped while this was running",
                    diagnostic_ref=(partial or {}).get(row["id"]),
                )
                out.append(self._settle(db, row, outcome))
        return out

    def end_run(self, plan_id: str, reason: str = "stopped between items") -> None:
        """The run process is leaving a `running` plan with nothing active: `paused`."""
        with self.write() as db:
            row = self._plan(db, plan_id)
            if (
                PlanStatus(row["status"]) is PlanStatus.RUNNING
                and self._active(db, plan_id) is None
            ):
                self._update_plan(db, row, status=PlanStatus.PAUSED, reason=reason)


def _checked_end(row: sqlite3.Row, outcome: Outcome) -> tuple[RunEnd, str]:
    """A result that claims success must carry a sound commit (or be unchanged)."""
    if outcome.end is not RunEnd.OK:
        return outcome.end, outcome.diagnostic
    commit = outcome.commit
    if commit is None:
        if outcome.unchanged:
            return RunEnd.OK, ""
        return RunEnd.FAILED, "The runner commit was refused: none was made"
    if not re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", commit.sha) or commit.sha == row["parent"]:
        return RunEnd.FAILED, f"The runner commit was refused: {commit.sha[:64]!r} is not new"
    return RunEnd.OK, ""


def _insert_ledger(db: sqlite3.Connection, row: sqlite3.Row, commit: Commit) -> None:
    db.execute(
        "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row["plan_id"],
            commit.sha,
            row["item"],
            row["revision"],
            row["id"],
            row["parent"],
            commit.tree,
            commit.ref,
            utc_now(),
        ),
    )


def _insert_checkpoint(
    db: sqlite3.Connection, row: sqlite3.Row, kind: str, outcome: Outcome, done: list[str]
) -> None:
    paths = outcome.out_of_scope if kind == "scope" else outcome.protected
    assert outcome.commit is not None
    db.execute(
        "INSERT INTO checkpoints (plan_id, attempt_id, kind, item, revision, head,"
        " completed_items, paths, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            row["plan_id"],
            row["id"],
            kind,
            row["item"],
            row["revision"],
            outcome.commit.sha,
            json.dumps(done),
            json.dumps(list(paths)),
            utc_now(),
        ),
    )
