"""The idempotent user action: a person's command applied once, its outcome saved and replayed.

Every mutating `plan` command runs inside a user action: one `BEGIN IMMEDIATE` transaction
that first looks for a saved outcome of the same command against the same state and, if
there is one, replays it (same output, same exit code) and applies nothing. The action id is
`--action-id` when given, else derived from the command and the plan's state version; a
command repeated right after it was applied (the state it left unchanged since) is the
same action too. A refusal is saved and replayed like any outcome; an error that is not a
refusal (storage, interruption) saves nothing, so the command can simply be run again.

An action on something outside the store (an export into the source) also names that
target's state (`target`): it is part of "the same state", and an outcome is replayed only
while the target is still as that outcome left it. Such an action saves an unfinished
outcome first and its final one when the work is done (`finish_action`); recovery drops an
unfinished one whose process died, so the command runs again.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from code_runner.clock import utc_now
from code_runner.errors import UsageError
from code_runner.plans.database import PlanRefused
from code_runner.plans.model import canonical_sha256
from code_runner.plans.store import PlanStore

MAX_RESPONSE = 64 * 1024
ACTION_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

Apply = Callable[[sqlite3.Connection, sqlite3.Row], dict[str, Any]]
Saved = Callable[[sqlite3.Connection, str, dict[str, Any]], None]
UNFINISHED = "unfinished"  # the response key of an action whose work is still under way


@dataclass(frozen=True)
class ActionResult:
    response: dict[str, Any]
    replayed: bool
    key: str = ""

    @property
    def exit_code(self) -> int:
        return int(self.response.get("exit_code", 0))

    @property
    def refused(self) -> bool:
        return "refused" in self.response


def check_action_id(action_id: str | None) -> str | None:
    if action_id is not None and not ACTION_ID.fullmatch(action_id):
        raise UsageError(
            f"{action_id!r} is not an action id.", fix="give a lowercase UUID v4, or leave it out."
        )
    return action_id


def run_action(
    store: PlanStore,
    plan_id: str,
    kind: str,
    request: dict[str, Any],
    apply: Apply,
    *,
    action_id: str | None = None,
    target: str | None = None,
    saved_hook: Saved | None = None,
) -> ActionResult:
    """Apply `apply` once for this command against this state; replay it otherwise.

    `target`: the state of what the action changes outside the store; `saved_hook` runs in
    the same transaction once the outcome is saved, with the action's key."""
    request_hash = canonical_sha256({"kind": kind, "plan_id": plan_id, "request": request})
    with store.write() as db:
        row = store._plan(db, plan_id)
        state: dict[str, Any] = {"request": request_hash, "version": row["state_version"]}
        if target is not None:
            state["target"] = target
        key = check_action_id(action_id) or canonical_sha256(state)
        found = (plan_id, key, request_hash, row["state_version"], target)
        saved = _saved(db, *found, derived=action_id is None)
        if saved is not None:
            return ActionResult(saved, replayed=True, key=key)
        db.execute("SAVEPOINT action")
        try:
            response = apply(db, row)
        except PlanRefused as exc:
            db.execute("ROLLBACK TO action")
            response = {"exit_code": exc.exit_code, "refused": exc.message, "fix": exc.fix}
        db.execute("RELEASE action")
        response.setdefault("exit_code", 0)
        response.setdefault("kind", kind)
        response["state_version"] = store._plan(db, plan_id)["state_version"]
        db.execute(
            "INSERT INTO user_actions VALUES (?, ?, ?, ?, ?, ?)",
            (plan_id, key, kind, request_hash, _fit(response), utc_now()),
        )
        if saved_hook is not None:
            saved_hook(db, key, response)
    return ActionResult(response, replayed=False, key=key)


def finish_action(db: sqlite3.Connection, plan_id: str, key: str, response: dict[str, Any]) -> None:
    """Replace an unfinished action's saved outcome by its final one (in the caller's
    transaction); `target_after` in it is the target's state the work left."""
    final = {k: v for k, v in response.items() if k != UNFINISHED}
    db.execute(
        "UPDATE user_actions SET response = ? WHERE plan_id = ? AND action_id = ?",
        (_fit(final), plan_id, key),
    )


def _fit(response: dict[str, Any]) -> str:
    text = json.dumps(response, sort_keys=True)
    if len(text) > MAX_RESPONSE:  # keep what a replay needs, whole
        kept = {k: str(v)[:4000] for k, v in response.items() if k != "exit_code"}
        text = json.dumps({**kept, "exit_code": response["exit_code"]}, sort_keys=True)
    return text


def _saved(
    db: sqlite3.Connection,
    plan_id: str,
    key: str,
    request_hash: str,
    version: int,
    target: str | None,
    *,
    derived: bool,
) -> dict[str, Any] | None:
    row = db.execute(
        "SELECT request_hash, response FROM user_actions WHERE plan_id = ? AND action_id = ?",
        (plan_id, key),
    ).fetchone()
    if row is not None:
        if row["request_hash"] != request_hash:
            raise UsageError(
                f"action id {key} was already used for another command.",
                fix="use a new --action-id for a new command (or leave it out).",
            )
        response: dict[str, Any] = json.loads(row["response"])
        if response.get(UNFINISHED):
            raise UsageError(
                f"action {key} is still under way, or its process died.",
                fix="wait for it; `code-runner gc` settles what a dead one left.",
            )
        if derived and response.get("target_after", target) != target:
            # the target went back to how it was before (a deleted branch): not that outcome
            db.execute(
                "DELETE FROM user_actions WHERE plan_id = ? AND action_id = ?", (plan_id, key)
            )
            return None
        return response
    if not derived:
        return None
    last = db.execute(
        "SELECT response FROM user_actions WHERE plan_id = ? AND request_hash = ?"
        " ORDER BY rowid DESC LIMIT 1",
        (plan_id, request_hash),
    ).fetchone()
    if last is None:
        return None
    response = json.loads(last["response"])
    same = response.get("state_version") == version
    return response if same and response.get("target_after", target) == target else None


def drop_action(db: sqlite3.Connection, plan_id: str, key: str) -> None:
    """Forget an unfinished action whose work was interrupted: the command may run again."""
    db.execute("DELETE FROM user_actions WHERE plan_id = ? AND action_id = ?", (plan_id, key))


def saved_response(db: sqlite3.Connection, plan_id: str, key: str) -> dict[str, Any] | None:
    row = db.execute(
        "SELECT response FROM user_actions WHERE plan_id = ? AND action_id = ?", (plan_id, key)
    ).fetchone()
    return json.loads(row["response"]) if row is not None else None
