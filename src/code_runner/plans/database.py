"""The plan store's connection, its transactions and its read side.

`code_runner.plans.store.PlanStore` adds the writes a run makes; this module holds what
every write and every reader needs: opening the file (WAL, `synchronous=FULL`, migrations),
the `BEGIN IMMEDIATE` transaction, the one plan-row update, and the queries.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import code_runner.plans.lock as lock
from code_runner.clock import utc_now
from code_runner.errors import RecordError, UsageError
from code_runner.plans.migrations import migrate
from code_runner.plans.model import Plan, item_sha256
from code_runner.plans.states import AttemptState, PlanStatus, check_plan

BUSY_TIMEOUT_S = 5.0


class PlanRefused(UsageError):
    """The plan is not in a state for what was asked; nothing was written."""


def store_path() -> Path:
    return lock.plans_dir() / "plans.sqlite"


@dataclass(frozen=True)
class Context:
    """What an attempt depends on; it is current while all four equal the plan's."""

    plan_id: str
    revision: int
    head: str
    generation: int

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


def _context(row: sqlite3.Row) -> Context:
    return Context(row["plan_id"], row["revision"], row["head"], row["context_generation"])


class StoreBase:
    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        self.path = path

    @classmethod
    def open(cls, path: Path | None = None) -> Self:
        path = path or store_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            raise RecordError(f"the plan store {path} is a symlink.", fix="replace it by the file.")
        if path.exists() and not path.is_file():  # a directory or a FIFO planted there
            raise RecordError(
                f"the plan store {path} is not a regular file.",
                fix="move it away; the next plan command creates a new, empty store.",
            )
        if path.exists() and path.stat().st_nlink > 1:
            raise RecordError(
                f"the plan store {path} has other hard links; two names would lock apart.",
                fix="remove the other links to the file.",
            )
        try:
            db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA foreign_keys=ON")
            migrate(db, path, utc_now())
        except sqlite3.DatabaseError as exc:
            raise RecordError(
                f"the plan store {path} cannot be opened: {exc}.",
                fix="restore it from a plans.sqlite.v*.bak copy beside it, or move it away.",
            ) from None
        return cls(db, path)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> StoreBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction: all of the block's writes land, or none."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _plan(self, db: sqlite3.Connection, plan_id: str) -> sqlite3.Row:
        row = db.execute("SELECT * FROM plans WHERE plan_id = ?", (plan_id,)).fetchone()
        if row is None:
            raise UsageError(
                f"no plan {plan_id!r} in {self.path}.", fix="see `code-runner plan list`."
            )
        return row  # type: ignore[no-any-return]

    def _update_plan(
        self,
        db: sqlite3.Connection,
        row: sqlite3.Row,
        *,
        status: PlanStatus | None = None,
        reason: str | None = None,
        bump: bool = False,
        **fields: Any,
    ) -> None:
        """Every plan write goes through here: a checked status change, state_version + 1,
        and the context generation + 1 when something attempts depend on changed."""
        if status is not None:
            check_plan(PlanStatus(row["status"]), status)
            fields["status"] = status
        if reason is not None:
            fields["status_reason"] = reason
        fields["state_version"] = row["state_version"] + 1
        fields["context_generation"] = row["context_generation"] + (1 if bump else 0)
        fields["updated_at"] = utc_now()
        columns = ", ".join(f"{name} = ?" for name in fields)
        db.execute(
            f"UPDATE plans SET {columns} WHERE plan_id = ?",  # noqa: S608 (column names are ours)
            (*fields.values(), row["plan_id"]),
        )

    def plan(self, plan_id: str) -> sqlite3.Row:
        return self._plan(self.db, plan_id)

    def plans(self) -> list[sqlite3.Row]:
        return list(self.db.execute("SELECT * FROM plans ORDER BY created_at, plan_id"))

    def find_plan(self, plan: str) -> str:
        """The plan id `plan`, or the one plan whose id starts with it; UsageError if none."""
        ids = [str(row["plan_id"]) for row in self.plans()]
        matches = [i for i in ids if i == plan] or [i for i in ids if i.startswith(plan)]
        if len(matches) == 1:
            return matches[0]
        raise UsageError(
            f"no plan {plan!r} in the store" + (" (ambiguous)" if matches else "") + ".",
            fix="`code-runner plan list` shows the plans and their ids.",
        )

    def revision(self, plan_id: str, revision: int | None = None) -> Plan:
        number = revision if revision is not None else self.plan(plan_id)["revision"]
        row = self.db.execute(
            "SELECT data FROM revisions WHERE plan_id = ? AND revision = ?", (plan_id, number)
        ).fetchone()
        if row is None:
            raise RecordError(f"plan {plan_id} has no revision {number}.", fix="check the store.")
        return Plan.model_validate(json.loads(row["data"]))

    def next_item(self, plan_id: str) -> str | None:
        """The first item of the current revision without a completed attempt for it."""
        plan = self.revision(plan_id)
        done = {
            (row["item"], row["item_sha256"])
            for row in self.db.execute(
                "SELECT item, item_sha256 FROM attempts WHERE plan_id = ? AND state = ?"
                " AND superseded = 0",
                (plan_id, AttemptState.COMPLETED),
            )
        }
        return next((i.id for i in plan.items if (i.id, item_sha256(i)) not in done), None)

    def _active(self, db: sqlite3.Connection, plan_id: str) -> sqlite3.Row | None:
        return db.execute(  # type: ignore[no-any-return]
            "SELECT * FROM attempts WHERE plan_id = ? AND state IN (?, ?)",
            (plan_id, AttemptState.PENDING, AttemptState.RUNNING),
        ).fetchone()

    def _open_gates(self, db: sqlite3.Connection, plan_id: str) -> bool:
        checkpoint = db.execute(
            "SELECT 1 FROM checkpoints WHERE plan_id = ? AND resolved_at IS NULL", (plan_id,)
        ).fetchone()
        finding = db.execute(
            "SELECT 1 FROM findings WHERE plan_id = ? AND resolved_at IS NULL", (plan_id,)
        ).fetchone()
        return checkpoint is not None or finding is not None

    def attempt(self, attempt_id: str) -> sqlite3.Row:
        row = self.db.execute("SELECT * FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
        if row is None:
            raise RecordError(f"no attempt {attempt_id} in the plan store.", fix="check the id.")
        return row  # type: ignore[no-any-return]

    # --- queries --------------------------------------------------------------------------

    def attempts(self, plan_id: str) -> list[sqlite3.Row]:
        return list(
            self.db.execute(
                "SELECT * FROM attempts WHERE plan_id = ? ORDER BY created_at, rowid", (plan_id,)
            )
        )

    def active_attempt(self, plan_id: str) -> sqlite3.Row | None:
        return self._active(self.db, plan_id)

    def ledger(self, plan_id: str) -> list[sqlite3.Row]:
        return list(
            self.db.execute("SELECT * FROM ledger WHERE plan_id = ? ORDER BY rowid", (plan_id,))
        )

    def checkpoints(self, plan_id: str, *, open_only: bool = False) -> list[sqlite3.Row]:
        where = " AND resolved_at IS NULL" if open_only else ""
        return list(
            self.db.execute(
                f"SELECT * FROM checkpoints WHERE plan_id = ?{where} ORDER BY id",  # noqa: S608
                (plan_id,),
            )
        )

    def findings(self, plan_id: str, *, owed_only: bool = False) -> list[sqlite3.Row]:
        """Findings; `owed_only`: saved but not yet acted on (a crash before settlement)."""
        where = " AND escalated_at IS NULL" if owed_only else ""
        return list(
            self.db.execute(
                f"SELECT * FROM findings WHERE plan_id = ?{where} ORDER BY id",  # noqa: S608
                (plan_id,),
            )
        )


def default_plan_id(name: str, digest: str) -> str:
    stem = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.")[:40] or "plan"
    return f"{stem}-{digest[:8]}"
