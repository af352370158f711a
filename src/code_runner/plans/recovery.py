"""Recovery: finish what a dead plan process left, before anything else runs.

It runs first in every `plan run` and `plan resume` and in `gc`, always under the plan's
lock (so the owner of every active attempt is gone). In order: the dead owner's processes
are killed; what its workspace holds is saved as the attempt's partial patch; every row it
left active is finalised by the store's one settlement mapping, in one transaction; its
workspaces, sandbox groups and attempt refs are removed; then owed work is paid (a saved
finding, a scope pause, a protected-change gate) before any item may be admitted.
A workspace a live run could not release (its plan paused "needs recovery") is removed
here too; one that still cannot be removed stops the start before any admission.

An export left `exporting` by a dead process (its export lock free) is settled too, here and
first in every `plan export`: a half-applied `--apply` is repaired from its journals (rolled
back, or its landed commit finished), a half-written patch series is removed, and a branch
is read back. The row ends `done` when the target holds the whole export (its action's
outcome saved, so the same command replays it), else `abandoned` (its action forgotten, so
the same command runs again).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from code_runner import dirs, files
from code_runner.apply import repair_stale
from code_runner.clock import utc_now
from code_runner.errors import CodeRunnerError, EnvironmentProblem, LockHeld, RecordError
from code_runner.plans.export import ExportRequest, exports, partial_dir, target_state
from code_runner.plans.export_apply import landed_steps
from code_runner.plans.lock import export_lock, plan_lock
from code_runner.plans.report import emit, record_dir
from code_runner.plans.runner_repo import runner_repo
from code_runner.plans.states import AttemptState, PlanStatus, check_plan
from code_runner.plans.store import PlanStore
from code_runner.plans.user_action import drop_action, finish_action, saved_response
from code_runner.proc import kill_run_processes
from code_runner.record import RecordPaths, RunRecord
from code_runner.repo import git
from code_runner.runner.leases import drop as drop_lease
from code_runner.sandbox.cgroups import remove_leftovers
from code_runner.workspace import remove_root

RUN_ID_FILE = "run_id"
PARTIAL_PATCH = "ATTEMPT.partial.patch"
MAX_PARTIAL = 10 * 1024 * 1024
PARTIAL_DEADLINE_S = 60.0


@dataclass
class Recovered:
    """What recovery did for one plan."""

    plan_id: str
    settled: list[dict[str, str]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    owed: list[str] = field(default_factory=list)
    exports: list[dict[str, Any]] = field(default_factory=list)
    skipped: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_id_of(record: str | None) -> str | None:
    if not record:
        return None
    with contextlib.suppress(OSError):
        return (Path(record) / RUN_ID_FILE).read_text().strip() or None
    return None


def recover_plan(
    store: PlanStore, plan_id: str, emit: Callable[..., None] | None = None
) -> Recovered:
    """Everything a dead owner left of `plan_id`; the caller holds the plan lock."""
    done = Recovered(plan_id)
    partial: dict[str, str] = {}
    for row in store.attempts(plan_id):
        run_id = run_id_of(row["record_dir"])
        if run_id is None:
            continue
        workspace = dirs.workspaces_dir() / run_id
        if not AttemptState(row["state"]).active:
            if _remove_workspace(workspace, row["item"]):  # its release failed in the run
                done.removed.append(str(workspace))
            continue
        kill_run_processes(run_id)
        saved = save_partial(workspace, row["parent"], Path(row["record_dir"]))
        if saved is not None:
            partial[row["id"]] = saved
        if _remove_workspace(workspace, row["item"]):
            done.removed.append(str(workspace))
        remove_leftovers(run_id)
        _abandon(Path(row["record_dir"]), row["item"], run_id)
        drop_lease(run_id)
    for settled in store.recover(plan_id, partial=partial):
        done.settled.append({"attempt": settled.attempt_id, "state": settled.state.value})
        if emit is not None:
            emit("attempt_recovered", attempt=settled.attempt_id, state=settled.state.value)
    drop_attempt_refs(store, plan_id)
    done.owed = pay_owed(store, plan_id)
    store.end_run(plan_id, "the plan process stopped")
    done.exports = recover_exports(store, plan_id)
    return done


def _remove_workspace(workspace: Path, item: str) -> bool:
    """Remove a workspace a run left (its overlay's mounts first, then its own files); True
    when there was one. One that cannot be removed stops recovery before any admission."""
    if not (workspace.exists() or workspace.is_symlink()):
        return False
    try:
        remove_root(workspace)
    except OSError as exc:
        raise EnvironmentProblem(
            f"the workspace {workspace} left by {item} cannot be removed: {exc.strerror or exc}.",
            fix="take down what is mounted in it (or make it removable), then start the plan"
            " again; nothing runs until it is gone.",
        ) from None
    return True


def recover_exports(
    store: PlanStore, plan_id: str, *, locked: bool = False
) -> list[dict[str, Any]]:
    """Settle every export of the plan a dead process left `exporting` (none while a live
    export holds the lock; `locked`: the caller holds it)."""
    if not any(row["state"] == "exporting" for row in exports(store, plan_id)):
        return []
    try:
        with contextlib.nullcontext() if locked else export_lock(plan_id):
            rows = [row for row in exports(store, plan_id) if row["state"] == "exporting"]
            return [_recover_export(store, row) for row in rows]
    except LockHeld:
        return []


def _recover_export(store: PlanStore, row: sqlite3.Row) -> dict[str, Any]:
    plan = store.plan(row["plan_id"])
    out = record_dir(row["plan_id"], plan["settings"])
    detail: dict[str, Any] = json.loads(row["detail"] or "{}")
    source = git.open_source(Path(plan["source_dir"]))
    req = ExportRequest(row["kind"], row["target"])
    if row["kind"] == "branch":
        whole = target_state(req, source) == f"branch:{row['head']}"
        note = "the branch had been moved" if whole else "the branch was left as it was"
    elif row["kind"] == "patches":
        files.force_rmtree(partial_dir(Path(row["target"]), row["id"]))
        whole = (Path(row["target"]) / "series").is_file()
        note = "the series was in place" if whole else "the half-written series was removed"
    else:
        repairs = repair_stale(source_git_dir=str(source.git_dir))
        names = detail.get("step_names") or []
        landed = landed_steps(out / "exports" / str(row["id"]), names)
        whole = len(landed) == len(names)
        note = "; ".join(f"{r.run_id}: {r.action}" for r in repairs) or "nothing to repair"
        detail["landed"] = landed
    state = "done" if whole else "abandoned"
    detail.update(
        recovered=f"the export process died; {note}", target_after=target_state(req, source)
    )
    with store.write() as db:
        db.execute(
            "UPDATE exports SET state = ?, detail = ?, updated_at = ? WHERE id = ?",
            (state, files.dumps(detail), utc_now(), row["id"]),
        )
        saved = saved_response(db, row["plan_id"], row["action_id"]) if row["action_id"] else None
        if saved is not None and whole:
            finish_action(db, row["plan_id"], row["action_id"], {**saved, **detail})
        elif saved is not None:
            drop_action(db, row["plan_id"], row["action_id"])
    emit(out, "export_recovered", plan=row["plan_id"], export=row["id"], state=state, note=note)
    return {"export": row["id"], "kind": row["kind"], "state": state, "note": note}


def save_partial(workspace: Path, parent: str, record_dir: Path) -> str | None:
    """The workspace's changes against the parent as a bounded patch in the record."""
    repo = git.Repo(git_dir=workspace / "git", work_tree=workspace / "wt")
    if not (repo.git_dir / "HEAD").exists() or not (workspace / "wt").is_dir():
        return None
    env = {"GIT_INDEX_FILE": str(workspace / "partial.index")}
    target = record_dir / PARTIAL_PATCH
    try:
        repo.run("read-tree", parent, env=env, timeout_s=PARTIAL_DEADLINE_S)
        repo.run("add", "-A", "--", ".", env=env, timeout_s=PARTIAL_DEADLINE_S)
        files.atomic_write_from(
            target,
            lambda out: repo.run(
                "diff", "--cached", "--binary", "--no-ext-diff", parent, "--",
                env=env, timeout_s=PARTIAL_DEADLINE_S, stdout_file=out,
            ),
            max_bytes=MAX_PARTIAL,
        )  # fmt: skip
    except (CodeRunnerError, OSError) as exc:
        with contextlib.suppress(OSError):
            files.atomic_write_text(target, f"# the partial patch could not be saved: {exc}\n")
        return str(target) if target.exists() else None
    return str(target)


def drop_attempt_refs(store: PlanStore, plan_id: str) -> list[str]:
    """Delete the attempt refs of attempts that did not complete (nothing else names them)."""
    repo = runner_repo(plan_id)
    if not (repo.git_dir / "HEAD").exists():
        return []
    done = {row["id"] for row in store.attempts(plan_id) if row["state"] == "completed"}
    listed = repo.repo.run(
        "for-each-ref", "--format=%(refname)", "refs/code-runner/attempts/", check=False
    )
    dropped = []
    for ref in listed.stdout.decode().split():
        if ref.rsplit("/", 1)[-1] not in done:
            repo.repo.run("update-ref", "-d", ref, check=False)
            dropped.append(ref)
    return dropped


def pay_owed(store: PlanStore, plan_id: str) -> list[str]:
    """A finding not yet acted on, then a completed item's scope pause or protected-change
    gate that no checkpoint records: the plan stops at the first one owed."""
    paid: list[str] = []
    with store.write() as db:
        row = store._plan(db, plan_id)
        status = PlanStatus(row["status"])
        if status is PlanStatus.CANCELLED:
            return paid
        owed = store.findings(plan_id, owed_only=True)
        if owed:
            db.execute(
                "UPDATE findings SET escalated_at = ? WHERE plan_id = ? AND escalated_at IS NULL",
                (utc_now(), plan_id),
            )
            _gate(store, db, row, PlanStatus.NEEDS_HUMAN, "a safety finding needs a person")
            return [f"finding of {f['item']}" for f in owed]
        for attempt in db.execute(
            "SELECT * FROM attempts WHERE plan_id = ? AND state = ? AND superseded = 0"
            " ORDER BY settled_at",
            (plan_id, AttemptState.COMPLETED),
        ).fetchall():
            result = json.loads(attempt["result"] or "{}")
            for kind, paths, gate in (
                ("scope", result.get("out_of_scope"), PlanStatus.NEEDS_AMENDMENT),
                ("approval", result.get("protected"), PlanStatus.NEEDS_APPROVAL),
            ):
                if paths and result.get("head") and not _checkpointed(db, attempt["id"], kind):
                    _owed_checkpoint(db, attempt, kind, paths, result["head"])
                    _gate(store, db, row, gate, f"owed {kind} pause of {attempt['item']}")
                    return [f"{kind} pause of {attempt['item']}"]
    return paid


def _checkpointed(db: sqlite3.Connection, attempt_id: str, kind: str) -> bool:
    found = db.execute(
        "SELECT 1 FROM checkpoints WHERE attempt_id = ? AND kind = ?", (attempt_id, kind)
    ).fetchone()
    return found is not None


def _owed_checkpoint(
    db: sqlite3.Connection, attempt: sqlite3.Row, kind: str, paths: list[str], head: str
) -> None:
    db.execute(
        "INSERT INTO checkpoints (plan_id, attempt_id, kind, item, revision, head,"
        " completed_items, paths, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            attempt["plan_id"], attempt["id"], kind, attempt["item"], attempt["revision"], head,
            json.dumps([attempt["item"]]), json.dumps(paths), utc_now(),
        ),
    )  # fmt: skip


def _gate(
    store: PlanStore, db: sqlite3.Connection, row: sqlite3.Row, gate: PlanStatus, why: str
) -> None:
    status = PlanStatus(row["status"])
    with contextlib.suppress(CodeRunnerError):
        check_plan(status, gate)
        store._update_plan(db, row, status=gate, reason=why)


def _abandon(output_dir: Path, task_id: str, run_id: str) -> None:
    with contextlib.suppress(RecordError, OSError):
        record = RunRecord.reopen(RecordPaths(output_dir, task_id))
        if record.run_id == run_id:
            record.mark_abandoned("the plan process died while this item ran")


def recover_all(*, dry_run: bool = False) -> list[Recovered]:
    """`gc`: recover every plan whose lock is free and that a dead run left unfinished."""
    from code_runner.plans.database import store_path

    if not store_path().exists():
        return []
    out: list[Recovered] = []
    with PlanStore.open() as store:
        assert isinstance(store, PlanStore)
        for row in store.plans():
            plan_id = row["plan_id"]
            unfinished = (
                store.active_attempt(plan_id) is not None
                or PlanStatus(row["status"]) is PlanStatus.RUNNING
                or any(e["state"] == "exporting" for e in exports(store, plan_id))
            )
            if not unfinished and not store.findings(plan_id, owed_only=True):
                continue
            if dry_run:
                out.append(Recovered(plan_id, skipped="dry run"))
                continue
            try:
                with plan_lock(plan_id):
                    out.append(recover_plan(store, plan_id))
            except LockHeld:
                out.append(Recovered(plan_id, skipped="its run is alive"))
    return out
